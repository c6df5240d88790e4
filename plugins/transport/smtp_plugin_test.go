package transport_test

import (
	"context"
	"io"
	"net"
	"net/http/httptest"
	"net/mail"
	"strings"
	"sync"
	"testing"

	gosmtp "github.com/emersion/go-smtp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/plugins/transport"
)

// mailbox is a real SMTP server on loopback that keeps what it receives.
type mailbox struct {
	mu   sync.Mutex
	msgs [][]byte
}

type mailSession struct{ m *mailbox }

func (s mailSession) Reset()                                 {}
func (s mailSession) Logout() error                          { return nil }
func (s mailSession) Mail(string, *gosmtp.MailOptions) error { return nil }
func (s mailSession) Rcpt(string, *gosmtp.RcptOptions) error { return nil }
func (s mailSession) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	s.m.mu.Lock()
	s.m.msgs = append(s.m.msgs, b)
	s.m.mu.Unlock()
	return err
}

func TestSMTPThroughPlugin(t *testing.T) {
	box := &mailbox{}
	srv := gosmtp.NewServer(gosmtp.BackendFunc(func(*gosmtp.Conn) (gosmtp.Session, error) { return mailSession{box}, nil }))
	srv.Domain = "localhost"
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, port, _ := net.SplitHostPort(l.Addr().String())

	path, sum := pluginBin(t, "smtp")
	p, err := transport.Launch(context.Background(), transport.Config{Name: "smtp", Path: path, SHA256: sum,
		Settings: map[string]string{"host": "127.0.0.1", "port": port, "from": "caphost@example.com", "tls": "none"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })

	r := p.Deliver(context.Background(), message(t, "smtp-intent-1"))
	assert.Equal(t, transport.Receipt{Outcome: transport.Accepted, Code: "smtp-250", ProviderRef: "<smtp-intent-1@caphost.invalid>"}, r)
	box.mu.Lock()
	defer box.mu.Unlock()
	require.Len(t, box.msgs, 1)
	msg, err := mail.ReadMessage(strings.NewReader(string(box.msgs[0])))
	require.NoError(t, err)
	assert.Equal(t, "<smtp-intent-1@caphost.invalid>", msg.Header.Get("Message-ID"))
}

// TestSMTPPluginStartTLSThroughBroker: STARTTLS runs in the plugin over
// the socket the host's broker dialled; a server certificate the system
// pool does not trust fails it before MAIL FROM, definitely, and nothing
// is delivered.
func TestSMTPPluginStartTLSThroughBroker(t *testing.T) {
	requireLandlock(t)
	box := &mailbox{}
	srv := gosmtp.NewServer(gosmtp.BackendFunc(func(*gosmtp.Conn) (gosmtp.Session, error) { return mailSession{box}, nil }))
	srv.Domain = "localhost"
	hs := httptest.NewTLSServer(nil) // only for its certificate
	srv.TLSConfig = hs.TLS
	hs.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, port, _ := net.SplitHostPort(l.Addr().String())

	p, _ := launchPlugin(t, "smtp", "smtp", map[string]string{"host": "127.0.0.1", "port": port, "from": "caphost@example.com"}, nil)
	assert.True(t, p.Sandboxed().Hosts)
	r := p.Deliver(context.Background(), message(t, "smtp-tls"))
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "smtp-io-before-data-end"}, r)
	box.mu.Lock()
	defer box.mu.Unlock()
	assert.Empty(t, box.msgs)
}

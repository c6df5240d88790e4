package smtp

import (
	"context"
	"io"
	"mime"
	"net"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	gosmtp "github.com/emersion/go-smtp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/plugins/transport"
)

// server is a real SMTP server on loopback (emersion/go-smtp) whose
// replies the test chooses.
type server struct {
	mu       sync.Mutex
	mailErr  error
	rcptErr  error
	dataErr  error
	hold     chan struct{} // when set, Data blocks until it is closed
	arrived  chan struct{}
	messages [][]byte
	rcpts    []string
}

type session struct{ s *server }

func (ss *session) Reset()        {}
func (ss *session) Logout() error { return nil }
func (ss *session) Mail(string, *gosmtp.MailOptions) error {
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	return ss.s.mailErr
}
func (ss *session) Rcpt(to string, _ *gosmtp.RcptOptions) error {
	ss.s.mu.Lock()
	defer ss.s.mu.Unlock()
	ss.s.rcpts = append(ss.s.rcpts, to)
	return ss.s.rcptErr
}
func (ss *session) Data(r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	ss.s.mu.Lock()
	ss.s.messages = append(ss.s.messages, b)
	hold, derr := ss.s.hold, ss.s.dataErr
	ss.s.mu.Unlock()
	if hold != nil {
		ss.s.arrived <- struct{}{}
		<-hold
	}
	return derr
}

func (s *server) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.messages)
}

func startServer(t *testing.T, mod func(*server)) (*server, string) {
	s := &server{arrived: make(chan struct{}, 4)}
	if mod != nil {
		mod(s)
	}
	srv := gosmtp.NewServer(gosmtp.BackendFunc(func(*gosmtp.Conn) (gosmtp.Session, error) { return &session{s}, nil }))
	srv.Domain = "localhost"
	srv.ErrorLog = nopLogger{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	if s.hold != nil {
		t.Cleanup(func() { close(s.hold) })
	}
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return s, port
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}
func (nopLogger) Println(...any)        {}

func sender(t *testing.T, port string) transport.Transport {
	tr, err := New(map[string]string{"host": "127.0.0.1", "port": port, "from": "caphost@example.com", "tls": "none",
		"message-id-domain": "notify.example"}, transport.Env{})
	require.NoError(t, err)
	return tr
}

func message(t *testing.T) transport.Message {
	rcpt, err := transport.NewRecipient("Ada <ada@example.com>")
	require.NoError(t, err)
	return transport.Message{IntentID: "01J.intent:9", Attempt: 1, Channel: "email", Recipient: rcpt, Parts: []transport.Part{
		{Name: "subject", ContentType: "text/plain", Body: []byte("Grüße")},
		{Name: "text", ContentType: "text/plain", Body: []byte("Hello, Ada.")},
		{Name: "html", ContentType: "text/html", Body: []byte("<p>Hello, Ada.</p>")},
	}}
}

func TestAcceptedCarriesTheIntentMessageID(t *testing.T) {
	s, port := startServer(t, nil)
	r := sender(t, port).Deliver(context.Background(), message(t))
	want := "<01J=2Eintent=3A9@notify.example>"
	assert.Equal(t, transport.Receipt{Outcome: transport.Accepted, Code: "smtp-250", ProviderRef: want}, r)
	require.Equal(t, 1, s.count())
	msg, err := mail.ReadMessage(strings.NewReader(string(s.messages[0])))
	require.NoError(t, err)
	assert.Equal(t, want, msg.Header.Get("Message-ID"))
	subj, err := new(mime.WordDecoder).DecodeHeader(msg.Header.Get("Subject"))
	require.NoError(t, err)
	assert.Equal(t, "Grüße", subj)
	assert.Equal(t, []string{"ada@example.com"}, s.rcpts)
	assert.True(t, strings.HasPrefix(msg.Header.Get("Content-Type"), "multipart/alternative; boundary="))
	// Every attempt of one intent has the same Message-ID.
	assert.Equal(t, want, MessageID("01J.intent:9", "notify.example"))
}

func TestRepliesAreDefinite(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*server)
		code string
	}{
		{func(s *server) { s.mailErr = &gosmtp.SMTPError{Code: 451, Message: "try later"} }, "smtp-451"},
		{func(s *server) { s.rcptErr = &gosmtp.SMTPError{Code: 550, Message: "no such user"} }, "smtp-550"},
		{func(s *server) { s.dataErr = &gosmtp.SMTPError{Code: 554, Message: "rejected"} }, "smtp-554"},
		{func(s *server) { s.dataErr = &gosmtp.SMTPError{Code: 452, Message: "full"} }, "smtp-452"},
	} {
		_, port := startServer(t, tc.mod)
		r := sender(t, port).Deliver(context.Background(), message(t))
		assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: tc.code}, r)
	}
}

func TestConnectionRefusedIsDefinite(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	require.NoError(t, l.Close())
	r := sender(t, port).Deliver(context.Background(), message(t))
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "connect-refused"}, r)
}

// TestSilentAfterDataIsIndeterminate: the server has the whole message and
// never replies to the end of DATA; past the deadline the receipt is
// Indeterminate and the server saw exactly one message.
func TestSilentAfterDataIsIndeterminate(t *testing.T) {
	s, port := startServer(t, func(s *server) { s.hold = make(chan struct{}) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r := sender(t, port).Deliver(ctx, message(t))
	assert.Equal(t, transport.Receipt{Outcome: transport.Indeterminate, Code: "timeout-after-data"}, r)
	<-s.arrived
	assert.Equal(t, 1, s.count())
}

func TestComposeRefusals(t *testing.T) {
	_, port := startServer(t, nil)
	tr := sender(t, port)
	m := message(t)
	m.Parts[0].Body = []byte("Hi\r\nBcc: x@example.com")
	assert.Equal(t, "subject-invalid", tr.Deliver(context.Background(), m).Code)
	m = message(t)
	m.Parts = append(m.Parts, transport.Part{Name: "attachment", ContentType: "application/pdf", Body: []byte("x")})
	assert.Equal(t, "part-unsupported", tr.Deliver(context.Background(), m).Code)
	rcpt, err := transport.NewRecipient("not an address")
	require.NoError(t, err)
	m = message(t)
	m.Recipient = rcpt
	assert.Equal(t, "recipient-invalid", tr.Deliver(context.Background(), m).Code)
}

func TestSettingsRefused(t *testing.T) {
	ok := map[string]string{"host": "127.0.0.1", "port": "25", "from": "a@example.com"}
	for key, bad := range map[string]string{"host": "", "port": "70000", "from": "nope", "tls": "maybe", "message-id-domain": "a..b", "relay": "x"} {
		s := map[string]string{}
		for k, v := range ok {
			s[k] = v
		}
		s[key] = bad
		_, err := New(s, transport.Env{})
		var se *transport.SettingError
		require.ErrorAs(t, err, &se, key)
		assert.Equal(t, key, se.Key)
	}
}

// TestStartTLSRequiredByDefault: without tls=none a server that offers no
// STARTTLS gets nothing, not even the envelope.
func TestStartTLSRequiredByDefault(t *testing.T) {
	s, port := startServer(t, nil)
	tr, err := New(map[string]string{"host": "127.0.0.1", "port": port, "from": "caphost@example.com"}, transport.Env{})
	require.NoError(t, err)
	r := tr.Deliver(context.Background(), message(t))
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "starttls-unavailable"}, r)
	assert.Zero(t, s.count())
	s.mu.Lock()
	assert.Empty(t, s.rcpts)
	s.mu.Unlock()
}

// TestSandboxIsTheServer: the broker may dial the configured host and
// port only, plus the network base; a host the broker could not name is
// refused.
func TestSandboxIsTheServer(t *testing.T) {
	tr, err := New(map[string]string{"host": "mail.example", "port": "587", "from": "a@example.com"}, transport.Env{})
	require.NoError(t, err)
	assert.Equal(t, transport.Sandbox{Dial: []string{"mail.example:587"}, Network: true}, tr.(transport.Sandboxed).Sandbox())
	tr, err = New(map[string]string{"host": "::1", "port": "25", "from": "a@example.com"}, transport.Env{})
	require.NoError(t, err)
	assert.Equal(t, []string{"[::1]:25"}, tr.(transport.Sandboxed).Sandbox().Dial)
	_, err = New(map[string]string{"host": "mail..example", "port": "25", "from": "a@example.com"}, transport.Env{})
	assert.Equal(t, &transport.SettingError{Key: "host", Code: "invalid"}, err)
}

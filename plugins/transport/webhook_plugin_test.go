package transport_test

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/logtest"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/plugins/transport/webhook"
)

const hookSecret = "0123456789abcdef-webhook-secret"

// holdingReceiver counts requests, verifies each signature, and holds a
// request open until release is closed when hold is set.
type holdingReceiver struct {
	mu      sync.Mutex
	n       int
	badSig  int
	hold    bool
	arrived chan struct{}
	release chan struct{}
}

func (h *holdingReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	h.n++
	if webhook.Verify([]byte(hookSecret), r.Header.Get(webhook.SignatureHeader), b, time.Now(), time.Minute) != nil {
		h.badSig++
	}
	hold := h.hold
	h.mu.Unlock()
	if hold {
		h.arrived <- struct{}{}
		<-h.release
	}
	w.WriteHeader(http.StatusOK)
}

func (h *holdingReceiver) setHold(v bool) {
	h.mu.Lock()
	h.hold = v
	h.mu.Unlock()
}

func (h *holdingReceiver) count() (int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n, h.badSig
}

func startHolding(t *testing.T) (*holdingReceiver, string) {
	h := &holdingReceiver{hold: true, arrived: make(chan struct{}, 8), release: make(chan struct{})}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(h.release) }) // runs first: frees held handlers so Close returns
	return h, srv.URL
}

func launchWebhook(t *testing.T, url string, callTimeout time.Duration) (*transport.Plugin, *recorder) {
	t.Helper()
	return launchPlugin(t, "webhook", "webhook", map[string]string{"url": url, "secret": hookSecret},
		func(c *transport.Config) { c.CallTimeout = callTimeout })
}

// TestPluginKilledMidCall: the receiver holds the request, the plugin
// process is SIGKILLed while the call is in flight: the host cannot know
// whether the receiver acted, so the receipt is Indeterminate; the
// supervisor restarts the plugin and the next call works.
func TestPluginKilledMidCall(t *testing.T) {
	h, url := startHolding(t)
	p, rec := launchWebhook(t, url, time.Minute)
	pid := transport.PluginPID(p)
	require.NotZero(t, pid)

	got := make(chan transport.Receipt, 1)
	go func() { got <- p.Deliver(context.Background(), message(t, "kill-mid-call")) }()
	wait(t, h.arrived) // the receiver holds the request: the call is in flight
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	r := wait(t, got)
	assert.Equal(t, transport.Receipt{Outcome: transport.Indeterminate, Code: "plugin-lost-after-send"}, r)

	ev := wait(t, rec.restarts)
	assert.Contains(t, []transport.RestartCause{transport.CauseExited, transport.CauseUnhealthy}, ev.cause)
	require.NoError(t, wait(t, rec.launches))
	assert.NotEqual(t, pid, transport.PluginPID(p))

	h.setHold(false)
	r = p.Deliver(context.Background(), message(t, "after-restart"))
	assert.Equal(t, transport.Receipt{Outcome: transport.Accepted, Code: "http-200"}, r)
	n, bad := h.count()
	assert.Equal(t, 2, n, "the killed call was not resent")
	assert.Zero(t, bad)
}

// TestAcceptedThenSilentIsIndeterminate: the receiver reads the whole
// request and never answers; past the deadline the receipt is
// Indeterminate and the receiver has seen exactly one request.
func TestAcceptedThenSilentIsIndeterminate(t *testing.T) {
	h, url := startHolding(t)
	p, _ := launchWebhook(t, url, 2*time.Second)
	r := p.Deliver(context.Background(), message(t, "silent"))
	assert.Equal(t, transport.Indeterminate, r.Outcome)
	assert.Equal(t, "timeout-after-send", r.Code)
	wait(t, h.arrived)
	n, bad := h.count()
	assert.Equal(t, 1, n, "no second send")
	assert.Zero(t, bad)
}

// TestWebhookPluginThroughBroker: the webhook plugin makes no socket of
// its own; the host's broker dials its URL's host and port. A delivery
// is accepted; a name that does not resolve (resolved by the host) is
// still a definite DNS failure, a refused port a definite refusal; and
// an HTTPS receiver's untrusted certificate fails the handshake the
// plugin runs over the brokered socket, before anything was sent.
func TestWebhookPluginThroughBroker(t *testing.T) {
	requireLandlock(t)
	h := &holdingReceiver{arrived: make(chan struct{}, 8), release: make(chan struct{})}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	p, _ := launchWebhook(t, srv.URL+"/hook?token=x", 5*time.Second)
	assert.True(t, p.Sandboxed().Hosts, p.Sandboxed().String())
	assert.Equal(t, transport.Receipt{Outcome: transport.Accepted, Code: "http-200"}, p.Deliver(context.Background(), message(t, "via-broker")))
	n, bad := h.count()
	assert.Equal(t, 1, n)
	assert.Zero(t, bad)

	dns, _ := launchWebhook(t, "https://no-such-host.invalid/hook", 5*time.Second)
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "dns-failed"}, dns.Deliver(context.Background(), message(t, "dns")))

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + l.Addr().String() + "/hook"
	require.NoError(t, l.Close())
	refused, _ := launchWebhook(t, closed, 5*time.Second)
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "connect-refused"}, refused.Deliver(context.Background(), message(t, "refused")))

	var tlsLog logtest.Buffer
	ts := httptest.NewUnstartedServer(h)
	ts.Config.ErrorLog = log.New(&tlsLog, "", 0)
	ts.StartTLS()
	t.Cleanup(ts.Close)
	tp, _ := launchWebhook(t, ts.URL+"/hook", 5*time.Second)
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "connect-failed"}, tp.Deliver(context.Background(), message(t, "tls")))
	require.Eventually(t, func() bool { return strings.Contains(tlsLog.String(), "TLS handshake error") }, 5*time.Second, 10*time.Millisecond)
	n, _ = h.count()
	assert.Equal(t, 1, n, "nothing reached a receiver but the first delivery")
}

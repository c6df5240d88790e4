package transport_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

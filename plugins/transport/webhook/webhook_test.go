package webhook

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/plugins/transport"
)

const secret = "0123456789abcdef-webhook-secret"

func message(t *testing.T) transport.Message {
	rcpt, err := transport.NewRecipient("https://hooks.example/ada")
	require.NoError(t, err)
	return transport.Message{IntentID: "01J-intent:7", Attempt: 3, Channel: "slack", Recipient: rcpt,
		Parts: []transport.Part{{Name: "text", ContentType: "text/plain", Body: []byte("hello <b>")}}}
}

// receiver is an HTTP server the test starts; it verifies every request's
// signature itself, as a real receiver does.
type receiver struct {
	mu       sync.Mutex
	requests []*http.Request
	bodies   [][]byte
	sigErrs  []error
}

func (rc *receiver) record(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.requests = append(rc.requests, r)
	rc.bodies = append(rc.bodies, b)
	rc.sigErrs = append(rc.sigErrs, Verify([]byte(secret), r.Header.Get(SignatureHeader), b, time.Now(), 5*time.Minute))
}

// n is the number of requests seen so far.
func (rc *receiver) n() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.requests)
}

func start(t *testing.T, status int, header http.Header) (*receiver, string) {
	rc := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.record(r)
		for k, v := range header {
			w.Header()[k] = v
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return rc, srv.URL
}

func newT(t *testing.T, url string) *Webhook {
	w, err := newWebhook(map[string]string{"url": url, "secret": secret}, transport.Env{}, time.Now)
	require.NoError(t, err)
	return w
}

func TestAcceptedIsSignedAndKeyed(t *testing.T) {
	rc, url := start(t, http.StatusAccepted, http.Header{"X-Request-Id": {"req-42"}})
	r := newT(t, url).Deliver(context.Background(), message(t))
	assert.Equal(t, transport.Receipt{Outcome: transport.Accepted, Code: "http-202", ProviderRef: "req-42"}, r)
	require.Equal(t, 1, rc.n())
	rc.mu.Lock()
	defer rc.mu.Unlock()
	req := rc.requests[0]
	assert.Equal(t, http.MethodPost, req.Method)
	assert.Equal(t, "01J-intent:7", req.Header.Get(IdempotencyHeader))
	assert.Equal(t, "3", req.Header.Get(AttemptHeader))
	assert.Equal(t, "application/json", req.Header.Get("Content-Type"))
	require.NoError(t, rc.sigErrs[0], "the receiver verifies the signature")
	assert.JSONEq(t, `{"intent_id":"01J-intent:7","attempt":3,"channel":"slack","recipient":"https://hooks.example/ada",
		"parts":[{"name":"text","content_type":"text/plain","body":"hello <b>"}]}`, string(rc.bodies[0]))
	// A wrong secret or a changed body does not verify.
	assert.ErrorIs(t, Verify([]byte("another-secret-0123456789"), req.Header.Get(SignatureHeader), rc.bodies[0], time.Now(), time.Minute), ErrSignature)
	assert.ErrorIs(t, Verify([]byte(secret), req.Header.Get(SignatureHeader), append(rc.bodies[0], ' '), time.Now(), time.Minute), ErrSignature)
	assert.ErrorIs(t, Verify([]byte(secret), req.Header.Get(SignatureHeader), rc.bodies[0], time.Now().Add(time.Hour), time.Minute), ErrSignature)
}

func TestStatusClassification(t *testing.T) {
	for _, tc := range []struct {
		status int
		header http.Header
		want   transport.Receipt
	}{
		{200, nil, transport.Receipt{Outcome: transport.Accepted, Code: "http-200"}},
		{400, nil, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "http-400"}},
		{410, http.Header{"Retry-After": {"5"}}, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "http-410"}},
		{302, http.Header{"Location": {"/elsewhere"}}, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "http-302"}},
		{408, nil, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "http-408"}},
		{429, http.Header{"Retry-After": {"7"}}, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "http-429", RetryAfter: 7 * time.Second}},
		{503, http.Header{"Retry-After": {"99999999"}}, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "http-503", RetryAfter: transport.MaxRetryAfter}},
		{500, http.Header{"Retry-After": {"soon"}}, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "http-500"}},
	} {
		rc, url := start(t, tc.status, tc.header)
		assert.Equal(t, tc.want, newT(t, url).Deliver(context.Background(), message(t)), "status %d", tc.status)
		assert.Equal(t, 1, rc.n(), "status %d: exactly one request, redirects not followed", tc.status)
	}
}

func TestRetryAfterDate(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	assert.Equal(t, 90*time.Second, RetryAfter(now.Add(90*time.Second).Format(http.TimeFormat), now))
	assert.Zero(t, RetryAfter(now.Add(-time.Minute).Format(http.TimeFormat), now))
	assert.Zero(t, RetryAfter("-3", now))
}

func TestConnectionRefusedIsDefinite(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String() + "/hook"
	require.NoError(t, l.Close())
	r := newT(t, url).Deliver(context.Background(), message(t))
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "connect-refused"}, r)
}

// TestResetAfterSendIsIndeterminate: the receiver reads the request and
// drops the connection without a response.
func TestResetAfterSendIsIndeterminate(t *testing.T) {
	rc := &receiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.record(r)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	r := newT(t, srv.URL).Deliver(context.Background(), message(t))
	assert.Equal(t, transport.Receipt{Outcome: transport.Indeterminate, Code: "reset-after-send"}, r)
	assert.Equal(t, 1, rc.n(), "never resent")
}

func TestSettingsRefused(t *testing.T) {
	for _, tc := range []struct {
		settings map[string]string
		key      string
	}{
		{map[string]string{"secret": secret}, "url"},
		{map[string]string{"url": "ftp://x/", "secret": secret}, "url"},
		{map[string]string{"url": "http://user:pw@x/", "secret": secret}, "url"},
		{map[string]string{"url": "http://x/", "secret": "short"}, "secret"},
		{map[string]string{"url": "http://x/", "secret": secret, "proxy": "http://p"}, "proxy"},
	} {
		_, err := New(tc.settings, transport.Env{})
		var se *transport.SettingError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, tc.key, se.Key)
	}
}

// TestSandboxIsTheURLHost: the broker may dial the URL's host and port
// only (what http.Transport asks for), plus the network base.
func TestSandboxIsTheURLHost(t *testing.T) {
	for url, target := range map[string]string{"http://hooks.example/x": "hooks.example:80",
		"https://hooks.example/x?q=1": "hooks.example:443", "http://127.0.0.1:8080/x": "127.0.0.1:8080",
		"https://[::1]:8443": "[::1]:8443", "https://Hooks.Example:8443/a/b": "Hooks.Example:8443"} {
		assert.Equal(t, transport.Sandbox{Dial: []string{target}, Network: true}, newT(t, url).Sandbox(), url)
	}
	for _, url := range []string{"http://hooks.example:0/x", "http://hooks.example:65536/x",
		"http://hooks.example:080/x", "http://[fe80::1%25eth0]/x", "http://a..b/x"} {
		_, err := New(map[string]string{"url": url, "secret": secret}, transport.Env{})
		var se *transport.SettingError
		require.ErrorAs(t, err, &se, url)
		assert.Equal(t, transport.SettingError{Key: "url", Code: "invalid"}, *se, url)
	}
}

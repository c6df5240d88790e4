package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
)

// payments is a handler with a side effect counter: it "creates a payment"
// and answers 201 with its id.
type payments struct {
	runs    atomic.Int32
	block   chan struct{} // when set, the handler waits on it
	entered chan struct{}
}

func (p *payments) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := p.runs.Add(1)
	if p.entered != nil {
		p.entered <- struct{}{}
	}
	if p.block != nil {
		<-p.block
	}
	body, _ := io.ReadAll(r.Body)
	switch {
	case strings.Contains(string(body), "decline"):
		MarkNoEffect(r.Context())
		http.Error(w, "declined", http.StatusPaymentRequired)
		return
	case strings.Contains(string(body), "explode"):
		panic("handler bug")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", "/v1/payments/"+string(rune('0'+n)))
	http.SetCookie(w, &http.Cookie{Name: "session", Value: "secret"})
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"payment":`+string(rune('0'+n))+`,"echo":`+string(body)+`}`)
}

func newServer(t *testing.T, addr string, h http.Handler, cfg MiddlewareConfig) *httptest.Server {
	t.Helper()
	e := newExecutor(t, addr, Config{})
	if cfg.Route == "" {
		cfg.Route = "create-payment"
	}
	if cfg.Principal == nil {
		cfg.Principal = func(r *http.Request) ([]byte, error) { return []byte(r.Header.Get("X-Tenant")), nil }
	}
	mw, err := e.Middleware(cfg, h)
	require.NoError(t, err)
	srv := httptest.NewUnstartedServer(mw)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic test's re-raised panic
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, url, key, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/payments", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Tenant", "tenant-7")
	if key != "" {
		req.Header.Set(HeaderKey, key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp, string(b)
}

func code(t *testing.T, body string) string {
	t.Helper()
	var e struct{ Code string }
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	return e.Code
}

// TestMiddlewareReplaysARetry is the draft's happy path: the first
// request runs, a retry with the same key gets the stored status, headers
// and body back without running the handler (and without Set-Cookie).
func TestMiddlewareReplaysARetry(t *testing.T) {
	rs := redistest.StartStandalone(t)
	h := &payments{}
	srv := newServer(t, rs.Addr(), h, MiddlewareConfig{})

	first, body1 := post(t, srv.URL, `"pay-1"`, `{"amount":5}`)
	require.Equal(t, http.StatusCreated, first.StatusCode)
	assert.NotEmpty(t, first.Header.Get("Set-Cookie"), "the original response is the handler's own")

	again, body2 := post(t, srv.URL, `"pay-1"`, `{"amount":5}`)
	assert.Equal(t, http.StatusCreated, again.StatusCode)
	assert.Equal(t, body1, body2)
	assert.Equal(t, first.Header.Get("Location"), again.Header.Get("Location"))
	assert.Equal(t, "application/json", again.Header.Get("Content-Type"))
	assert.Equal(t, "true", again.Header.Get(HeaderReplayed))
	assert.Empty(t, again.Header.Get("Set-Cookie"), "a session is never replayed to whoever retries")
	assert.Equal(t, int32(1), h.runs.Load())

	other, body := post(t, srv.URL, `"pay-1"`, `{"amount":6}`)
	assert.Equal(t, http.StatusUnprocessableEntity, other.StatusCode)
	assert.Equal(t, string(CodeFingerprintMismatch), code(t, body))
	assert.Equal(t, int32(1), h.runs.Load())

	// Another tenant's identical key is another scope.
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"amount":5}`))
	req.Header.Set("X-Tenant", "tenant-8")
	req.Header.Set(HeaderKey, `"pay-1"`)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusCreated, resp.StatusCode)
	assert.Equal(t, int32(2), h.runs.Load())
}

// TestStoredResponseIsCheckedBeforeReplay: a completed record whose
// payload no longer matches the digest stored beside it (changed at rest)
// is never replayed: the retry gets 500 stored-response-corrupt and the
// action does not run again.
func TestStoredResponseIsCheckedBeforeReplay(t *testing.T) {
	rs := redistest.StartStandalone(t)
	h := &payments{}
	srv := newServer(t, rs.Addr(), h, MiddlewareConfig{})
	first, _ := post(t, srv.URL, `"pay-rot"`, `{"amount":5}`)
	require.Equal(t, http.StatusCreated, first.StatusCode)

	ctx := t.Context()
	var records []string
	iter := rs.Admin().Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		if typ, err := rs.Admin().Type(ctx, iter.Val()).Result(); err == nil && typ == "hash" {
			records = append(records, iter.Val())
		}
	}
	require.NoError(t, iter.Err())
	require.Len(t, records, 1, "one completed record")
	stored, err := rs.Admin().HGet(ctx, records[0], "rp").Bytes()
	require.NoError(t, err)
	rotten := bytes.Clone(stored)
	rotten[len(rotten)-1] ^= 0x01 // one bit of the body, framing intact
	require.NoError(t, rs.Admin().HSet(ctx, records[0], "rp", rotten).Err())

	again, body := post(t, srv.URL, `"pay-rot"`, `{"amount":5}`)
	assert.Equal(t, http.StatusInternalServerError, again.StatusCode)
	assert.Equal(t, string(CodeStoredCorrupt), code(t, body))
	assert.Empty(t, again.Header.Get(HeaderReplayed))
	assert.Equal(t, int32(1), h.runs.Load(), "never run again")

}

func TestMiddlewareKeyErrors(t *testing.T) {
	rs := redistest.StartStandalone(t)
	h := &payments{}
	srv := newServer(t, rs.Addr(), h, MiddlewareConfig{})
	resp, body := post(t, srv.URL, "", `{}`)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, string(CodeKeyMissing), code(t, body))
	for _, bad := range []string{`unquoted`, `"a", "b"`, `""`, `42`} {
		resp, body := post(t, srv.URL, bad, `{}`)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, bad)
		assert.Equal(t, string(CodeKeyMalformed), code(t, body))
	}
	assert.Zero(t, h.runs.Load())

	opt := newServer(t, rs.Addr(), h, MiddlewareConfig{Optional: true})
	resp, _ = post(t, opt.URL, "", `{}`)
	assert.Equal(t, http.StatusCreated, resp.StatusCode, "optional: no key, no idempotency")
}

// TestMiddlewareInFlightIs409: a retry while the original is still
// running is 409 with Retry-After, and the handler runs once.
func TestMiddlewareInFlightIs409(t *testing.T) {
	rs := redistest.StartStandalone(t)
	h := &payments{block: make(chan struct{}), entered: make(chan struct{}, 1)}
	srv := newServer(t, rs.Addr(), h, MiddlewareConfig{})
	done := make(chan int, 1)
	go func() {
		resp, _ := post(t, srv.URL, `"slow"`, `{}`)
		done <- resp.StatusCode
	}()
	<-h.entered
	resp, body := post(t, srv.URL, `"slow"`, `{}`)
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.Equal(t, string(CodeInProgress), code(t, body))
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	close(h.block)
	assert.Equal(t, http.StatusCreated, <-done)
	assert.Equal(t, int32(1), h.runs.Load())
}

// TestMiddlewareFailureModes: a handler that marks no effect is run again
// on retry; a panicking handler fails closed (409 recovery-required on
// retry, never a second run); a store that cannot be reached is 503.
func TestMiddlewareFailureModes(t *testing.T) {
	rs := redistest.StartStandalone(t)
	h := &payments{}
	srv := newServer(t, rs.Addr(), h, MiddlewareConfig{})

	resp, _ := post(t, srv.URL, `"declined"`, `{"decline":1}`)
	assert.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	resp, _ = post(t, srv.URL, `"declined"`, `{"decline":1}`)
	assert.Equal(t, http.StatusPaymentRequired, resp.StatusCode)
	assert.Equal(t, int32(2), h.runs.Load(), "no effect: the retry runs again")

	// The panic is re-raised, so the server drops the connection; Go's
	// Transport replays a request carrying an Idempotency-Key on such a
	// drop, and that replay already meets the fail-closed record.
	if resp, err := http.DefaultClient.Do(func() *http.Request {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{"explode":1}`))
		req.Header.Set("X-Tenant", "tenant-7")
		req.Header.Set(HeaderKey, `"boom"`)
		return req
	}()); err == nil {
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusConflict, resp.StatusCode)
	}
	resp, body := post(t, srv.URL, `"boom"`, `{"explode":1}`)
	assert.Equal(t, http.StatusConflict, resp.StatusCode)
	assert.Equal(t, string(CodeRecoveryRequired), code(t, body))
	assert.Equal(t, int32(3), h.runs.Load(), "never run again after an unknown outcome")

	rs.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/payments", strings.NewReader(`{}`))
	req.Header.Set("X-Tenant", "tenant-7")
	req.Header.Set(HeaderKey, `"down"`)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, string(CodeStoreUnavailable), code(t, string(b)))
	assert.Equal(t, int32(3), h.runs.Load())
}

package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/policy"
)

// fakeBackend stands in for the host's guest surface (no Redis involved):
// it records swaps and answers with a scripted result.
type fakeBackend struct {
	mu      sync.Mutex
	guests  []host.GuestStatus
	swapErr error
	swaps   []swapCall
	block   chan struct{} // when set, SwapGuest waits on it
	entered chan struct{}
}

type swapCall struct {
	name      string
	wasm, sig []byte
}

func (f *fakeBackend) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	return mux
}

func (f *fakeBackend) CapabilityRoutes() map[string]http.Handler { return nil }

func (f *fakeBackend) Capabilities(context.Context) []capability.Status {
	return []capability.Status{{Capability: "rate-limit", State: capability.StateDisabled, Claimed: capability.R2, Readiness: capability.R2}}
}

func (f *fakeBackend) GuestKinds() []host.GuestKind {
	return []host.GuestKind{{Kind: "rate-policy", Readiness: capability.R2}}
}

func (f *fakeBackend) Guests() []host.GuestStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]host.GuestStatus(nil), f.guests...)
}

func (f *fakeBackend) SwapGuest(_ context.Context, name string, wasm, sig []byte) (host.GuestStatus, error) {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.block != nil {
		<-f.block
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.swaps = append(f.swaps, swapCall{name, wasm, sig})
	g := f.guests[0]
	if f.swapErr != nil {
		g.LastSwapOK, g.LastSwapError = false, f.swapErr.Error()
		return g, f.swapErr
	}
	g.Generation++
	g.SHA256 = fmt.Sprintf("%064x", len(wasm))
	g.LastSwapAt, g.LastSwapOK = time.Date(2026, 11, 30, 7, 0, 0, 0, time.UTC), true
	f.guests[0] = g
	return g, nil
}

const adminToken = "admin-token-0123456789abcdef"

func newFake() *fakeBackend {
	return &fakeBackend{guests: []host.GuestStatus{{
		Name: "rate-tiers", Generation: 1, SHA256: strings.Repeat("ab", 32),
		Kinds: []string{"rate-policy"}, Declared: []string{"rate-policy:free.read"},
	}}}
}

func do(srv http.Handler, method, path, token string, body []byte, hdr map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

func errCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var b httpjson.ErrorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b), rec.Body.String())
	return string(b.Code)
}

func TestAdminDisabledWithoutToken(t *testing.T) {
	f := newFake()
	srv := httpapi.New(f, httpapi.Options{})
	for _, c := range []struct{ method, path string }{{"GET", "/admin/guests"}, {"PUT", "/admin/guests/rate-tiers"}, {"GET", "/admin/capabilities"}} {
		rec := do(srv, c.method, c.path, adminToken, []byte("x"), nil)
		assert.Equal(t, http.StatusNotFound, rec.Code)
		assert.Equal(t, "not-found", errCode(t, rec))
	}
	assert.Empty(t, f.swaps)
	// A too-short token disables them too (and Validate says why).
	short := httpapi.Options{AdminToken: policy.NewSecret([]byte("short"))}
	require.ErrorIs(t, short.Validate(), httpapi.ErrAdminTokenTooShort)
	rec := do(httpapi.New(f, short), "GET", "/admin/guests", "short", nil, nil)
	assert.Equal(t, http.StatusNotFound, rec.Code)
	// The host's operations endpoints are mounted either way.
	assert.Equal(t, http.StatusOK, do(srv, "GET", "/livez", "", nil, nil).Code)
}

func TestAdminAuth(t *testing.T) {
	f := newFake()
	srv := httpapi.New(f, httpapi.Options{AdminToken: policy.NewSecret([]byte(adminToken))})
	for _, auth := range []string{"", "Bearer", "Bearer wrong-token", "Basic " + adminToken, "Bearer " + adminToken + "x", "Bearer " + adminToken[:len(adminToken)-1]} {
		req := httptest.NewRequest("GET", "/admin/guests", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		assert.Equal(t, http.StatusUnauthorized, rec.Code, auth)
		assert.Equal(t, "unauthorized", errCode(t, rec))
		assert.Contains(t, rec.Header().Get("WWW-Authenticate"), "Bearer")
		assert.NotContains(t, rec.Body.String(), adminToken)
	}
	rec := do(srv, "PUT", "/admin/guests/rate-tiers", "wrong", []byte("wasm"), nil)
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	assert.Empty(t, f.swaps, "an unauthenticated swap never reaches the host")

	rec = do(srv, "GET", "/admin/guests", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, rec.Code)
	var list httpapi.GuestList
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &list))
	require.Len(t, list.Guests, 1)
	assert.Equal(t, httpapi.GuestView{Name: "rate-tiers", Generation: 1, SHA256: strings.Repeat("ab", 32),
		Kinds: []string{"rate-policy"}, Declared: []string{"rate-policy:free.read"}}, list.Guests[0])

	rec = do(srv, "POST", "/admin/guests", adminToken, nil, nil)
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	assert.Equal(t, "method-not-allowed", errCode(t, rec))

	// GET /admin/capabilities: the host's capability report, behind the token.
	rec = do(srv, "GET", "/admin/capabilities", "wrong", nil, nil)
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	rec = do(srv, "GET", "/admin/capabilities", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, rec.Code)
	var caps httpapi.CapabilityList
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &caps))
	require.Len(t, caps.Capabilities, 1)
	assert.Equal(t, capability.StateDisabled, caps.Capabilities[0].State)
	assert.Contains(t, rec.Body.String(), `"claimed-readiness":"R2"`)
	assert.Equal(t, "rate-policy", caps.GuestKinds[0].Kind)
}

func TestAdminSwap(t *testing.T) {
	f := newFake()
	srv := httpapi.New(f, httpapi.Options{AdminToken: policy.NewSecret([]byte(adminToken))})
	sig := []byte(`{"format":"caphost-guest-signature-v1"}`)

	rec := do(srv, "PUT", "/admin/guests/rate-tiers", adminToken, []byte("\x00asm-v2"),
		map[string]string{httpapi.SignatureHeader: base64.StdEncoding.EncodeToString(sig)})
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var v httpapi.GuestView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	assert.Equal(t, uint64(2), v.Generation)
	assert.True(t, v.LastSwapOK)
	assert.Equal(t, "2026-11-30T07:00:00Z", v.LastSwapAt)
	require.Len(t, f.swaps, 1)
	assert.Equal(t, swapCall{"rate-tiers", []byte("\x00asm-v2"), sig}, f.swaps[0])

	// Unsigned (no header) and URL-safe unpadded base64 are both accepted.
	rec = do(srv, "PUT", "/admin/guests/rate-tiers", adminToken, []byte("v3"), nil)
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Nil(t, f.swaps[1].sig)
	rec = do(srv, "PUT", "/admin/guests/rate-tiers", adminToken, []byte("v4"),
		map[string]string{httpapi.SignatureHeader: base64.RawURLEncoding.EncodeToString(sig)})
	require.Equal(t, http.StatusOK, rec.Code)
	assert.Equal(t, sig, f.swaps[2].sig)

	bad := []struct {
		name   string
		path   string
		body   []byte
		hdr    map[string]string
		status int
		code   string
	}{
		{"unknown guest", "/admin/guests/other", []byte("w"), nil, 404, "unknown-guest"},
		{"not a slug", "/admin/guests/Rate_Tiers", []byte("w"), nil, 400, "invalid-field"},
		{"empty body", "/admin/guests/rate-tiers", nil, nil, 400, "invalid-field"},
		{"bad base64", "/admin/guests/rate-tiers", []byte("w"), map[string]string{httpapi.SignatureHeader: "%%%"}, 400, "invalid-field"},
		{"signature too large", "/admin/guests/rate-tiers", []byte("w"),
			map[string]string{httpapi.SignatureHeader: base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("s"), 2048))}, 400, "invalid-field"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			rec := do(srv, "PUT", c.path, adminToken, c.body, c.hdr)
			assert.Equal(t, c.status, rec.Code, rec.Body.String())
			assert.Equal(t, c.code, errCode(t, rec))
		})
	}
	assert.Len(t, f.swaps, 3, "rejected requests never reach the host")

	// A declared body above the bound is refused before it is read.
	req := httptest.NewRequest("PUT", "/admin/guests/rate-tiers", strings.NewReader("tiny"))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.ContentLength = httpapi.MaxGuestBytes + 1
	rec = httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusRequestEntityTooLarge, rec.Code)
	assert.Equal(t, "too-large", errCode(t, rec))
}

func TestAdminSwapErrors(t *testing.T) {
	cases := []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("%w: signature does not verify", host.ErrSwapUnauthorized), 422, "guest-untrusted"},
		{&plugins.SwapError{Module: "rate-tiers", Stage: "verify", Err: host.ErrGuestPolicies}, 422, "guest-invalid"},
		{&plugins.SwapError{Module: "rate-tiers", Stage: "load", Err: &plugins.GuestError{Module: "rate-tiers", Class: plugins.ClassTrap, Detail: "boom\x1b[31m"}}, 422, "guest-invalid"},
		{fmt.Errorf("%w: rate-tiers", plugins.ErrUnknownModule), 404, "unknown-guest"},
		{plugins.ErrManagerClosed, 503, "unavailable"},
		{errors.New("disk on fire"), 422, "swap-failed"},
	}
	for _, c := range cases {
		t.Run(c.code+" "+c.err.Error(), func(t *testing.T) {
			f := newFake()
			f.swapErr = c.err
			srv := httpapi.New(f, httpapi.Options{AdminToken: policy.NewSecret([]byte(adminToken))})
			rec := do(srv, "PUT", "/admin/guests/rate-tiers", adminToken, []byte("w"), nil)
			assert.Equal(t, c.status, rec.Code, rec.Body.String())
			var b httpjson.ErrorBody
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b))
			assert.Equal(t, c.code, string(b.Code))
			for _, r := range b.Detail {
				assert.True(t, r >= 0x20 && r <= 0x7e, "detail is printable ASCII: %q", b.Detail)
			}
		})
	}
}

func TestAdminOneSwapAtATime(t *testing.T) {
	f := newFake()
	f.block, f.entered = make(chan struct{}), make(chan struct{}, 1)
	srv := httpapi.New(f, httpapi.Options{AdminToken: policy.NewSecret([]byte(adminToken))})
	done := make(chan int)
	go func() { done <- do(srv, "PUT", "/admin/guests/rate-tiers", adminToken, []byte("first"), nil).Code }()
	<-f.entered
	rec := do(srv, "PUT", "/admin/guests/rate-tiers", adminToken, []byte("second"), nil)
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Equal(t, "swap-busy", errCode(t, rec))
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	close(f.block)
	assert.Equal(t, http.StatusOK, <-done)
	// Listing is never blocked by a swap.
	assert.Equal(t, http.StatusOK, do(srv, "GET", "/admin/guests", adminToken, nil, nil).Code)
}

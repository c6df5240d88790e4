package httpapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	rollbacks   []string
	rollbackErr error
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

// RollbackGuest restores the generation before the last successful swap
// (rollbackErr, when set, refuses it).
func (f *fakeBackend) RollbackGuest(_ context.Context, name string) (host.GuestStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rollbacks = append(f.rollbacks, name)
	g := f.guests[0]
	if f.rollbackErr != nil {
		return g, f.rollbackErr
	}
	g.Generation, g.PreviousGeneration = g.Generation+1, g.Generation
	g.SHA256, g.PreviousSHA256 = g.PreviousSHA256, g.SHA256
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

// slowBody is an upload that sends a few bytes and then stalls until
// released: reading is what an authenticated client on a slow link makes
// the handler do for minutes.
type slowBody struct {
	reading chan struct{} // closed once the handler has read the first bytes
	release chan struct{}
	sent    bool
}

func newSlowBody() *slowBody {
	return &slowBody{reading: make(chan struct{}), release: make(chan struct{})}
}

func (b *slowBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		close(b.reading)
		return copy(p, "\x00asm-slow"), nil
	}
	<-b.release
	return 0, io.EOF
}

func putBody(srv http.Handler, body io.Reader) *httptest.ResponseRecorder {
	req := httptest.NewRequest("PUT", "/admin/guests/rate-tiers", body)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

// TestAdminSlowUploadTakesNoSlot: the swap slot is taken once the body is
// read, not before, so one slow upload does not make every other swap
// answer 409 swap-busy while it trickles in.
func TestAdminSlowUploadTakesNoSlot(t *testing.T) {
	f := newFake()
	srv := httpapi.New(f, httpapi.Options{AdminToken: policy.NewSecret([]byte(adminToken))})
	slow := newSlowBody()
	done := make(chan *httptest.ResponseRecorder, 1)
	go func() { done <- putBody(srv, slow) }()
	<-slow.reading // the handler is inside the slow body

	rec := do(srv, "PUT", "/admin/guests/rate-tiers", adminToken, []byte("\x00asm-fast"), nil)
	require.Equal(t, http.StatusOK, rec.Code, "a swap while another upload is being read: %s", rec.Body.String())

	close(slow.release)
	rec = <-done
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, f.swaps, 2)
	assert.Equal(t, []byte("\x00asm-fast"), f.swaps[0].wasm, "the fast upload swapped first")
	assert.Equal(t, []byte("\x00asm-slow"), f.swaps[1].wasm)
}

// TestAdminUploadDeadline: a body that stalls is answered 408
// upload-timeout once the upload's own deadline passes (here shorter than
// any server timeout: the test server has none), and nothing reaches the
// host.
func TestAdminUploadDeadline(t *testing.T) {
	f := newFake()
	ts := httptest.NewServer(httpapi.New(f, httpapi.Options{AdminToken: policy.NewSecret([]byte(adminToken)), UploadTimeout: 100 * time.Millisecond}))
	defer ts.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("\x00asm")) }() // and then nothing
	req, err := http.NewRequest("PUT", ts.URL+"/admin/guests/rate-tiers", pr)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := ts.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusRequestTimeout, resp.StatusCode, string(body))
	assert.Contains(t, string(body), `"code":"upload-timeout"`)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Empty(t, f.swaps)
}

// TestAdminUploadsAreBounded: at most MaxConcurrentUploads bodies are read
// at once (each may hold MaxGuestBytes); a further upload is refused at once.
func TestAdminUploadsAreBounded(t *testing.T) {
	f := newFake()
	srv := httpapi.New(f, httpapi.Options{AdminToken: policy.NewSecret([]byte(adminToken))})
	var slow []*slowBody
	done := make(chan int, httpapi.MaxConcurrentUploads)
	for range httpapi.MaxConcurrentUploads {
		b := newSlowBody()
		slow = append(slow, b)
		go func() { done <- putBody(srv, b).Code }()
		<-b.reading
	}
	rec := do(srv, "PUT", "/admin/guests/rate-tiers", adminToken, []byte("\x00asm-more"), nil)
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Equal(t, "swap-busy", errCode(t, rec))
	assert.Equal(t, "1", rec.Header().Get("Retry-After"))
	for _, b := range slow {
		close(b.release)
		assert.Equal(t, http.StatusOK, <-done)
	}
	assert.Equal(t, http.StatusOK, do(srv, "PUT", "/admin/guests/rate-tiers", adminToken, []byte("\x00asm-after"), nil).Code)
}

func TestAdminRollback(t *testing.T) {
	f := newFake()
	srv := httpapi.New(f, httpapi.Options{AdminToken: policy.NewSecret([]byte(adminToken))})
	rec := do(srv, "POST", "/admin/guests/rate-tiers/rollback", "wrong", nil, nil)
	assert.Equal(t, http.StatusUnauthorized, rec.Code)
	rec = do(srv, "GET", "/admin/guests/rate-tiers/rollback", adminToken, nil, nil)
	assert.Equal(t, http.StatusMethodNotAllowed, rec.Code)
	rec = do(srv, "POST", "/admin/guests/other/rollback", adminToken, nil, nil)
	assert.Equal(t, http.StatusNotFound, rec.Code)
	assert.Equal(t, "unknown-guest", errCode(t, rec))
	assert.Empty(t, f.rollbacks, "refused requests never reach the host")

	f.guests[0].PreviousGeneration, f.guests[0].PreviousSHA256 = 0, strings.Repeat("cd", 32)
	rec = do(srv, "POST", "/admin/guests/rate-tiers/rollback", adminToken, nil, nil)
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	var v httpapi.GuestView
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
	assert.Equal(t, uint64(2), v.Generation)
	assert.Equal(t, strings.Repeat("cd", 32), v.SHA256)
	assert.Equal(t, uint64(1), v.PreviousGeneration)
	assert.Equal(t, strings.Repeat("ab", 32), v.PreviousSHA256)

	for _, c := range []struct {
		err    error
		status int
		code   string
	}{
		{fmt.Errorf("%w: rate-tiers", plugins.ErrNoPrevious), 409, "no-previous-generation"},
		{&plugins.SwapError{Module: "rate-tiers", Stage: plugins.StageCapability, Err: host.ErrGuestPolicies}, 422, "guest-invalid"},
		{plugins.ErrManagerClosed, 503, "unavailable"},
	} {
		f.rollbackErr = c.err
		rec := do(srv, "POST", "/admin/guests/rate-tiers/rollback", adminToken, nil, nil)
		assert.Equal(t, c.status, rec.Code, rec.Body.String())
		assert.Equal(t, c.code, errCode(t, rec))
	}
	assert.Len(t, f.rollbacks, 4)

	// A rollback waits for no upload, but shares the swap slot.
	f.rollbackErr = nil
	f.block, f.entered = make(chan struct{}), make(chan struct{}, 1)
	done := make(chan int)
	go func() { done <- do(srv, "PUT", "/admin/guests/rate-tiers", adminToken, []byte("\x00asm"), nil).Code }()
	<-f.entered
	rec = do(srv, "POST", "/admin/guests/rate-tiers/rollback", adminToken, nil, nil)
	assert.Equal(t, http.StatusConflict, rec.Code)
	assert.Equal(t, "swap-busy", errCode(t, rec))
	close(f.block)
	assert.Equal(t, http.StatusOK, <-done)
}

package extism

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

func requireClass(t *testing.T, err error, c plugins.Class) *plugins.GuestError {
	t.Helper()
	var ge *plugins.GuestError
	require.ErrorAs(t, err, &ge, "want *plugins.GuestError, got %T %v", err, err)
	require.Equal(t, c, ge.Class, "error: %v", err)
	require.ErrorIs(t, err, c)
	return ge
}

func loadExt(t testing.TB, e *Engine, name string, lim plugins.Limits) *Module {
	t.Helper()
	lim.Grants = plugins.AllGrants // which imports link is tested in grants_test.go
	m, err := e.Load(context.Background(), name, th.wasm[name], lim)
	require.NoError(t, err)
	return m
}

func loadNative(t testing.TB, e *plugins.Engine, name string, lim plugins.Limits) *plugins.Module {
	t.Helper()
	m, err := e.Load(context.Background(), name, th.wasm[name], lim)
	require.NoError(t, err)
	return m
}

// TestFlavoursAgree proves both flavours of the rate-policy guest, and its
// AssemblyScript twin, declare the same policies and give identical answers
// (or identical refusals) over a matrix of request attributes.
func TestFlavoursAgree(t *testing.T) {
	ctx := context.Background()
	// This test compares answers, not deadlines (TestHostileGuest covers those):
	// a generous call timeout keeps a loaded, race-instrumented machine from
	// turning slowness into a spurious failure.
	lim := plugins.Limits{CallTimeout: 5 * time.Second, InitTimeout: 30 * time.Second}
	nat := loadNative(t, newNative(t, plugins.Config{}), "rate-policy", lim)
	ext := loadExt(t, newExtism(t, plugins.Config{}), "rate-policy-extism", lim)
	as := loadAS(t, newExtism(t, plugins.Config{}), lim)
	assert.Equal(t, nat.Description(), ext.Description())
	assert.Equal(t, nat.Description(), as.Description())

	methods := []string{"GET", "get", "HEAD", "OPTIONS", "POST", "put", "PATCH", "DELETE", "BREW", "", "poſt", "GETS"}
	routes := []string{"/x", "/search", "/search/items", "/searchx"}
	plans := []string{"", "free", "pro", "enterprise", "platinum"}
	tiers := []string{"", "pro", "enterprise"}
	if raceEnabled {
		// wazero is slow under the race detector: a diagonal of the matrix.
		methods, plans = methods[:4], plans[:3]
	}
	n := 0
	for _, method := range methods {
		for _, route := range routes {
			for _, plan := range plans {
				for _, tier := range tiers {
					req := &abi.RateSelectRequest{Route: route, Method: method, APIKeyPlan: plan, PrincipalTier: tier,
						ClientIPClass: "public", Attrs: []abi.Attr{{Name: "region", Value: "eu"}}}
					want, werr := nat.RateSelect(ctx, req)
					for _, g := range []*Module{ext, as} {
						got, gerr := g.RateSelect(ctx, req)
						var wse, gse *abi.StatusError
						if werr != nil {
							require.ErrorAs(t, werr, &wse, "%s %+v", g.Name(), req)
							require.ErrorAs(t, gerr, &gse, "%s %+v", g.Name(), req)
							assert.Equal(t, wse.Code, gse.Code, "%s %+v", g.Name(), req)
							continue
						}
						require.NoError(t, gerr, "%s %+v", g.Name(), req)
						require.Equal(t, want, got, "%s %+v", g.Name(), req)
						n++
					}
				}
			}
		}
	}
	assert.Positive(t, n)
}

func TestHostFunctionsAndRefusals(t *testing.T) {
	ctx := context.Background()
	o := newObserved(t, "rate-policy.invalid-request", "test.allowed")
	e, obs := o.e, o.obs
	m := loadExt(t, e, "rate-policy-extism", plugins.Limits{})
	assert.Contains(t, o.log(), "guest_msg=\"rate-policy-extism described\"")

	// A refused request is a status, not a guest failure, and the guest
	// counted it through the host function.
	_, err := m.RateSelect(ctx, &abi.RateSelectRequest{Route: "/x", Method: "BREW"})
	require.ErrorIs(t, err, abi.CodeInvalidRequest)
	assert.Equal(t, []string{"rate-policy.invalid-request"}, obs.got())

	_, err = m.Call(ctx, abi.ExportRender, nil, nil)
	requireClass(t, err, plugins.ClassNotDeclared)

	small := loadExt(t, e, "rate-policy-extism", plugins.Limits{MaxInputBytes: 16})
	_, err = small.RateSelect(ctx, &abi.RateSelectRequest{Route: "/a-long-route-over-sixteen-bytes", Method: "GET"})
	requireClass(t, err, plugins.ClassInputTooLarge)

	// Native guests are not Extism modules: one imports caphost_v1, and
	// every one has (ptr, len) -> i64 exports.
	_, err = e.Load(ctx, "hostcalls", th.wasm["hostcalls"], plugins.Limits{})
	ge := requireClass(t, err, plugins.ClassForbiddenImport)
	assert.Contains(t, ge.Detail, "caphost_v1.log")
	_, err = e.Load(ctx, "rate-policy", th.wasm["rate-policy"], plugins.Limits{})
	requireClass(t, err, plugins.ClassABIMismatch)

	_, err = e.Load(ctx, "Bad Name", th.wasm["rate-policy-extism"], plugins.Limits{})
	requireClass(t, err, plugins.ClassInvalidModule)
	_, err = e.Load(ctx, "junk", []byte("\x00asm junk"), plugins.Limits{})
	requireClass(t, err, plugins.ClassInvalidModule)
	_, err = e.Load(ctx, "x", th.wasm["rate-policy-extism"], plugins.Limits{PoolSize: 1 << 20})
	require.ErrorIs(t, err, plugins.ErrLimitExceedsCap)

	require.NoError(t, m.Close(ctx))
	_, err = m.RateSelect(ctx, &abi.RateSelectRequest{Route: "/x", Method: "GET"})
	requireClass(t, err, plugins.ClassClosed)
}

// TestHostileGuest: every failure is a typed GuestError, the instance is
// replaced, and the module keeps serving.
func TestHostileGuest(t *testing.T) {
	ctx := context.Background()
	e := newExtism(t, plugins.Config{CountEvents: []string{"test.allowed"}})
	// The deadline is tested on a module of its own: every other call gets a
	// deadline no loaded machine meets by accident.
	looping := loadExt(t, e, "testguest", plugins.Limits{CallTimeout: 200 * time.Millisecond, PoolSize: 1})
	start := time.Now()
	_, err := looping.RateSelect(ctx, &abi.RateSelectRequest{Route: "/loop", Method: "GET"})
	requireClass(t, err, plugins.ClassDeadline)
	assert.Less(t, time.Since(start), 5*time.Second)

	m := loadExt(t, e, "testguest", plugins.Limits{CallTimeout: 10 * time.Second, MaxHostCalls: 100, PoolSize: 1})
	sel := func(route string) error {
		_, err := m.RateSelect(ctx, &abi.RateSelectRequest{Route: route, Method: "GET"})
		return err
	}
	requireClass(t, sel("/spam"), plugins.ClassHostCallLimit)
	ge := requireClass(t, sel("/trap"), plugins.ClassTrap)
	assert.Contains(t, ge.Detail, "guest panicked on purpose")
	requireClass(t, sel("/undeclared"), plugins.ClassMalformedOutput)
	require.NoError(t, sel("/ok"))
	// The other kinds' typed calls carry the same re-checks: the echo codec
	// answers any schema at version 1, which for an undeclared schema is
	// malformed output.
	enc, err := plugins.CodecEncode(ctx, m, &abi.CodecEncodeRequest{Schema: "echo", Value: []byte("v")})
	require.NoError(t, err)
	assert.Equal(t, []byte("v"), enc.Payload)
	_, err = plugins.CodecEncode(ctx, m, &abi.CodecEncodeRequest{Schema: "undeclared", Value: []byte("v")})
	ge = requireClass(t, err, plugins.ClassMalformedOutput)
	assert.Contains(t, ge.Error(), "encoded undeclared schema")
	_, err = plugins.CodecDecode(ctx, m, &abi.CodecDecodeRequest{Schema: "echo", StoredVersion: 1})
	require.ErrorIs(t, err, abi.CodeUnsupported)

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = m.RateSelect(short, &abi.RateSelectRequest{Route: "/loop", Method: "GET"})
	requireClass(t, err, plugins.ClassDeadline)

	out, err := m.Call(ctx, abi.ExportCodecEncode, (&abi.CodecEncodeRequest{Schema: "echo", Value: []byte("hi")}).AppendTo(nil), nil)
	require.NoError(t, err)
	body, err := abi.ParseFrame(out)
	require.NoError(t, err)
	var resp abi.CodecEncodeResponse
	require.NoError(t, resp.Unmarshal(body))
	assert.Equal(t, []byte("hi"), resp.Payload)

	// The cap leaves room for describe (~300 bytes), not for this payload.
	tiny := loadExt(t, e, "testguest", plugins.Limits{MaxOutputBytes: 400})
	_, err = tiny.Call(ctx, abi.ExportCodecEncode, (&abi.CodecEncodeRequest{Schema: "echo", Value: make([]byte, 500)}).AppendTo(nil), nil)
	requireClass(t, err, plugins.ClassOutputTooLarge)
}

func TestConcurrentCalls(t *testing.T) {
	ctx := context.Background()
	m := loadExt(t, newExtism(t, plugins.Config{}), "rate-policy-extism", plugins.Limits{PoolSize: 2})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 5 {
				resp, err := m.RateSelect(ctx, &abi.RateSelectRequest{Route: "/x", Method: "GET", APIKeyPlan: "pro"})
				if err == nil && resp.Selections[0].PolicyID != "pro.read" {
					err = errors.New("wrong answer")
				}
				if err != nil {
					errs <- err
				}
				_ = g + i
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

type events struct {
	mu sync.Mutex
	ev []string
	plugins.NopObserver
}

func (o *events) GuestEvent(_, ev string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ev = append(o.ev, ev)
}

func (o *events) got() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.ev...)
}

// observed is an Extism engine whose debug log and allowlisted guest
// events a test reads.
type observed struct {
	e    *Engine
	obs  *events
	mu   sync.Mutex
	logs bytes.Buffer
}

func newObserved(t *testing.T, countEvents ...string) *observed {
	t.Helper()
	o := &observed{obs: &events{}}
	o.e = newExtism(t, plugins.Config{CountEvents: countEvents, Observer: o.obs,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&o.mu, &o.logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	return o
}

func (o *observed) log() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.logs.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

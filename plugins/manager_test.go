package plugins

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors"
)

// The manager tests need four more guests; adding them here (rather than in
// main_test.go) keeps the warm-up run compiling them too, since it runs the
// same init.
func init() {
	testGuests = append(testGuests, "guests/cache-region", "plugins/testdata/guests/ratev2", "plugins/testdata/guests/ratebad",
		"plugins/testdata/guests/rateundeclared")
}

type swapRec struct {
	mu     sync.Mutex
	ok     int
	failed map[string]int
	active map[string]uint64
}

func newSwapRec() *swapRec { return &swapRec{failed: map[string]int{}, active: map[string]uint64{}} }

func (r *swapRec) Swapped(_ string, _ uint64, ok bool, class string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.ok++
	} else {
		r.failed[class]++
	}
}

func (r *swapRec) ActiveGeneration(module string, g uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active[module] = g
}

func wasmOf(t testing.TB, name string) []byte {
	t.Helper()
	b, ok := th.wasm[name]
	require.True(t, ok, "guest %s was not built", name)
	return b
}

// A guest that is not built with the SDK can answer a selection outside its
// declarations; the typed call refuses it (ErrUndeclaredSelection, malformed
// output) and the suite counts exactly that check as failed, not the
// "answers" check. scriptedGuest stands in for such a guest: it answers
// through DecodeResponse as every flavour does.
func TestConformanceUndeclaredSelectionFailsItsCheck(t *testing.T) {
	ctx := context.Background()
	g := &scriptedGuest{decl: abi.RatePolicyDecl{ID: "s.ok", Revision: 1, Algorithm: abi.AlgFixedWindow,
		Limit: 10, WindowMs: 1000, MaximumCost: 2}}
	for _, route := range []string{"/orders/42", "/search/items"} {
		_, err := RateSelect(ctx, g, &abi.RateSelectRequest{Route: route, Method: "GET"})
		require.ErrorIs(t, err, ErrUndeclaredSelection, route)
		var ge *GuestError
		require.ErrorAs(t, err, &ge)
		assert.Equal(t, ClassMalformedOutput, ge.Class)
	}

	rep := CheckConformance(ctx, g, nil)
	failed := failedChecks(rep)
	require.Len(t, failed, 1, rep.Summary())
	detail, ok := failed["select returns declared policy ids with bounded costs"]
	require.True(t, ok, rep.Summary())
	// The detail is bounded; its first entries are the undeclared policy's.
	assert.Contains(t, detail, "GET /orders/42 plan= tier=: ")
	assert.Contains(t, detail, ErrUndeclaredSelection.Error())
}

// An SDK-built guest whose policy function selects outside its declarations
// answers with an internal status (the SDK refuses the selection itself):
// an internal status is never an answer, so "select answers on the
// attribute matrix" fails, naming the SDK's reason, as does the check of
// unknown inputs (the bad routes get them too), and nothing else.
func TestConformanceInternalStatusIsNoAnswer(t *testing.T) {
	ctx := context.Background()
	m := load(t, newEngine(t, Config{}), "rateundeclared", Limits{CallTimeout: 5 * time.Second}) // answers, not deadlines
	rep := CheckConformance(ctx, m, nil)
	failed := failedChecks(rep)
	require.Len(t, failed, 2, rep.Summary())
	for _, name := range []string{"select answers on the attribute matrix", "select handles unknown plans, tiers and routes"} {
		detail, ok := failed[name]
		require.True(t, ok, rep.Summary())
		assert.Contains(t, detail, "GET /orders/42 plan=")
		assert.Contains(t, detail, "internal: selected undeclared policy")
	}
}

// failedChecks maps each failed check of rep to its detail.
func failedChecks(rep ConformanceReport) map[string]string {
	failed := map[string]string{}
	for _, c := range rep.Checks {
		if c.Status == CheckFail {
			failed[c.Name] = c.Detail
		}
	}
	return failed
}

// scriptedGuest is a rate-policy Guest without Wasm: /orders/42 selects an
// undeclared policy, /search/items a cost above the maximum, anything else
// its one policy at cost 1.
type scriptedGuest struct{ decl abi.RatePolicyDecl }

func (g *scriptedGuest) Name() string { return "scripted" }
func (g *scriptedGuest) Description() *abi.Description {
	return &abi.Description{Kinds: []abi.Kind{abi.KindRatePolicy}, RatePolicies: []abi.RatePolicyDecl{g.decl}}
}
func (g *scriptedGuest) RatePolicy(id string) (*abi.RatePolicyDecl, bool) {
	if id == g.decl.ID {
		return &g.decl, true
	}
	return nil, false
}
func (g *scriptedGuest) Call(context.Context, abi.Export, []byte, []byte) ([]byte, error) {
	return nil, errors.New("scriptedGuest: raw calls unsupported")
}
func (g *scriptedGuest) Exchange(_ context.Context, e abi.Export, req, resp abi.Message) error {
	r, ok := req.(*abi.RateSelectRequest)
	if !ok || e != abi.ExportRateSelect {
		return ErrMessageMismatch
	}
	sel := abi.RateSelection{PolicyID: g.decl.ID, Cost: 1}
	switch r.Route {
	case "/orders/42":
		sel.PolicyID = "s.other"
	case "/search/items":
		sel.Cost = 3
	}
	answer := abi.RateSelectResponse{Selections: []abi.RateSelection{sel}}
	if err := DecodeResponse(g, e, req, answer.AppendTo(abi.AppendOKFrame(nil)), resp); err != nil {
		var se *abi.StatusError
		if errors.As(err, &se) {
			return err
		}
		return guestErr(g.Name(), e, ClassMalformedOutput, "", err)
	}
	return nil
}

var proRead = &abi.RateSelectRequest{Route: "/orders", Method: "GET", APIKeyPlan: "pro"}

// TestManagerSwapUnderLoad swaps 25 times under load: enough overlapping
// swaps for the race detector to see the pin/swap/drain synchronisation.
// The race runtime retains about 0.6 MB per generation that a normal build
// does not (measured: heap +14.6 MB after 10 swaps, +44 MB after 60 under
// -race; +35 MB after both 10 and 100 without), which would trip the leak
// bound at the 100: TestManagerSwapUnderLoadFull, built only
// without the race detector, makes those 100 under the same bound.
func TestManagerSwapUnderLoad(t *testing.T) { swapUnderLoad(t, 25) }

// swapUnderLoad swaps a module swapCount times while goroutines call it,
// and bounds what is left afterwards: goroutines, heap, drained
// generations.
func swapUnderLoad(t *testing.T, swapCount int) {
	ctx := context.Background()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	baseline := runtime.NumGoroutine()

	rec := newSwapRec()
	// The full pipeline (self-test, conformance) is covered by the other
	// tests; here it would only multiply the runtime of 100 swaps on a
	// loaded machine. Generous call timeouts for the same reason.
	mgr := NewManager(newEngine(t, Config{}), ManagerOptions{Observer: rec, Verify: AcceptAnyModule, SkipSelfTest: true})
	v1, v2 := wasmOf(t, "rate-policy"), wasmOf(t, "ratev2")
	require.NoError(t, mgr.Load(ctx, "rate", v1, Limits{CallTimeout: 5 * time.Second}))

	var calls, failures, misattributed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := mgr.Use(ctx, "rate", func(m Guest) error {
					resp, err := RateSelect(ctx, m, proRead)
					if err != nil {
						return err
					}
					// The answer must come from the generation pinned: the
					// v2 build answers only its own policy.
					want := "pro.read"
					if m.Description().RatePolicies[0].Revision == 2 {
						want = "swap.v2"
					}
					if len(resp.Selections) == 0 || resp.Selections[0].PolicyID != want {
						misattributed.Add(1)
					}
					return nil
				})
				calls.Add(1)
				// A short pause keeps 32 callers from starving the swapper on
				// a small shared machine; calls still overlap every swap.
				time.Sleep(200 * time.Microsecond)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	for i := range swapCount {
		next := v2
		if i%2 == 1 {
			next = v1
		}
		res, err := mgr.Swap(ctx, "rate", next)
		require.NoError(t, err)
		require.Equal(t, uint64(i+1), res.From)
		require.Equal(t, uint64(i+2), res.To)
	}
	halt()
	assert.Zero(t, failures.Load(), "first error: %v", firstErr.Load())
	assert.Zero(t, misattributed.Load())
	assert.Greater(t, calls.Load(), int64(100))
	st := mgr.Status()
	require.Len(t, st, 1)
	assert.Equal(t, uint64(swapCount+1), st[0].Generation)
	assert.True(t, st[0].LastSwap.OK)
	assert.Equal(t, swapCount+1, rec.ok)
	assert.Equal(t, uint64(swapCount+1), rec.active["rate"])

	require.NoError(t, mgr.Close(ctx))
	assert.Equal(t, uint64(0), rec.active["rate"])
	require.Eventually(t, func() bool { return runtime.NumGoroutine() <= baseline+2 }, 5*time.Second, 20*time.Millisecond,
		"goroutines: baseline %d, now %d", baseline, runtime.NumGoroutine())
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	// swapCount+1 generations were created; each Go guest instance holds megabytes,
	// so leaking them would show far above this bound.
	assert.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(64<<20), "heap grew")
}

func TestManagerRejectsCandidates(t *testing.T) {
	ctx := context.Background()
	rec := newSwapRec()
	var verifyFail atomic.Bool
	errDigest := errors.New("sha256 does not match the pin")
	mgr := NewManager(newEngine(t, Config{}), ManagerOptions{Observer: rec,
		Verify: func(name string, wasm []byte) error {
			if verifyFail.Load() {
				return errDigest
			}
			return nil
		}})
	t.Cleanup(func() { _ = mgr.Close(ctx) })
	require.NoError(t, mgr.Load(ctx, "rate", wasmOf(t, "rate-policy"), Limits{}))
	require.NoError(t, mgr.Load(ctx, "codec", wasmOf(t, "codec"), Limits{}))

	serving := func() {
		t.Helper()
		require.NoError(t, mgr.Use(ctx, "rate", func(m Guest) error {
			_, err := RateSelect(ctx, m, proRead)
			return err
		}))
		st := mgr.Status()
		require.Equal(t, "codec", st[0].Name)
		assert.Equal(t, uint64(1), st[1].Generation, "old generation keeps serving")
		assert.False(t, st[1].LastSwap.OK)
		assert.NotEmpty(t, st[1].LastSwap.Error)
		assert.LessOrEqual(t, len(st[1].LastSwap.Error), maxStatusError)
	}

	// trap loads but traps on every codec call: conformance catches it.
	_, err := mgr.Swap(ctx, "rate", wasmOf(t, "trap"))
	var se *SwapError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, StageConformance, se.Stage, "%v", err)
	serving()

	_, err = mgr.Swap(ctx, "rate", wasmOf(t, "fsimport"))
	require.ErrorIs(t, err, ClassForbiddenImport)
	serving()

	verifyFail.Store(true)
	_, err = mgr.Swap(ctx, "rate", wasmOf(t, "ratev2"))
	require.ErrorIs(t, err, errDigest)
	serving()
	verifyFail.Store(false)

	_, err = mgr.Swap(ctx, "rate", wasmOf(t, "ratebad"))
	require.ErrorIs(t, err, ErrConformance)
	assert.Contains(t, err.Error(), "deterministic")
	serving()

	// Another module may not claim rate-policy's ids, but a swap may keep its own.
	err = mgr.Load(ctx, "rate-copy", wasmOf(t, "rate-policy"), Limits{})
	require.ErrorIs(t, err, ErrDuplicateID)
	assert.Contains(t, err.Error(), "modules rate and rate-copy")
	_, err = mgr.Swap(ctx, "codec", wasmOf(t, "rate-policy"))
	require.ErrorIs(t, err, ErrDuplicateID)
	assert.Contains(t, err.Error(), "rate-policy:pro.read declared by modules rate and codec")
	res, err := mgr.Swap(ctx, "rate", wasmOf(t, "rate-policy"))
	require.NoError(t, err)
	assert.Equal(t, uint64(2), res.To)
	assert.Len(t, mgr.Status(), 2, "a rejected Load leaves no entry")

	_, err = mgr.Swap(ctx, "nope", wasmOf(t, "rate-policy"))
	require.ErrorIs(t, err, ErrUnknownModule)
	require.ErrorIs(t, mgr.Load(ctx, "rate", wasmOf(t, "rate-policy"), Limits{}), ErrModuleExists)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Equal(t, 1, rec.failed["forbidden-import"])
	assert.Equal(t, 1, rec.failed["verify"])
	assert.Equal(t, 2, rec.failed["conformance"])
	assert.Equal(t, 2, rec.failed["duplicate-id"])
}

func TestManagerSelfTestVectors(t *testing.T) {
	ctx := context.Background()
	mgr := NewManager(newEngine(t, Config{}), ManagerOptions{Verify: AcceptAnyModule})
	t.Cleanup(func() { _ = mgr.Close(ctx) })
	base := wasmOf(t, "rate-policy")
	require.NoError(t, mgr.Load(ctx, "rate", base, Limits{}))
	req := proRead.AppendTo(nil)
	var frame []byte
	var mod *Module
	require.NoError(t, mgr.Use(ctx, "rate", func(m Guest) (err error) {
		mod = m.(*Module)
		frame, err = m.Call(ctx, abi.ExportRateSelect, req, nil)
		return err
	}))
	assert.False(t, mod.verifying.Load(), "a serving generation runs under its own call deadline, not the verification one")
	wrong := append([]byte(nil), frame...)
	wrong[len(wrong)-1] ^= 1
	bundle := func(resp []byte) []byte {
		return abi.AppendSelfTestSection(base, &abi.SelfTestVectors{Vectors: []abi.SelfTestVector{
			{Export: abi.ExportRateSelect, Request: req, Response: resp}}})
	}

	// A custom section changes no code, so the module loaded from base runs
	// the vectors of any bundle built on it (and nothing is recompiled,
	// which takes tens of seconds per Go guest under -race).
	rep := SelfTest(ctx, mod, bundle(frame))
	require.True(t, rep.OK(), rep.Summary())
	require.Len(t, rep.Checks, 1)
	assert.Equal(t, CheckPass, rep.Checks[0].Status)
	rep = SelfTest(ctx, mod, bundle(wrong))
	assert.False(t, rep.OK())
	assert.Contains(t, rep.Summary(), "response frame differs")
	rep = SelfTest(ctx, mod, base)
	assert.True(t, rep.OK())
	assert.Equal(t, CheckSkip, rep.Checks[0].Status)

	// The reference vectors `make guests` bundles into this guest pass.
	f, err := vectors.ReadFile("../guests/rate-policy/selftest.json")
	require.NoError(t, err)
	ref, err := f.Section()
	require.NoError(t, err)
	rep = SelfTest(ctx, mod, abi.AppendSelfTestSection(base, ref))
	require.True(t, rep.OK(), rep.Summary())
	require.Len(t, rep.Checks, len(ref.Vectors))
	for _, c := range rep.Checks {
		assert.Equal(t, CheckPass, c.Status, c.Name)
	}

	// The swap pipeline runs them: a candidate whose vectors disagree with
	// its code (the first reference answer's cost changed from 1 to 2) is
	// refused at the self-test stage and generation 1 keeps serving.
	sel := f.Vectors[0].Response.(*abi.RateSelectResponse).Selections
	require.Equal(t, uint32(1), sel[0].Cost)
	sel[0].Cost = 2
	disagree, err := f.Section()
	require.NoError(t, err)
	_, err = mgr.Swap(ctx, "rate", abi.AppendSelfTestSection(base, disagree))
	require.ErrorIs(t, err, ErrSelfTest)
	var se *SwapError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, StageSelfTest, se.Stage)
	assert.Contains(t, err.Error(), "self-test vector 0 (caphost_rate_select): response frame differs at byte")
	assert.NotContains(t, err.Error(), "self-test vector 1 ", "only the changed vector fails")
	st := mgr.Status()[0]
	assert.Equal(t, uint64(1), st.Generation)
	assert.False(t, st.LastSwap.OK)
	assert.Contains(t, st.LastSwap.Error, "rejected at self-test")
	require.NoError(t, mgr.Use(ctx, "rate", func(m Guest) error {
		assert.Same(t, mod, m, "the old generation serves")
		resp, err := RateSelect(ctx, m, proRead)
		if err == nil {
			assert.Equal(t, "pro.read", resp.Selections[0].PolicyID)
		}
		return err
	}))
}

func TestManagerWatchRename(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir := t.TempDir()
	path := filepath.Join(dir, "rate.wasm")
	require.NoError(t, os.WriteFile(path, wasmOf(t, "rate-policy"), 0o644))
	rec := newSwapRec()
	mgr := NewManager(newEngine(t, Config{}), ManagerOptions{Observer: rec, Verify: AcceptAnyModule})
	t.Cleanup(func() { _ = mgr.Close(context.Background()) })
	require.NoError(t, mgr.Load(ctx, "rate", wasmOf(t, "rate-policy"), Limits{}))
	require.NoError(t, mgr.Watch(ctx, "rate", path))

	// Deploy the atomic way: write elsewhere in the directory, rename over.
	tmp := filepath.Join(dir, ".rate.wasm.tmp")
	require.NoError(t, os.WriteFile(tmp, wasmOf(t, "ratev2"), 0o644))
	require.NoError(t, os.Rename(tmp, path))
	require.Eventually(t, func() bool { return mgr.Status()[0].Generation == 2 }, 20*time.Second, 20*time.Millisecond)
	require.NoError(t, mgr.Use(ctx, "rate", func(m Guest) error {
		resp, err := RateSelect(ctx, m, proRead)
		if err == nil {
			assert.Equal(t, "swap.v2", resp.Selections[0].PolicyID)
		}
		return err
	}))

	// A broken file is reported and the new generation keeps serving.
	require.NoError(t, os.WriteFile(path, []byte("\x00asm garbage"), 0o644))
	require.Eventually(t, func() bool {
		st := mgr.Status()[0]
		return !st.LastSwap.OK && st.LastSwap.Error != ""
	}, 20*time.Second, 20*time.Millisecond)
	assert.Equal(t, uint64(2), mgr.Status()[0].Generation)
}

func TestManagerCloseDrains(t *testing.T) {
	ctx := context.Background()
	mgr := NewManager(newEngine(t, Config{}), ManagerOptions{Verify: AcceptAnyModule, SkipSelfTest: true})
	require.NoError(t, mgr.Load(ctx, "rate", wasmOf(t, "rate-policy"), Limits{}))
	entered, release := make(chan struct{}), make(chan struct{})
	callErr := make(chan error, 1)
	go func() {
		callErr <- mgr.Use(ctx, "rate", func(m Guest) error {
			close(entered)
			<-release
			// The pinned module still serves although Close has begun.
			_, err := RateSelect(ctx, m, proRead)
			return err
		})
	}()
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- mgr.Close(ctx) }()
	// Close has begun once new calls are refused (until then one just runs).
	require.Eventually(t, func() bool {
		return errors.Is(mgr.Use(ctx, "rate", func(Guest) error { return nil }), ErrManagerClosed)
	}, 10*time.Second, time.Millisecond, "Close never refused new calls")
	select {
	case <-closed:
		t.Fatal("Close returned while a call was pinned")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-callErr)
	require.NoError(t, <-closed)

	// A Close whose context ends interrupts pinned calls instead of waiting.
	mgr2 := NewManager(newEngine(t, Config{}), ManagerOptions{Verify: AcceptAnyModule, SkipSelfTest: true})
	require.NoError(t, mgr2.Load(ctx, "rate", wasmOf(t, "rate-policy"), Limits{}))
	entered2, hold := make(chan struct{}), make(chan struct{})
	var pinned *Module
	go func() {
		_ = mgr2.Use(ctx, "rate", func(m Guest) error { pinned = m.(*Module); close(entered2); <-hold; return nil })
	}()
	<-entered2
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- mgr2.Close(cctx) }()
	// Close force-closes the pinned module once its context ends; wait for
	// that on the module itself (calling into it meanwhile would race the
	// close), then a call is refused.
	select {
	case <-pinned.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the module was never force-closed")
	}
	_, err := pinned.RateSelect(ctx, proRead)
	require.ErrorIs(t, err, ClassClosed, "the module was force-closed")
	close(hold)
	require.ErrorIs(t, <-done, context.DeadlineExceeded)
}

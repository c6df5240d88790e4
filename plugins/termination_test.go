package plugins

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/testdata/guests/handbuilt"
)

// The hand-assembled hostile guests (testdata/guests/handbuilt): a call tree
// without loops and a recursion that overflows the Wasm stack.
func init() {
	derivedGuests = append(derivedGuests, func(wasm map[string][]byte) error {
		wasm["calltree"] = handbuilt.CallTree()
		wasm["recursion"] = handbuilt.Recursion()
		return nil
	})
}

// TestLoopingGuestsCannotStarveTheWatchdog: Go cannot preempt a goroutine while it runs compiled
// wasm, so with every P running an infinite loop the watchdog (and the goroutine that then sets the
// module's exit code) only run because the patched wazero still exits to Go every few thousand
// termination checks (third_party/wazero/CAPHOST.md). Twice as many runaway calls as Ps plus one
// must all be stopped at their deadline, and the host keeps serving: loops, checked at their
// headers, and a call tree without any loop, checked at function entry. Without the periodic exit
// this test hangs (nothing else, not even its 30 s guard, gets a P again) until go test kills the
// binary: checked with the interval set to 1<<62, and for the call tree without the entry check
// (0005-entry-termination-check.patch).
func TestLoopingGuestsCannotStarveTheWatchdog(t *testing.T) {
	for _, tc := range []struct {
		guest string
		req   *abi.CodecEncodeRequest
	}{
		{"loop", &abi.CodecEncodeRequest{Schema: "x", Value: []byte("a")}},
		{"calltree", &abi.CodecEncodeRequest{Schema: "x", Value: []byte{62}}},
	} {
		t.Run(tc.guest, func(t *testing.T) { runawayCallsAreStopped(t, tc.guest, tc.req) })
	}
}

func runawayCallsAreStopped(t *testing.T, guest string, req *abi.CodecEncodeRequest) {
	procs := runtime.GOMAXPROCS(0)
	calls := 2*procs + 1
	e := newEngine(t, Config{})
	loop := load(t, e, guest, Limits{CallTimeout: 50 * time.Millisecond, PoolSize: calls})
	echo := load(t, e, "echo", Limits{PoolSize: 1})
	// Every call runs its guest at once instead of instantiating first.
	warmPool(t, loop)

	errs := make([]error, calls)
	took := make([]time.Duration, calls)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range calls {
		wg.Go(func() {
			<-start
			t0 := time.Now()
			_, errs[i] = loop.CodecEncode(context.Background(), req)
			took[i] = time.Since(t0)
		})
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d runaway calls into %s were not stopped within 30s", calls, guest)
	}
	for i := range calls {
		requireClass(t, errs[i], ClassDeadline)
		// Generous: the machine is shared and -race slows everything.
		assert.Less(t, took[i], 5*time.Second, "call %d of %d (GOMAXPROCS %d)", i, calls, procs)
	}
	assert.Zero(t, e.wd.inflight.Load())

	// The loop module replaced its instances and the engine still serves other modules.
	_, err := loop.CodecEncode(context.Background(), req)
	requireClass(t, err, ClassDeadline)
	out, err := echo.Call(context.Background(), abi.ExportCodecEncode,
		(&abi.CodecEncodeRequest{Schema: "echo", Value: []byte("still serving")}).AppendTo(nil), nil)
	require.NoError(t, err)
	assert.Contains(t, string(out), "still serving")
}

// TestLoopFreeGuestStopsAtItsDeadline: a guest whose runaway work is a call
// tree without a single loop, so without a loop header to check, answers
// small inputs and is stopped at its deadline on a big one (2^63 calls),
// like a looping guest; then it serves again. Before the entry check
// (0005-entry-termination-check.patch) the call ran on past any deadline:
// this test's guard failed it after 30 s.
func TestLoopFreeGuestStopsAtItsDeadline(t *testing.T) {
	require.False(t, handbuilt.ContainsLoop(th.wasm["calltree"]), "the call tree must have no loop to prove anything")
	m := load(t, newEngine(t, Config{}), "calltree", Limits{CallTimeout: 50 * time.Millisecond, PoolSize: 1})
	tree := func(n byte) (*abi.CodecEncodeResponse, error) {
		return m.CodecEncode(context.Background(), &abi.CodecEncodeRequest{Schema: "x", Value: []byte{n}})
	}
	out, err := tree(10) // 2047 calls: within any deadline
	require.NoError(t, err)
	assert.Equal(t, "calltree", string(out.Payload))

	errs := make(chan error, 1)
	start := time.Now()
	go func() { _, err := tree(62); errs <- err }()
	select {
	case err := <-errs:
		requireClass(t, err, ClassDeadline)
		// Generous: the machine is shared and -race slows everything.
		assert.Less(t, time.Since(start), 5*time.Second)
	case <-time.After(30 * time.Second):
		t.Fatal("a loop-free call tree was not stopped within 30s of its 50ms deadline")
	}
	out, err = tree(12)
	require.NoError(t, err)
	assert.Equal(t, "calltree", string(out.Payload))
}

// TestCompilationCacheIsPatchedWazero: the patched wazero reports a version of its own,
// EngineVersion, so its compiled code lives in a cache directory upstream wazero of the same release
// never reads (each cached entry also carries the version in its header). The version is a
// constant of the fork: it does not depend on how the program was built.
func TestCompilationCacheIsPatchedWazero(t *testing.T) {
	upstream, suffix, ok := strings.Cut(EngineVersion, "-caphost.")
	require.True(t, ok, "EngineVersion %q is not caphost's patched wazero", EngineVersion)
	assert.Regexp(t, `^v1\.\d+\.\d+$`, upstream)
	assert.Regexp(t, `^\d+$`, suffix)

	// The run's shared cache: compiling a Go guest afresh takes seconds, more under -race.
	e := newEngine(t, Config{CacheDir: th.cacheDir})
	load(t, e, "echo", Limits{})
	entries, err := os.ReadDir(th.cacheDir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	platform := "-" + runtime.GOARCH + "-" + runtime.GOOS
	assert.Equal(t, "wazero-"+EngineVersion+platform, entries[0].Name())
	assert.NotEqual(t, "wazero-"+upstream+platform, entries[0].Name())
	compiled, err := os.ReadDir(filepath.Join(th.cacheDir, entries[0].Name()))
	require.NoError(t, err)
	assert.NotEmpty(t, compiled, "compiled guests are cached there")
}

// TestCallCtxAfterFunc: what wazero registers through AfterFunc runs once the
// watchdog ends the call, also when registered after that, and never after stop.
func TestCallCtxAfterFunc(t *testing.T) {
	ran := make(chan struct{}, 1)
	f := func() { ran <- struct{}{} }
	wait := func() bool {
		select {
		case <-ran:
			return true
		case <-time.After(5 * time.Second):
			return false
		}
	}

	var c callCtx
	c.init()
	stop := c.AfterFunc(f)
	c.kill(reasonDeadline)
	require.True(t, wait(), "registered before the kill")
	assert.False(t, stop())
	assert.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	c.AfterFunc(f)
	require.True(t, wait(), "registered after the kill")

	var d callCtx
	d.init()
	stop = d.AfterFunc(f)
	assert.True(t, stop())
	assert.False(t, stop())
	d.kill(reasonCanceled)
	select {
	case <-ran:
		t.Fatal("ran after stop")
	case <-time.After(20 * time.Millisecond):
	}
	assert.ErrorIs(t, d.Err(), context.Canceled)

	// Further registrations (a context derived from the call's) are kept
	// apart from wazero's and stopped one by one.
	var c2 callCtx
	c2.init()
	c2.AfterFunc(f)
	derived, cancel := context.WithCancel(&c2)
	defer cancel()
	third := c2.AfterFunc(func() { t.Error("stopped registration ran") })
	assert.True(t, third())
	c2.kill(reasonDeadline)
	require.True(t, wait(), "first registration")
	select {
	case <-derived.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a context derived from the call's was not canceled")
	}
	time.Sleep(20 * time.Millisecond) // the stopped one must stay silent
}

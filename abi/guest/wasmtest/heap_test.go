package wasmtest

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

// TestHeapStaysBounded: a guest that allocates on every call keeps serving
// under a memory cap, every call on one instance. Before abi/guest paced
// its heap (heap.go), the runtime's GC CPU limiter, misled by the host's
// virtual clock, switched mark assists off and, with no background worker
// running in a reactor, the cycle under way never ended: each case ran out
// of its 192 pages, at calls 81,884, 358 and 2,918.
//
// Each case needs a part of the pacing: without the clock readings, or
// with one a call instead of one per 64 KiB, the first two collect by force
// every few cycles (109 and 250 forced collections, 205 for the second);
// without the forced collections the third, where the limiter is on by
// design, runs out at call 10,748.
func TestHeapStaysBounded(t *testing.T) {
	// pages is the cap: three quarters of the default 256, half again what
	// the guest needs discarding 4 KiB a call (128 pages).
	const pages = 192
	for _, c := range []struct {
		name   string
		setup  *abi.CodecDecodeRequest // one call before the others
		schema string
		size   int
		calls  int
		// maxForced bounds the SDK's forced collections (about 0.6 ms each):
		// where the limiter stays off they stay exceptional.
		maxForced uint64
		// limiter: the case runs with the limiter on, so it exercises the
		// forced collections.
		limiter bool
	}{
		{name: "discarding 4 KiB a call", schema: "garbage", size: 4 << 10, calls: 200_000, maxForced: 8},
		{name: "discarding 1 MiB a call", schema: "garbage", size: 1 << 20, calls: 2_000, maxForced: 8},
		{
			name:  "keeping 4 MiB under a 4 MiB memory limit",
			setup: &abi.CodecDecodeRequest{Schema: "limit", StoredVersion: 1, Payload: []byte(strconv.Itoa(4 << 20))},
			// 1,024 kept: 4 MiB live, a collection every 1,000 calls or so.
			schema: "keep", size: 4 << 10, calls: 20_000, maxForced: 1_000, limiter: true,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			e, err := plugins.NewEngine(plugins.Config{CacheDir: th.CacheDir})
			require.NoError(t, err)
			t.Cleanup(func() { _ = e.Close(ctx) })
			// One instance takes every call: no pool to spread them, no
			// recycling to reset the heap, and a deadline no loaded
			// machine reaches.
			m, err := e.Load(ctx, "garbage", th.Wasm("garbage"), plugins.Limits{
				MemoryPages: pages, PoolSize: 1, RecycleAfter: 1 << 40, CallTimeout: 5 * time.Second,
			})
			require.NoError(t, err)
			if c.setup != nil {
				_, err := m.CodecDecode(ctx, c.setup)
				require.NoError(t, err)
			}

			req := &abi.CodecDecodeRequest{Schema: c.schema, StoredVersion: 1, Payload: []byte(strconv.Itoa(c.size))}
			for i := 1; i <= c.calls; i++ {
				resp, err := m.CodecDecode(ctx, req)
				if err != nil {
					t.Fatalf("call %d of %d failed (the cap is %d pages): %v", i, c.calls, pages, err)
				}
				require.Equal(t, req.Payload, resp.Value)
				if i%(c.calls/4) == 0 {
					logStats(t, i, stats(t, m))
				}
			}
			s := stats(t, m)
			require.Greater(t, s["/gc/cycles/total:gc-cycles"], uint64(c.calls*c.size/(8<<20)), "the guest's GC ran too few cycles to mean anything")
			require.LessOrEqual(t, s["/gc/cycles/forced:gc-cycles"], c.maxForced, "the SDK forces collections the runtime should run")
			require.Equal(t, c.limiter, s["/gc/limiter/last-enabled:gc-cycle"] > 0, "whether the limiter turned on")
			require.Less(t, s["/memory/classes/total:bytes"], uint64(pages)<<16)
		})
	}
}

// stats returns the guest's GC statistics (runtime/metrics by name).
func stats(t *testing.T, m *plugins.Module) map[string]uint64 {
	t.Helper()
	resp, err := m.CodecDecode(context.Background(), &abi.CodecDecodeRequest{Schema: "stats", StoredVersion: 1, Payload: []byte("0")})
	require.NoError(t, err)
	var s map[string]uint64
	require.NoError(t, json.Unmarshal(resp.Value, &s))
	return s
}

func logStats(t *testing.T, calls int, s map[string]uint64) {
	t.Helper()
	mib := func(name string) float64 { return float64(s[name]) / (1 << 20) }
	t.Logf("after %6d calls: Go memory %5.2f MiB, heap objects %5.2f MiB, goal %5.2f MiB, %4d GC cycles (%d forced), limiter last on in cycle %d",
		calls, mib("/memory/classes/total:bytes"), mib("/memory/classes/heap/objects:bytes"), mib("/gc/heap/goal:bytes"),
		s["/gc/cycles/total:gc-cycles"], s["/gc/cycles/forced:gc-cycles"], s["/gc/limiter/last-enabled:gc-cycle"])
}

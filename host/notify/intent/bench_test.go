package intent

import (
	"context"
	goruntime "runtime"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/programs"
)

// BenchmarkSubmit compares a durable Submit (guard, EVALSHA of
// notify-submit-v3: dedup record + XADD MAXLEN ~; concurrent submits
// pipelined, those of one shard sharing calls of up to four intents)
// with a plain go-redis
// XADD of the same plan bytes to the same private server (redistest's
// unguarded admin client: no record, no dedup), on connection pools of the
// same size (4), at 1 and 32 goroutines, in both program modes
// (durable-submit: EVALSHA, durable-submit-fcall: FCALL), and sealed at
// rest (durable-submit-sealed: EVALSHA with Config.Seal, the plan
// encrypted and the digest keyed). plain-xadd-aa repeats the control: its
// ratio to plain-xadd is the run's noise (A/A).
func BenchmarkSubmit(b *testing.B) {
	srv := redistest.StartStandalone(b)
	s, err := New(newRuntime(b, runtimeConfig(&policy.Standalone{Endpoint: srv.Addr()})), Config{Shards: 1})
	require.NoError(b, err)
	ctx := context.Background()
	// The same submit in functions-provisioned mode (FCALL of the deployed
	// library), on its own region so the two modes never share records.
	cat, err := programs.Load()
	require.NoError(b, err)
	require.NoError(b, programs.Deploy(ctx, cat, srv.Admin()))
	fcfg := runtimeConfig(&policy.Standalone{Endpoint: srv.Addr()})
	fcfg.Programs.Mode = policy.ProgramsFunctionsProvisioned
	fs, err := New(newRuntime(b, fcfg), Config{Shards: 1, Region: "fcall"})
	require.NoError(b, err)
	ss, err := New(newRuntime(b, runtimeConfig(&policy.Standalone{Endpoint: srv.Addr()})),
		Config{Shards: 1, Region: "sealed", Seal: sealRing(b, 1, 1)})
	require.NoError(b, err)
	p := testPlan(b, "bench")
	enc, err := p.MarshalBinary()
	require.NoError(b, err)
	id := string(make([]byte, 64))
	control := "ca:shop:example:notify:bench:control:{x}"
	var n atomic.Int64
	submit := func() error {
		_, err := s.Submit(ctx, []byte("k-"+strconv.FormatInt(n.Add(1), 10)), p)
		return err
	}
	submitFcall := func() error {
		_, err := fs.Submit(ctx, []byte("k-"+strconv.FormatInt(n.Add(1), 10)), p)
		return err
	}
	submitSealed := func() error {
		_, err := ss.Submit(ctx, []byte("k-"+strconv.FormatInt(n.Add(1), 10)), p)
		return err
	}
	xadd := func() error {
		return srv.Admin().Do(ctx, "xadd", control, "maxlen", "~", DefaultMaxLen, "*", "i", id, "p", enc).Err()
	}
	for _, g := range []int{1, 32} {
		for _, c := range []struct {
			name string
			f    func() error
		}{{"plain-xadd", xadd}, {"durable-submit", submit}, {"durable-submit-fcall", submitFcall},
			{"durable-submit-sealed", submitSealed}, {"plain-xadd-aa", xadd}} {
			b.Run(c.name+"/g"+strconv.Itoa(g), func(b *testing.B) {
				require.NoError(b, c.f()) // warm: script loaded, connections open
				b.SetBytes(int64(len(enc)))
				if g == 1 {
					for b.Loop() {
						if err := c.f(); err != nil {
							b.Fatal(err)
						}
					}
					return
				}
				b.SetParallelism(max(1, g/goruntime.GOMAXPROCS(0))) // g goroutines in all
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := c.f(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

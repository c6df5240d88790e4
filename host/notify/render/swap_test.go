package render

import (
	"context"
	"crypto/sha256"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/plugins"
)

// TestDigestMatchesContentDuringSwaps renders from several goroutines
// while the module is swapped back and forth between two editions of
// "welcome": every Result's digest is that of the edition whose wording
// it holds, so a frozen plan never names a module that did not render it.
// Renders and swaps are counted, not timed; run with -race. Whether a
// render overlaps a swap here is up to the scheduler; the exact moment is
// tested deterministically by TestSwapDuringRenderIsRetriedOnTheNewGeneration.
func TestDigestMatchesContentDuringSwaps(t *testing.T) {
	r, mgr := newRenderer(t, Options{Modules: []string{"renderer"}})
	ctx := context.Background()
	ref, alt := sha256.Sum256(th.Wasm("renderer")), sha256.Sum256(th.Wasm("altrenderer"))
	want := map[[32]byte]string{
		ref: "Hallo Ada,\n\nIhr Konto A-1 ist bereit.\n\nGesendet am 29.11.2026\n",
		alt: "Hallo Ada, Konto A-1 ist aktiv.\n",
	}
	const renderers, swaps = 4, 6
	// phase counts completed swaps; each goroutine publishes the phase its
	// last finished render started in, so the main goroutine can wait
	// (not time) until every goroutine rendered after each swap.
	var phase atomic.Int64
	last := make([]atomic.Int64, renderers)
	stop := make(chan struct{})
	// advanced[p] closes when phase p ends; a goroutine that rendered
	// perPhase times in a phase waits for it, so the test costs a bounded
	// number of renders while every swap still overlaps renders.
	const perPhase = 10
	advanced := make([]chan struct{}, swaps+1)
	for i := range advanced {
		advanced[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	seen := make([]map[[32]byte]int, renderers)
	errs := make([][]error, renderers)
	for g := range renderers {
		seen[g] = map[[32]byte]int{}
		last[g].Store(-1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, inPhase := 0, int64(0)
			for {
				p := phase.Load()
				if p != inPhase {
					n, inPhase = 0, p
				}
				if n == perPhase {
					select {
					case <-advanced[p]:
						continue
					case <-stop:
						return
					}
				}
				n++
				res, err := r.Render(ctx, welcome("de", Text))
				if err != nil {
					errs[g] = append(errs[g], err)
				} else {
					seen[g][res.ModuleSHA256]++
					if string(res.Parts[0].Body) != want[res.ModuleSHA256] {
						errs[g] = append(errs[g], assert.AnError)
					}
				}
				last[g].Store(p)
			}
		}()
	}
	waitAll := func(p int64) {
		for g := range renderers {
			for last[g].Load() < p {
				runtime.Gosched()
			}
		}
	}
	waitAll(0)
	for i := range swaps {
		wasm := th.Wasm("altrenderer")
		if i%2 == 1 {
			wasm = th.Wasm("renderer")
		}
		_, err := mgr.Swap(ctx, "renderer", wasm)
		require.NoError(t, err)
		phase.Store(int64(i + 1))
		close(advanced[i])
		waitAll(int64(i + 1))
	}
	close(stop)
	wg.Wait()
	perDigest := map[[32]byte]int{}
	for g := range renderers {
		assert.Empty(t, errs[g], "goroutine %d: failed renders or content under the wrong digest", g)
		for d, n := range seen[g] {
			_, known := want[d]
			assert.True(t, known, "unknown digest")
			perDigest[d] += n
		}
	}
	assert.GreaterOrEqual(t, perDigest[ref], renderers*(swaps/2+1), "every goroutine rendered in every reference phase")
	assert.GreaterOrEqual(t, perDigest[alt], renderers*(swaps/2), "every goroutine rendered in every alternative phase")
	t.Logf("renders per digest: reference %d, alternative %d", perDigest[ref], perDigest[alt])
	// After an even number of swaps the reference edition serves again.
	res, err := r.Render(ctx, welcome("de", Text))
	require.NoError(t, err)
	assert.Equal(t, ref, res.ModuleSHA256)
}

// swapInside is the real Manager, with a real swap run inside the pinned
// window of the next n renders (after the guest answered, before Use
// returns): the moment at which the serving digest no longer names the
// generation that rendered.
type swapInside struct {
	*plugins.Manager
	t     *testing.T
	n     int
	wasms [][]byte
}

func (s *swapInside) Use(ctx context.Context, module string, fn func(plugins.Guest) error) error {
	return s.Manager.Use(ctx, module, func(g plugins.Guest) error {
		err := fn(g)
		if s.n > 0 {
			s.n--
			_, serr := s.Manager.Swap(ctx, module, s.wasms[s.n%len(s.wasms)])
			require.NoError(s.t, serr)
		}
		return err
	})
}

func TestSwapDuringRenderIsRetriedOnTheNewGeneration(t *testing.T) {
	mgr := newManager(t, generous, [2]string{"renderer", "renderer"})
	g := &swapInside{Manager: mgr, t: t, n: 1, wasms: [][]byte{th.Wasm("altrenderer")}}
	r, err := New(Options{Guests: g, Modules: []string{"renderer"}})
	require.NoError(t, err)
	res, err := r.Render(context.Background(), welcome("de", Text))
	require.NoError(t, err)
	// The first call rendered with the reference edition but could not be
	// pinned to a digest; the retry rendered and was recorded with the
	// alternative one.
	assert.Equal(t, sha256.Sum256(th.Wasm("altrenderer")), res.ModuleSHA256)
	assert.Equal(t, "Hallo Ada, Konto A-1 ist aktiv.\n", string(res.Parts[0].Body))

	// A module swapped during every attempt fails, typed, after
	// maxSwapRetries attempts.
	g.n = maxSwapRetries
	g.wasms = [][]byte{th.Wasm("renderer"), th.Wasm("altrenderer")}
	_, err = r.Render(context.Background(), welcome("de", Text))
	var fe *FailureError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "swapping", fe.Class)
	assert.Equal(t, 0, g.n, "every attempt was made")
}

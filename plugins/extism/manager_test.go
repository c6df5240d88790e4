package extism

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

// TestManagerServesBothFlavours: one plugins.Manager loads, swaps and rolls
// back Extism modules through the same stages as native ones (the flavour
// is told from the bytes), and swapping the native reference guest for its
// Extism twin and back under traffic fails no call: every answer is the
// twins' common one. A hostile Extism candidate is refused at conformance,
// like a native one, and the serving generation stays.
func TestManagerServesBothFlavours(t *testing.T) {
	ctx := context.Background()
	rec := &swapCounts{}
	mgr := plugins.NewManager(newNative(t, plugins.Config{}), plugins.ManagerOptions{
		Verify: plugins.AcceptAnyModule, Extism: newExtism(t, plugins.Config{}), Observer: rec})
	t.Cleanup(func() { _ = mgr.Close(ctx) })
	native, ext := th.wasm["rate-policy"], th.wasm["rate-policy-extism"]
	require.Equal(t, plugins.FlavourExtism, plugins.DetectFlavour(ext))
	// The engine's caps: neither the conformance suite nor the traffic may
	// meet a deadline on a loaded machine (under -race with two test runs
	// at once, 3 of 699,373 calls once took over 5 s); no deadline is
	// under test here.
	// The Extism twin imports caphost_log and caphost_count: the slot grants them.
	caps := plugins.HardCaps()
	require.NoError(t, mgr.Load(ctx, "rate", native, plugins.Limits{CallTimeout: caps.CallTimeout, InitTimeout: caps.InitTimeout, Grants: plugins.GrantLog | plugins.GrantCount}))

	req := &abi.RateSelectRequest{Route: "/orders/42", Method: "GET", APIKeyPlan: "pro", ClientIPClass: "public"}
	var want *abi.RateSelectResponse
	require.NoError(t, mgr.Use(ctx, "rate", func(g plugins.Guest) (err error) {
		want, err = plugins.RateSelect(ctx, g, req)
		return err
	}))

	var calls, failed atomic.Int64
	var first atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := mgr.Use(ctx, "rate", func(g plugins.Guest) error {
					got, err := plugins.RateSelect(ctx, g, req)
					if err == nil && !reflect.DeepEqual(want, got) {
						err = fmt.Errorf("%s generation answered %+v", g.(plugins.LoadedGuest).Flavour(), got)
					}
					return err
				})
				calls.Add(1)
				if err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	steps := []struct {
		wasm    []byte // nil: rollback
		flavour plugins.Flavour
	}{{ext, plugins.FlavourExtism}, {native, plugins.FlavourNative}, {ext, plugins.FlavourExtism}, {nil, plugins.FlavourNative}, {nil, plugins.FlavourExtism}}
	for i, s := range steps {
		var res plugins.SwapResult
		var err error
		if s.wasm == nil {
			res, err = mgr.Rollback(ctx, "rate")
		} else {
			res, err = mgr.Swap(ctx, "rate", s.wasm)
		}
		require.NoError(t, err, "step %d", i)
		assert.Equal(t, s.flavour, res.Flavour, "step %d", i)
		assert.Equal(t, s.flavour, mgr.Status()[0].Flavour, "step %d", i)
	}
	// A hostile Extism candidate answers outside its declarations.
	_, err := mgr.Swap(ctx, "rate", th.wasm["wrongans-extism"])
	var se *plugins.SwapError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, plugins.StageConformance, se.Stage, "%v", err)
	close(stop)
	wg.Wait()
	assert.Zero(t, failed.Load(), "of %d calls; first failure: %v", calls.Load(), first.Load())
	st := mgr.Status()[0]
	assert.Equal(t, uint64(len(steps)+1), st.Generation)
	assert.Equal(t, plugins.FlavourExtism, st.Flavour, "the refused candidate left the Extism generation serving")
	assert.Equal(t, int64(len(steps)+1), rec.ok.Load())

	// Without an Extism loader the native engine is asked, and refuses
	// Extism's kernel imports by name.
	nativeOnly := plugins.NewManager(newNative(t, plugins.Config{}), plugins.ManagerOptions{Verify: plugins.AcceptAnyModule})
	t.Cleanup(func() { _ = nativeOnly.Close(ctx) })
	err = nativeOnly.Load(ctx, "rate", ext, plugins.Limits{})
	require.ErrorIs(t, err, plugins.ClassForbiddenImport)
	assert.Contains(t, err.Error(), "extism:host/env")
}

// TestCloseWaitsForExtismCalls: as in the native flavour, Close interrupts
// calls in flight and returns only once they have left the guest (closing
// the runtime under a running call races inside wazero).
func TestCloseWaitsForExtismCalls(t *testing.T) {
	ctx := context.Background()
	e := newExtism(t, plugins.Config{})
	m, err := e.Load(ctx, "testguest", th.wasm["testguest"], plugins.Limits{CallTimeout: 10 * time.Second, PoolSize: 2, Grants: plugins.GrantCount})
	require.NoError(t, err)
	// testguest's select of /loop never returns on its own.
	req := &abi.RateSelectRequest{Route: "/loop", Method: "GET"}
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := plugins.RateSelect(ctx, m, req)
			errs <- err
		}()
	}
	require.Eventually(t, func() bool { return m.inUse.Load() == 2 }, 30*time.Second, time.Millisecond)
	require.NoError(t, m.Close(ctx))
	assert.Zero(t, m.inUse.Load(), "Close returned while calls were still in the guest")
	for range 2 {
		err := <-errs
		require.ErrorIs(t, err, plugins.ClassClosed, "%v", err)
	}
}

type swapCounts struct{ ok atomic.Int64 }

func (c *swapCounts) Swapped(_ string, _ uint64, ok bool, _ string) {
	if ok {
		c.ok.Add(1)
	}
}
func (c *swapCounts) ActiveGeneration(string, uint64) {}

package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/plugins/trust"
	"github.com/caphost/caphost/policy"
)

// traffic sends rate-limited reads, each under its own API key (so quota
// never runs out), until stop is called, and counts every answer that is
// neither allowed nor limited: a guest failure shows as 503.
type traffic struct {
	stop     func()
	requests atomic.Int64
	tick     chan struct{} // signalled after requests
	failed   atomic.Int64
	first    atomic.Value
}

// waitFor blocks until at least n requests were answered.
func (tr *traffic) waitFor(n int64) {
	for tr.requests.Load() < n {
		<-tr.tick
	}
}

func startTraffic(t *testing.T, srv http.Handler, workers int) *traffic {
	t.Helper()
	tr := &traffic{tick: make(chan struct{}, 1)}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				r := httptest.NewRequest(http.MethodGet, "/items", nil)
				r.Header.Set("X-Api-Key-Plan", "free")
				r.Header.Set("X-Api-Key", fmt.Sprintf("traffic-%d-%d", w, i))
				rec := httptest.NewRecorder()
				srv.ServeHTTP(rec, r)
				tr.requests.Add(1)
				select {
				case tr.tick <- struct{}{}:
				default:
				}
				if rec.Code != http.StatusNoContent && rec.Code != http.StatusTooManyRequests {
					tr.failed.Add(1)
					tr.first.CompareAndSwap(nil, fmt.Sprintf("%d %s", rec.Code, rec.Body.String()))
				}
			}
		})
	}
	var once sync.Once
	tr.stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(tr.stop)
	return tr
}

// TestGuestSwapsBetweenFlavoursUnderTraffic: `caphost serve`'s host loads,
// swaps and rolls back Extism guests through the same stages as native
// ones. The native rate-policy guest is swapped for its Extism twin and
// back, and rolled back twice, while requests flow: no request fails, the
// policy set is the same throughout (the twins declare identical
// policies, so the revision memory accepts both), and the operator view
// names each generation's flavour.
func TestGuestSwapsBetweenFlavoursUnderTraffic(t *testing.T) {
	srv := redistest.StartStandalone(t)
	env := newGuestEnv(t)
	// The Extism twin imports caphost_log and caphost_count: granted.
	h, logs := startHost(t, env.config(t, guestOpts{redisAddr: srv.Addr(), keys: true, grants: "[log, count]"}))
	ctx := context.Background()
	v1, ext := th.wasm["rate-v1"], th.wasm["rate-extism"]
	lim, sel, err := h.RateLimit()
	require.NoError(t, err)
	require.IsType(t, &ratelimit.GuestSelector{}, sel)
	digest := lim.Policies().Digest()
	assert.Equal(t, string(plugins.FlavourNative), guestStatus(t, h).Flavour)

	tr := startTraffic(t, rateServer(t, h), 4)
	// Each step waits for traffic on the generation before it: every swap
	// happens under load.
	waitFor := tr.waitFor
	steps := []struct {
		name    string
		do      func() (host.GuestStatus, error)
		flavour plugins.Flavour
		sha     []byte
	}{
		{"to extism", func() (host.GuestStatus, error) {
			return h.SwapGuest(ctx, "rate-policy", ext, env.sign(t, env.priv, ext))
		}, plugins.FlavourExtism, ext},
		{"to native", func() (host.GuestStatus, error) {
			return h.SwapGuest(ctx, "rate-policy", v1, env.sign(t, env.priv, v1))
		}, plugins.FlavourNative, v1},
		{"rollback", func() (host.GuestStatus, error) { return h.RollbackGuest(ctx, "rate-policy") }, plugins.FlavourExtism, ext},
		{"rollback again", func() (host.GuestStatus, error) { return h.RollbackGuest(ctx, "rate-policy") }, plugins.FlavourNative, v1},
	}
	for i, s := range steps {
		waitFor(int64(50 * (i + 1)))
		st, err := s.do()
		require.NoError(t, err, "%s: %s", s.name, logs.String())
		assert.Equal(t, uint64(i+2), st.Generation, s.name)
		assert.Equal(t, string(s.flavour), st.Flavour, s.name)
		assert.Equal(t, trust.Digest(s.sha).String(), st.SHA256, s.name)
		assert.Equal(t, uint64(i+1), st.PreviousGeneration, s.name)
		assert.Equal(t, digest, lim.Policies().Digest(), "%s: the twins declare the same policies", s.name)
	}
	waitFor(int64(50 * (len(steps) + 1)))
	tr.stop()
	assert.Zero(t, tr.failed.Load(), "of %d requests; first failure: %v", tr.requests.Load(), tr.first.Load())
	assert.Equal(t, 5.0, gaugeValue(t, h.Registry(), "caphost_guest_swaps_total", map[string]string{"module": "rate-policy", "result": "ok"}),
		"the load, two swaps and two rollbacks")
	// The Extism generations' calls are counted like the native ones.
	assert.Positive(t, gaugeValue(t, h.Registry(), "caphost_guest_calls_total", map[string]string{"module": "rate-policy", "export": "rate_select"}))
}

// TestGuestRollbackThroughTheAdminAPI: POST /admin/guests/{name}/rollback
// restores the previous verified generation without an upload — its
// policies come back with it (the capability stage ran again and the
// limiter swapped) — and a second rollback undoes the first. A guest that
// was never swapped has nothing to roll back to, and the serving
// generation stays.
func TestGuestRollbackThroughTheAdminAPI(t *testing.T) {
	srv := redistest.StartStandalone(t)
	env := newGuestEnv(t)
	h, logs := startHost(t, env.config(t, guestOpts{redisAddr: srv.Addr(), keys: true}))
	const token = "rollback-test-admin-token"
	api := httpapi.New(h, httpapi.Options{AdminToken: policy.NewSecret([]byte(token))})
	rollback := func() (int, httpapi.GuestView, string) {
		r := httptest.NewRequest(http.MethodPost, "/admin/guests/rate-policy/rollback", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, r)
		var v httpapi.GuestView
		if rec.Code == http.StatusOK {
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &v))
		}
		return rec.Code, v, rec.Body.String()
	}
	lim, _, err := h.RateLimit()
	require.NoError(t, err)
	revision := func() string {
		p, ok := lim.Policies().Policy("free-read")
		require.True(t, ok)
		return p.Revision
	}

	code, _, body := rollback()
	assert.Equal(t, http.StatusConflict, code)
	assert.Contains(t, body, `"code":"no-previous-generation"`)
	_, err = h.RollbackGuest(context.Background(), "rate-policy")
	require.ErrorIs(t, err, plugins.ErrNoPrevious)
	assert.Equal(t, uint64(1), guestStatus(t, h).Generation)

	v1, v2 := th.wasm["rate-v1"], th.wasm["rate-v2"]
	_, err = h.SwapGuest(context.Background(), "rate-policy", v2, env.sign(t, env.priv, v2))
	require.NoError(t, err, logs.String())
	require.Equal(t, "r2", revision())

	code, v, body := rollback()
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, uint64(3), v.Generation)
	assert.Equal(t, trust.Digest(v1).String(), v.SHA256)
	assert.Equal(t, "native", v.Flavour)
	assert.Equal(t, uint64(2), v.PreviousGeneration)
	assert.Equal(t, trust.Digest(v2).String(), v.PreviousSHA256)
	assert.Equal(t, "r1", revision(), "the rolled-back generation's policies serve again")
	codes := burst(rateServer(t, h), 20)
	assert.Zero(t, codes[http.StatusServiceUnavailable], codes)

	code, v, body = rollback()
	require.Equal(t, http.StatusOK, code, body)
	assert.Equal(t, uint64(4), v.Generation)
	assert.Equal(t, trust.Digest(v2).String(), v.SHA256)
	assert.Equal(t, "r2", revision())
	assert.Equal(t, 3.0, gaugeValue(t, h.Registry(), "caphost_rate_policy_reloads_total", map[string]string{"result": "ok"}),
		"the swap and both rollbacks rebuilt the policy set")
}

// TestGuestRevisionReuseAfterADrop: a guest generation that drops a
// policy does not let the next one bring it back changed under the same
// revision (against real Redis: the revision's state is still there). v1
// spends a key; a generation without free.read is accepted; a guest
// declaring free.read changed at revision 1 is refused, and the dropping
// generation keeps serving; v1 itself may come back and counts on.
func TestGuestRevisionReuseAfterADrop(t *testing.T) {
	srv := redistest.StartStandalone(t)
	env := newGuestEnv(t)
	h, logs := startHost(t, env.config(t, guestOpts{redisAddr: srv.Addr(), keys: true}))
	ctx := context.Background()
	swap := func(name string) (host.GuestStatus, error) {
		w := th.wasm[name]
		return h.SwapGuest(ctx, "rate-policy", w, env.sign(t, env.priv, w))
	}
	srvH := rateServer(t, h)
	codes := burst(srvH, 11)
	require.Equal(t, 11, codes[http.StatusNoContent], codes)

	st, err := swap("ratedrop")
	require.NoError(t, err, logs.String())
	require.Equal(t, uint64(2), st.Generation)
	lim, _, err := h.RateLimit()
	require.NoError(t, err)
	_, ok := lim.Policies().Policy("free-read")
	require.False(t, ok, "the intermediate generation dropped free.read")

	st, err = swap("ratereuse")
	require.Error(t, err, "free.read revision 1 was served with other parameters")
	assert.ErrorIs(t, err, host.ErrGuestPolicies)
	assert.ErrorIs(t, err, ratelimit.ErrRevisionReuse)
	var se *plugins.SwapError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, plugins.StageCapability, se.Stage)
	assert.Equal(t, uint64(2), st.Generation, "the dropping generation keeps serving")

	st, err = swap("rate-v1")
	require.NoError(t, err, "v1 unchanged may come back")
	assert.Equal(t, uint64(3), st.Generation)
	p, ok := lim.Policies().Policy("free-read")
	require.True(t, ok)
	assert.Equal(t, "r1", p.Revision)
	assert.Equal(t, int64(15), p.Parameters.Capacity, "with revision 1's own parameters")
}

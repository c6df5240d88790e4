package dispatch

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/host/notify/seal"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// sealedStore is a one-shard store on srv whose plans are sealed with
// write and opened with versions.
func sealedStore(t *testing.T, srv *redistest.Server, write int, versions ...int) *intent.Store {
	t.Helper()
	vs := map[int]policy.Secret{}
	for _, v := range versions {
		vs[v] = policy.NewSecret(bytes.Repeat([]byte{byte(v)}, 32))
	}
	ring, err := seal.New(seal.Config{WriteVersion: write, Versions: vs})
	require.NoError(t, err)
	cfg := redistest.ExampleConfig("", policy.RoleCoordination)
	dep := cfg.Deployments["main"]
	dep.Topology = &policy.Standalone{Endpoint: srv.Addr()}
	cfg.Deployments["main"] = dep
	rt, err := runtime.New(context.Background(), cfg, runtime.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	s, err := intent.New(rt, intent.Config{Shards: 1, Seal: ring})
	require.NoError(t, err)
	return s
}

// TestUnopenedPlansWaitForAConsumerWithTheKey: during a key roll-out, a
// consumer that does not hold the version an entry was sealed with
// neither sends nor quarantines it: the entry stays pending, and a
// consumer that holds the key reclaims and delivers it. An entry that no
// consumer can open is quarantined once it reaches MaxDeliveries, as any
// entry that keeps coming back (its record untouched: the id of an entry
// that did not open is not authenticated).
func TestUnopenedPlansWaitForAConsumerWithTheKey(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := ctxT(t)
	rotated := sealedStore(t, srv, 2, 1, 2)
	stale := sealedStore(t, srv, 1, 1)
	sub, err := rotated.Submit(ctx, []byte("k"), testPlan(t, "primary"))
	require.NoError(t, err)

	staleTr, staleObs := newScripted("primary", accepted), &counting{}
	staleCfg := crashConfig(staleObs, 1, staleTr)
	staleCfg.Consumer = "stale"
	ds, err := New(stale, staleCfg)
	require.NoError(t, err)
	n, err := ds.Poll(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, 1, staleObs.Get("unopened"))
	assert.Zero(t, staleObs.Get("quarantined:undecodable"))
	assert.Empty(t, staleTr.Calls())
	pending, _, _, err := stale.Backlog(ctx, 0)
	require.NoError(t, err)
	assert.Equal(t, int64(1), pending, "left pending for a consumer with the key")

	tr, obs := newScripted("primary", accepted), &counting{}
	cfg := crashConfig(obs, 1, tr)
	cfg.Consumer = "rotated"
	d, err := New(rotated, cfg)
	require.NoError(t, err)
	pollUntilReclaimed(ctx, t, d)
	require.Len(t, tr.Calls(), 1)
	assert.Equal(t, string(sub.ID), tr.Calls()[0].IntentID)
	st, err := rotated.Get(ctx, sub.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Delivered, st.State)
	assertNothingPending(ctx, t, rotated)

	// Nobody holds version 2 here: the entry comes back to the stale
	// consumer until MaxDeliveries, then it is quarantined.
	lost, err := rotated.Submit(ctx, []byte("k2"), testPlan(t, "primary"))
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := ds.Poll(ctx, 0)
		return err == nil && staleObs.Get("quarantined:deliveries") == 1
	}, 20*time.Second, 10*time.Millisecond)
	assert.Equal(t, int(staleCfg.MaxDeliveries), staleObs.Get("unopened"), "the first entry once, this one MaxDeliveries−1 times")
	assert.Empty(t, staleTr.Calls())
	assertNothingPending(ctx, t, rotated)
	q := srv.Admin().Keys(ctx, "*:notify:*:quarantine").Val()
	require.Len(t, q, 1)
	assert.Equal(t, int64(1), srv.Admin().XLen(ctx, q[0]).Val())
	// The id of an entry that did not open is not authenticated, so its
	// record is left as it is (PENDING until retention), as for any
	// undecodable entry.
	st, err = rotated.Get(ctx, lost.ID)
	require.NoError(t, err)
	assert.Equal(t, intent.Pending, st.State)
}

package cache

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestLookupOrClaimWhateverTheStampede: the stampede strategy decides how
// GetOrLoad coalesces loads; a caller that asks for the refresh lease
// gets it in a local region as in a distributed one, and the lease
// excludes other claimants until the holder records.
func TestLookupOrClaimWhateverTheStampede(t *testing.T) {
	srv := redistest.StartStandalone(t)
	for _, s := range []policy.CacheStampede{policy.CacheStampedeLocal, policy.CacheStampedeDistributed} {
		t.Run(string(s), func(t *testing.T) {
			in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, func(d *policy.CacheRegionDecl, _ *policy.CacheOps) {
				d.Stampede = s
			}), newClock(), nil)
			r := in.region(t, "items")
			require.Equal(t, s, in.c.Regions()[0].Stampede)
			ctx, key := ctxT(t), Parts("claim", string(s))

			lk, claim, token, err := r.LookupOrClaim(ctx, key, 0)
			require.NoError(t, err)
			assert.Equal(t, Miss, lk.Kind)
			require.Equal(t, Granted, claim)
			_, claim, _, err = r.LookupOrClaim(ctx, key, 0)
			require.NoError(t, err)
			assert.Equal(t, Contended, claim, "the lease excludes a second claimant")
			o, err := r.RecordClaimed(ctx, key, token, []byte("v"), false, RecordMeta{})
			require.NoError(t, err)
			assert.Equal(t, Recorded, o)
			lk, claim, _, err = r.LookupOrClaim(ctx, key, 0)
			require.NoError(t, err)
			assert.Equal(t, Hit, lk.Kind)
			assert.Equal(t, NotClaimed, claim)
		})
	}
}

// TestRecordClaimedLosesToInvalidation: a refill through LookupOrClaim
// and RecordClaimed (the sidecar's claim and PUT) is conditional on what
// its lookup observed. Another host's region invalidation or per-key
// invalidation between the lookup and the record refuses it
// (NotRecordedCondition), for a missing key and for a stale entry alike,
// and neither host then finds the refill's value; without one, the same
// refill is recorded.
func TestRecordClaimedLosesToInvalidation(t *testing.T) {
	srv := redistest.StartStandalone(t)
	topo := &policy.Standalone{Endpoint: srv.Addr()}
	clk := newClock()
	ia, ib := newInstance(t, topo, testConfig(t, nil), clk, nil), newInstance(t, topo, testConfig(t, nil), clk, nil)
	waitHintsUp(t, ia, ib)
	loader, writer := ia.region(t, "items"), ib.region(t, "items")

	for _, tc := range []struct {
		name       string
		invalidate func(ctx context.Context, key Key) error
		want       RecordOutcome
	}{
		{"none", func(context.Context, Key) error { return nil }, Recorded},
		{"key", func(ctx context.Context, key Key) error {
			o, err := writer.Invalidate(ctx, key)
			if err == nil && o != AlreadyAbsent && o != InvalidationDone {
				return fmt.Errorf("invalidate: %s", o)
			}
			return err
		}, NotRecordedCondition},
		{"region", func(ctx context.Context, _ Key) error {
			o, err := writer.InvalidateRegion(ctx)
			if err == nil && o != InvalidationDone {
				return fmt.Errorf("invalidate region: %s", o)
			}
			return err
		}, NotRecordedCondition},
	} {
		for _, existing := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/existing=%t", tc.name, existing), func(t *testing.T) {
				ctx, key := ctxT(t), Parts("claimed", tc.name, fmt.Sprint(existing))
				want := Miss
				if existing {
					// A stale entry: the claim refreshes it.
					_, err := writer.Record(ctx, key, []byte("stale"), RecordMeta{})
					require.NoError(t, err)
					clk.Advance(11 * time.Second)
					defer clk.Advance(-11 * time.Second)
					want = Hit
				}
				lk, claim, token, err := loader.LookupOrClaim(ctx, key, 0)
				require.NoError(t, err)
				require.Equal(t, want, lk.Kind)
				require.Equal(t, Granted, claim)

				require.NoError(t, tc.invalidate(ctx, key))
				o, err := loader.RecordClaimed(ctx, key, token, []byte("refill"), false, RecordMeta{})
				require.NoError(t, err)
				require.Equal(t, tc.want, o)
				if tc.want == Recorded {
					lk, err := writer.Lookup(ctx, key)
					require.NoError(t, err)
					assert.Equal(t, []byte("refill"), lk.Value)
					return
				}
				for _, r := range []*Region{writer, loader} {
					// The loader learns of a region invalidation from its hint.
					require.Eventually(t, func() bool {
						lk, err := r.Lookup(ctx, key)
						return err == nil && lk.Kind == Miss
					}, 10*time.Second, time.Millisecond, "the refill must lose to the invalidation")
				}
			})
		}
	}
}

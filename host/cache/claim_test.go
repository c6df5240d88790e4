package cache

import (
	"testing"

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

//go:build !race

// Allocation counts hold only without the race detector, whose runtime
// allocates on its own. make test runs every test of a *_norace_test.go
// file in a pass without it.

package cache

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestL1HitAllocatesNothing: an L1 hit read into a reused buffer
// (LookupAppend) allocates nothing.
func TestL1HitAllocatesNothing(t *testing.T) {
	_, r, value := recordedItem(t)
	ctx := ctxT(t)
	buf := make([]byte, 0, 4096)
	require.Eventually(t, func() bool { // an L2 hit fills L1
		lk, err := r.LookupAppend(ctx, Parts("k"), buf[:0])
		return err == nil && lk.FromL1
	}, 10*time.Second, time.Millisecond)
	var out []byte
	allocs := testing.AllocsPerRun(200, func() {
		lk, err := r.LookupAppend(ctx, Parts("k"), buf[:0])
		if err != nil || !lk.FromL1 {
			t.Errorf("not an L1 hit: %v %v", lk.Kind, err)
		}
		out = lk.Value
	})
	assert.Zero(t, allocs, "an L1 hit into a reused buffer")
	assert.Equal(t, value, out)
}

// TestGuestCodecDecodeAllocatesTheValue: a guest decode, on every L2 hit
// of a guest-codec region, allocates the value it returns and nothing
// else.
func TestGuestCodecDecodeAllocatesTheValue(t *testing.T) {
	cd := productCodec(t)
	ctx := ctxT(t)
	payload := []byte(productV2)
	_, err := cd.decode(ctx, 2, payload) // warm: the instance exists
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := cd.decode(ctx, 2, payload); err != nil {
			t.Error(err)
		}
	})
	assert.LessOrEqual(t, allocs, 1.0, "the value only")
}

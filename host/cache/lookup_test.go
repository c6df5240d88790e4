package cache

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// recordedItem is an instance with L1 on a private Redis whose region
// "items" holds a 1 KiB value under "k", recorded (so maybe in L1).
func recordedItem(t *testing.T) (*instance, *Region, []byte) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, l1Config(t), newClock(), nil)
	waitHintsUp(t, in)
	r := in.region(t, "items")
	value := bytes.Repeat([]byte("0123456789abcdef"), 64)
	_, err := r.Record(ctxT(t), Parts("k"), value, RecordMeta{})
	require.NoError(t, err)
	return in, r, value
}

// TestLookupAppend: a hit's value lands after dst's bytes, in dst's array
// when it has the room; the caller's copy is its own (writing it changes
// no later hit), and an outcome without a value leaves dst alone.
// (TestL1HitAllocatesNothing pins its allocations.)
func TestLookupAppend(t *testing.T) {
	in, r, value := recordedItem(t)
	ctx := ctxT(t)

	// From L2 first: the write may have filled L1.
	in.c.state.Load().regions["items"].l1.Flush()
	buf := make([]byte, 0, 4096)
	lk, err := r.LookupAppend(ctx, Parts("k"), append(buf, "prefix:"...))
	require.NoError(t, err)
	require.Equal(t, Hit, lk.Kind)
	require.False(t, lk.FromL1)
	assert.Equal(t, "prefix:"+string(value), string(lk.Value))
	assert.Same(t, &buf[:1][0], &lk.Value[0], "the value is appended in dst's array")

	require.Eventually(t, func() bool {
		lk, err := r.Lookup(ctx, Parts("k"))
		return err == nil && lk.FromL1
	}, 10*time.Second, time.Millisecond)
	lk, err = r.LookupAppend(ctx, Parts("k"), buf[:0])
	require.NoError(t, err)
	require.True(t, lk.FromL1)
	assert.Equal(t, value, lk.Value)
	assert.Same(t, &buf[:1][0], &lk.Value[0])
	clear(lk.Value) // the caller's copy: no later hit may see this
	again, err := r.Lookup(ctx, Parts("k"))
	require.NoError(t, err)
	require.True(t, again.FromL1)
	assert.Equal(t, value, again.Value)

	// A miss writes nothing into dst's array, not even past its length.
	all := buf[:cap(buf)]
	marker := bytes.Repeat([]byte{'x'}, len(all))
	copy(all, marker)
	lk, err = r.LookupAppend(ctx, Parts("absent"), buf[:0])
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind)
	assert.Nil(t, lk.Value)
	assert.Equal(t, marker, all)
}

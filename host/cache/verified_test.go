package cache

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// TestLookupChecksTheDigestOfChangedBytes: a region remembers the
// envelopes whose digest it verified (envelope.Memo), and an entry whose
// stored bytes change under the same key after a verified hit — one
// payload bit flipped, its digest field untouched — is still caught as
// corrupt and quarantined, never served as the remembered value.
func TestLookupChecksTheDigestOfChangedBytes(t *testing.T) {
	srv := redistest.StartStandalone(t)
	in := newInstance(t, &policy.Standalone{Endpoint: srv.Addr()}, testConfig(t, nil), newClock(), nil)
	r := in.region(t, "items")
	ctx := ctxT(t)
	value := bytes.Repeat([]byte("0123456789abcdef"), 64)
	_, err := r.Record(ctx, Parts("k"), value, RecordMeta{})
	require.NoError(t, err)
	for range 3 { // verified once, then remembered
		lk, err := r.Lookup(ctx, Parts("k"))
		require.NoError(t, err)
		require.Equal(t, Hit, lk.Kind)
		assert.Equal(t, value, lk.Value)
	}

	flipped := bytes.Clone(rawBytes(t, in, "items", Parts("k")))
	flipped[len(flipped)-1] ^= 0x01
	rawPutBytes(t, in, "items", Parts("k"), flipped)

	_, err = r.Lookup(ctx, Parts("k"))
	require.ErrorIs(t, err, ErrCorrupt)
	lk, err := r.Lookup(ctx, Parts("k"))
	require.NoError(t, err)
	assert.Equal(t, Miss, lk.Kind, "quarantined")
	assert.Equal(t, Invalidated, lk.MissReason)
}

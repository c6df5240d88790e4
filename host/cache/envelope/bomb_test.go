package envelope_test

import (
	"bytes"
	"compress/flate"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/envelope"
)

// gibOfZeros is a raw DEFLATE stream of 1 GiB of zeros (about 1.3 MiB),
// built without compressing a GiB: after a sync flush, the block that
// encodes 1 MiB of zeros is byte-aligned and position-independent (its
// matches reach back into zeros), so it is repeated 1024 times and closed
// with an empty final fixed-Huffman block.
func gibOfZeros(t testing.TB) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := flate.NewWriter(&b, flate.BestSpeed)
	require.NoError(t, err)
	chunk := make([]byte, 1<<20)
	var blocks [2][]byte
	for i := range blocks {
		n := b.Len()
		_, err = w.Write(chunk)
		require.NoError(t, err)
		require.NoError(t, w.Flush())
		blocks[i] = bytes.Clone(b.Bytes()[n:])
	}
	require.Equal(t, blocks[0], blocks[1], "the 1 MiB block repeats")
	one, err := io.ReadAll(flate.NewReader(bytes.NewReader(append(bytes.Clone(blocks[0]), 0x03, 0x00))))
	require.NoError(t, err)
	require.Len(t, one, 1<<20, "one block is 1 MiB")
	out := bytes.Repeat(blocks[0], 1<<10)
	return append(out, 0x03, 0x00)
}

// allocated runs f and returns the bytes it allocated (runtime.MemStats
// TotalAlloc delta, process-wide: the test runs nothing in parallel).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecompressionBomb: stored values that would inflate to GiBs fail
// fast, and Decode allocates no more than the payload bound plus a fixed
// allowance (the pooled inflater's window and tables are reused).
func TestDecompressionBomb(t *testing.T) {
	bomb := gibOfZeros(t)
	var err error
	if !raceEnabled { // inflating the GiB takes 0.5 s, ten times that under -race
		n, err := io.Copy(io.Discard, flate.NewReader(bytes.NewReader(bomb)))
		require.NoError(t, err)
		require.EqualValues(t, 1<<30, n, "the bomb is real")
	}
	t.Logf("1 GiB of zeros in %d bytes of DEFLATE", len(bomb))
	l := envelope.Limits{
		MaxEncodedBytes:     4 << 20,
		MaxCodecIDBytes:     64,
		MaxPayloadBytes:     64 << 10,
		MaxCompressionRatio: 1024,
	}
	// Beyond the payload: the codec id, the hasher, the error, and the
	// inflater's ~42 KiB window and tables if a GC emptied its pool.
	const allowance = 64 << 10
	tiny := deflate(t, make([]byte, 8<<20)) // 8 MiB of zeros in a few KiB
	cases := map[string]struct {
		raw    rawV2
		lim    envelope.Limits
		want   envelope.Category
		reason string
	}{
		"honest 1 GiB declaration": {
			rawV2{flags: 2, hard: 1, decodedLen: 1 << 30, stored: bomb}, l,
			envelope.TooLarge, "declared decoded size exceeds max payload bytes",
		},
		"1 GiB stream declaring 64 KiB": {
			rawV2{flags: 2, hard: 1, decodedLen: 64 << 10, stored: bomb}, l,
			envelope.Corrupt, "deflate stream longer than declared",
		},
		"tiny stream, ratio above the limit": {
			rawV2{flags: 2, hard: 1, decodedLen: 8 << 20, stored: tiny},
			envelope.Limits{MaxEncodedBytes: 1 << 20, MaxCodecIDBytes: 64, MaxPayloadBytes: 16 << 20, MaxCompressionRatio: 100},
			envelope.TooLarge, "compression ratio exceeds the limit",
		},
		"tiny stream declaring 1 KiB": {
			rawV2{flags: 2, hard: 1, decodedLen: 1 << 10, stored: tiny}, l,
			envelope.Corrupt, "deflate stream longer than declared",
		},
	}
	// Warm the inflater pool so its one-time state is not counted.
	_, err = envelope.Decode(readHex(t, "v2_compressed"), lim)
	require.NoError(t, err)
	for name, c := range cases {
		b := c.raw.bytes()
		var err error
		start := time.Now()
		n := allocated(func() { _, err = envelope.Decode(b, c.lim) })
		took := time.Since(start)
		var ee *envelope.Error
		require.ErrorAs(t, err, &ee, name)
		assert.Equal(t, c.want, ee.Category, name)
		assert.Equal(t, c.reason, ee.Reason, name)
		assert.LessOrEqual(t, n, uint64(c.lim.MaxPayloadBytes)+allowance, "%s allocated %d bytes", name, n)
		assert.Less(t, took, 2*time.Second, name)
		t.Logf("%s: %s in %v, %d bytes allocated", name, ee.Reason, took, n)
	}
}

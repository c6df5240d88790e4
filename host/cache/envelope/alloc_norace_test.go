//go:build !race

// Allocation counts are pinned only without the race detector, under which
// sync.Pool drops a quarter of what is put back.

package envelope_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/caphost/caphost/host/cache/envelope"
)

// TestDecodeAllocations pins the allocation count of the hot path.
func TestDecodeAllocations(t *testing.T) {
	b := readHex(t, "v2_positive")
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := envelope.Decode(b, lim); err != nil {
			t.Fatal(err)
		}
	})
	assert.LessOrEqual(t, allocs, 2.0, "codec id string and the hasher")
	c := readHex(t, "v2_compressed")
	allocs = testing.AllocsPerRun(100, func() {
		if _, err := envelope.Decode(c, lim); err != nil {
			t.Fatal(err)
		}
	})
	assert.LessOrEqual(t, allocs, 3.0, "plus the payload buffer; the inflater is pooled")
}

// TestMemoDecodeAllocations: an envelope a Memo remembers decodes without
// allocating, the codec id included.
func TestMemoDecodeAllocations(t *testing.T) {
	b := readHex(t, "v2_positive")
	m := envelope.NewMemo(4)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := m.Decode(b, lim); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

//go:build !race

// Allocation counts are pinned only without the race detector, under which
// sync.Pool drops a quarter of what is put back.

package hint_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOpenAllocations pins the receive path: the Region string and the
// Scope copy; the HMAC state is pooled.
func TestOpenAllocations(t *testing.T) {
	c := newCodec(t, secret, t0)
	key, region := readHex(t, "key_invalidated"), readHex(t, "region_invalidated")
	assert.LessOrEqual(t, testing.AllocsPerRun(100, func() {
		if _, err := c.Open(key); err != nil {
			t.Fatal(err)
		}
	}), 2.0)
	assert.LessOrEqual(t, testing.AllocsPerRun(100, func() {
		if _, err := c.Open(region); err != nil {
			t.Fatal(err)
		}
	}), 1.0)
	forged := readHex(t, "tamper_tag")
	assert.LessOrEqual(t, testing.AllocsPerRun(100, func() {
		if _, err := c.Open(forged); err == nil {
			t.Fatal("accepted")
		}
	}), 1.0, "a forged hint costs the receiver its error and nothing else")
}

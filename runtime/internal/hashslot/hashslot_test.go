package hashslot

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Vectors from the Redis Cluster specification and `CLUSTER KEYSLOT`.
func TestOf(t *testing.T) {
	cases := map[string]uint16{
		"123456789":            12739, // CRC16/XMODEM check value 0x31C3 = 12739
		"foo":                  12182,
		"{user1000}.following": Of("user1000"),
		"foo{}{bar}":           Of("foo{}{bar}"),
		"foo{{bar}}zap":        Of("{bar"),
		"foo{bar}{zap}":        Of("bar"),
	}
	for k, want := range cases {
		assert.Equal(t, want, Of(k), k)
	}
	assert.Equal(t, "{bar", Tag("foo{{bar}}zap"))
	assert.Equal(t, "foo{}{bar}", Tag("foo{}{bar}"))
	assert.Equal(t, "bar", Tag("foo{bar}{zap}"))
}

func FuzzOf(f *testing.F) {
	f.Add("a{b}c")
	f.Fuzz(func(t *testing.T, k string) {
		if Of(k) >= Count {
			t.Fatal("slot out of range")
		}
	})
}

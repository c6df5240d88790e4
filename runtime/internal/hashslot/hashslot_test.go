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
		if crc16(k) != crc16Bitwise(k) {
			t.Fatal("table CRC differs from the bitwise definition")
		}
	})
}

// crc16Bitwise is the CRC16/XMODEM definition the table is derived from.
func crc16Bitwise(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func TestTableMatchesDefinition(t *testing.T) {
	for i := range 256 {
		assert.Equal(t, crc16Bitwise(string([]byte{byte(i)})), crcTable[i], "byte %d", i)
	}
	for _, s := range []string{"", "123456789", "user1000", "\xff\x00{}", "caphost:prod:{q2Zp0mN4T1b}"} {
		assert.Equal(t, crc16Bitwise(s), crc16(s), s)
	}
}

func BenchmarkOf(b *testing.B) {
	k := "caphost:prod:rate:{q2Zp0mN4T1bXk7uYw3Lr9A}:tb"
	for b.Loop() {
		_ = Of(k)
	}
}

package hint_test

import "testing"

// BenchmarkSeal is the publish side of one key invalidation.
func BenchmarkSeal(b *testing.B) {
	c := newCodec(b, secret, t0)
	m := keyMessage()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Seal(m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpen is what every host pays per hint received: a genuine one,
// and a forged one (which stops at the tag).
func BenchmarkOpen(b *testing.B) {
	c := newCodec(b, secret, t0)
	for _, name := range []string{"key_invalidated", "tamper_tag"} {
		in := readHex(b, name)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = c.Open(in)
			}
		})
	}
}

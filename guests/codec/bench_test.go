package main

import (
	"encoding/json"
	"fmt"
	"testing"
)

// product1K is a product of about 1 KiB in canonical form: the value
// host/cache's benchmarks cache, and so what every L2 hit of region
// products decodes.
func product1K(tb testing.TB) []byte {
	tb.Helper()
	p := Product{ID: "sku-000042", Name: "Solar garden lamp, warm white, stainless steel, waterproof, dusk to dawn sensor",
		PriceCents: 12999, Currency: "EUR", Tags: make([]string, 16)}
	for i := range p.Tags {
		p.Tags[i] = fmt.Sprintf("outdoor-lighting-%02d-pathway-patio-lantern-bronze", i)
	}
	for {
		out, err := json.Marshal(&p)
		if err != nil {
			tb.Fatal(err)
		}
		if len(out) >= 1024 {
			return out
		}
		p.Name += " lamp"
	}
}

// BenchmarkDecodeProduct1K is the codec's decode of a stored v2 product of
// about 1 KiB, natively (plugins' BenchmarkCodecGuestProduct1K times the
// same call through the Wasm guest).
func BenchmarkDecodeProduct1K(b *testing.B) {
	c := codecOf(b, "product")
	payload := product1K(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if v, err := c.Decode(2, payload); err != nil || len(v) != len(payload) {
			b.Fatal(err, len(v))
		}
	}
}

// BenchmarkEncodeProduct1K is the codec's encode of the same product's
// interchange value.
func BenchmarkEncodeProduct1K(b *testing.B) {
	c := codecOf(b, "product")
	value := product1K(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(value)))
	for b.Loop() {
		if p, err := c.Encode(value); err != nil || len(p) != len(value) {
			b.Fatal(err, len(p))
		}
	}
}

package keys

import "testing"

// BenchmarkBuild measures one keyed build (the per-lookup cost of a cache
// or rate key). Run with -bench=Build -benchtime=1s; it is not part of CI.
func BenchmarkBuild(b *testing.B) {
	bl := newTestBuilder(b)
	s := spec(CapCache, "entry", "tenant-1", "item-42")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bl.Build(s); err != nil {
			b.Fatal(err)
		}
	}
}

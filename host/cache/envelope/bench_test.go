package envelope_test

import (
	"testing"

	"github.com/caphost/caphost/host/cache/envelope"
)

func bench1KiB(compressed bool) envelope.Envelope {
	e := base()
	e.HasSourceRevision, e.SourceRevision = true, 7
	if compressed {
		e.Payload, e.Compressed = compressiblePayload()[:1024], true
	} else {
		e.Payload = make([]byte, 1024)
		for i := range e.Payload {
			e.Payload[i] = byte(i * 7)
		}
	}
	return e
}

func BenchmarkEncode1KiB(b *testing.B) {
	for _, c := range []struct {
		name       string
		compressed bool
	}{{"raw", false}, {"deflate", true}} {
		e := bench1KiB(c.compressed)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(e.Payload)))
			for b.Loop() {
				if _, err := envelope.Encode(e, lim); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkDecode1KiB(b *testing.B) {
	for _, c := range []struct {
		name       string
		compressed bool
	}{{"raw", false}, {"deflate", true}} {
		enc, err := envelope.Encode(bench1KiB(c.compressed), lim)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(1024)
			for b.Loop() {
				if _, err := envelope.Decode(enc, lim); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDecode1KiBMemo is Decode of a 1 KiB envelope a Memo holds:
// what an L2 hit on a hot entry pays.
func BenchmarkDecode1KiBMemo(b *testing.B) {
	enc, err := envelope.Encode(bench1KiB(false), lim)
	if err != nil {
		b.Fatal(err)
	}
	m := envelope.NewMemo(10)
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		if _, err := m.Decode(enc, lim); err != nil {
			b.Fatal(err)
		}
	}
}

package envelope_test

import (
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/envelope"
)

// fuzzLim leaves room for any payload plus the largest header, so Encode of
// anything Decode accepted always fits.
var fuzzLim = envelope.Limits{
	MaxEncodedBytes:     8 << 10,
	MaxCodecIDBytes:     64,
	MaxPayloadBytes:     4 << 10,
	MaxCompressionRatio: 64,
}

// FuzzDecode: Decode never panics, fails only with a valid non-Invalid
// category, never allocates past the payload bound plus a fixed allowance,
// and whatever it accepts re-encodes: byte-identically for an uncompressed
// v2 envelope, to a canonical fixed point carrying the same fields
// otherwise.
func FuzzDecode(f *testing.F) {
	names, err := filepath.Glob(filepath.Join("testdata", "*.hex"))
	require.NoError(f, err)
	for _, n := range names {
		f.Add(readHex(f, strings.TrimSuffix(filepath.Base(n), ".hex")))
	}
	f.Add(rawV2{flags: 2 | 4 | 8, revision: 1, written: 1, soft: 2, hard: 3, decodedLen: 300,
		stored: deflate(f, []byte(strings.Repeat("abc", 100)))}.bytes())
	f.Add(rawV2{flags: 2, hard: 1, decodedLen: 4 << 10, stored: deflate(f, make([]byte, 1<<20))}.bytes())
	f.Add([]byte{})
	f.Add([]byte(`{"x":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		e, err := envelope.Decode(b, fuzzLim)
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > uint64(fuzzLim.MaxPayloadBytes)+64<<10 {
			t.Fatalf("Decode of %d bytes allocated %d bytes", len(b), n)
		}
		if err != nil {
			var ee *envelope.Error
			if !errors.As(err, &ee) || !ee.Category.Valid() || ee.Category == envelope.Invalid {
				t.Fatalf("untyped or invalid failure: %v", err)
			}
			return
		}
		if len(e.Payload) > fuzzLim.MaxPayloadBytes || cap(e.Payload) > fuzzLim.MaxPayloadBytes ||
			len(e.CodecID) > fuzzLim.MaxCodecIDBytes {
			t.Fatalf("decoded past the limits: payload %d/%d, codec id %d", len(e.Payload), cap(e.Payload), len(e.CodecID))
		}
		if e.Negative && len(e.Payload) != 0 {
			t.Fatal("negative entry with a payload")
		}
		_ = e.State(e.WrittenAt)
		again, err := envelope.Encode(e, fuzzLim)
		if err != nil {
			t.Fatalf("decoded envelope does not re-encode: %v", err)
		}
		if e.EnvelopeVersion == envelope.Version && !e.Compressed {
			if string(again) != string(b) {
				t.Fatalf("v2 re-encode differs:\n in %x\nout %x", b, again)
			}
			return
		}
		e2, err := envelope.Decode(again, fuzzLim)
		if err != nil {
			t.Fatalf("re-encoded envelope does not decode: %v", err)
		}
		third, err := envelope.Encode(e2, fuzzLim)
		if err != nil || string(third) != string(again) {
			t.Fatalf("canonical form is not a fixed point: %v", err)
		}
		e.EnvelopeVersion, e.Compressed = e2.EnvelopeVersion, e2.Compressed
		if len(e.Payload) == 0 {
			e.Payload = nil
		}
		if !equal(e, e2) {
			t.Fatalf("re-encode changed fields:\n%+v\n%+v", e, e2)
		}
	})
}

func equal(a, b envelope.Envelope) bool {
	return a.EnvelopeVersion == b.EnvelopeVersion && a.CodecID == b.CodecID && a.PayloadVersion == b.PayloadVersion &&
		a.Negative == b.Negative && a.Compressed == b.Compressed && a.HasSourceRevision == b.HasSourceRevision &&
		a.SourceRevision == b.SourceRevision && a.WrittenAt.Equal(b.WrittenAt) && a.SoftExpiresAt.Equal(b.SoftExpiresAt) &&
		a.HardExpiresAt.Equal(b.HardExpiresAt) && string(a.Payload) == string(b.Payload)
}

package envelope_test

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/envelope"
)

var update = flag.Bool("update", false, "rewrite testdata/*.hex from the envelopes defined in golden_test.go")

func compressiblePayload() []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < 2048; i++ {
		b.WriteString(`{"sku":"widget-`)
		b.WriteByte('0' + byte(i%10))
		b.WriteString(`","price":1999,"currency":"EUR","stock":true},`)
	}
	return b.Bytes()
}

// goldens are the envelopes behind the positive vectors.
func goldens() map[string]envelope.Envelope {
	return map[string]envelope.Envelope{
		"v2_positive": {
			EnvelopeVersion: 2, CodecID: "example.item", PayloadVersion: 3,
			HasSourceRevision: true, SourceRevision: 42,
			WrittenAt: t0, SoftExpiresAt: t0.Add(30 * time.Second), HardExpiresAt: t0.Add(5 * time.Minute),
			Payload: []byte(`{"id":7,"name":"widget"}`),
		},
		"v2_negative": {
			EnvelopeVersion: 2, CodecID: "example.item", PayloadVersion: 3, Negative: true,
			HasSourceRevision: true, SourceRevision: 43,
			WrittenAt: t0, HardExpiresAt: t0.Add(10 * time.Second),
		},
		"v2_compressed": {
			EnvelopeVersion: 2, CodecID: "example.catalog", PayloadVersion: 1, Compressed: true,
			WrittenAt: t0, SoftExpiresAt: t0.Add(time.Minute), HardExpiresAt: t0.Add(10 * time.Minute),
			Payload: compressiblePayload(),
		},
		// v1 decodes to this; its re-encoding is v1_as_v2.
		"v1":       v1,
		"v1_as_v2": v1as2,
	}
}

var (
	v1 = envelope.Envelope{
		EnvelopeVersion: 1, CodecID: "example.item", PayloadVersion: 2,
		WrittenAt: t0, HardExpiresAt: t0.Add(5 * time.Minute),
		Payload: []byte(`{"id":7}`),
	}
	v1as2 = func() envelope.Envelope { e := v1; e.EnvelopeVersion = 2; return e }()
)

func readHex(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name+".hex"))
	require.NoError(t, err)
	b, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	require.NoError(t, err, name)
	return b
}

func writeHex(t *testing.T, name string, b []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join("testdata", name+".hex"), []byte(hex.EncodeToString(b)+"\n"), 0o644))
}

// tamper derives the negative vectors from v2_positive. Offsets follow the
// layout in doc.go for a 12-byte codec id with a revision and a soft expiry:
// flags at 22, hard expiry at 47..54, payload length at 55..58, digest at
// 59..74.
func tamper(pos []byte) map[string][]byte {
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(pos)) }
	return map[string][]byte{
		"tamper_digest":    mut(func(b []byte) []byte { b[60] ^= 0x01; return b }),
		"tamper_length":    mut(func(b []byte) []byte { b[58]--; return b }),
		"tamper_truncated": mut(func(b []byte) []byte { return b[:len(b)-1] }),
		"tamper_trailing":  mut(func(b []byte) []byte { return append(b, 0) }),
		"tamper_expiry":    mut(func(b []byte) []byte { b[54] ^= 0x01; return b }),
		"tamper_flags":     mut(func(b []byte) []byte { b[22] |= 0x80; return b }),
		"tamper_future":    mut(func(b []byte) []byte { b[4] = 3; return b }),
		"tamper_retired":   mut(func(b []byte) []byte { b[4] = 0; return b }),
		"tamper_magic":     mut(func(b []byte) []byte { b[0] = '{'; return b }),
	}
}

// writeGoldens rewrites testdata from the envelopes above (go test -update);
// TestGoldenVectors then checks what it wrote.
func writeGoldens(t *testing.T) {
	t.Helper()
	for name, e := range goldens() {
		if name == "v1" {
			continue
		}
		b, err := envelope.Encode(e, lim)
		require.NoError(t, err)
		writeHex(t, name, b)
	}
	writeHex(t, "v1", encodeV1(v1.CodecID, v1.PayloadVersion, false, v1.WrittenAt, v1.HardExpiresAt, v1.Payload))
	for name, b := range tamper(readHex(t, "v2_positive")) {
		writeHex(t, name, b)
	}
}

// TestGoldenVectors checks every line of testdata/expect.txt: the positive
// vectors decode to the envelopes above and re-encode byte-identically (v1
// to its v2 rewrite); the tampered ones fail with the expected category.
func TestGoldenVectors(t *testing.T) {
	if *update {
		writeGoldens(t)
	}
	f, err := os.Open(filepath.Join("testdata", "expect.txt"))
	require.NoError(t, err)
	defer f.Close()
	want := goldens()
	derived := tamper(readHex(t, "v2_positive"))
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, "|")
		require.Len(t, parts, 3, line)
		name, expect, reason := parts[0], parts[1], parts[2]
		b := readHex(t, name)
		got, err := envelope.Decode(b, lim)
		if expect == "OK" {
			require.NoError(t, err, name)
			assert.Equal(t, want[name], got, name)
			again, err := envelope.Encode(got, lim)
			require.NoError(t, err, name)
			if name == "v1" {
				assert.Equal(t, readHex(t, "v1_as_v2"), again, "v1 rewrites as v1_as_v2")
			} else {
				assert.Equal(t, b, again, "%s re-encodes byte-identically", name)
				fresh, err := envelope.Encode(want[name], lim)
				require.NoError(t, err)
				assert.Equal(t, b, fresh, "%s: Encode still writes the golden bytes", name)
			}
		} else {
			var ee *envelope.Error
			require.ErrorAs(t, err, &ee, name)
			assert.Equal(t, expect, ee.Category.String(), "%s: %v", name, err)
			assert.Equal(t, reason, ee.Reason, name)
			if d, ok := derived[name]; ok {
				assert.Equal(t, d, b, "%s is still derived from v2_positive as tamper() says", name)
			}
		}
		n++
	}
	require.NoError(t, sc.Err())
	assert.GreaterOrEqual(t, n, 14)
}

package hint_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/hint"
)

var update = flag.Bool("update", false, "rewrite testdata/*.hex from the messages defined in golden_test.go")

// goldens are the messages behind the accepted vectors, all opened at t0.
func goldens() map[string]hint.Message {
	past, future := keyMessage(), regionMessage()
	past.IssuedAt = t0.Add(-window)
	future.IssuedAt = t0.Add(window)
	return map[string]hint.Message{
		"key_invalidated":    keyMessage(),
		"region_invalidated": regionMessage(),
		"largest":            largestMessage(),
		"window_past_edge":   past,
		"window_future_edge": future,
	}
}

// derived are the refused vectors, each made from a golden by one change.
// The signed_* ones carry a valid tag (computed by sign, independently of
// the Codec) over a frame that breaks the layout.
func derived(t testing.TB) map[string][]byte {
	c := newCodec(t, secret, t0)
	key := seal(t, c, keyMessage())
	region := seal(t, c, regionMessage())
	frame := func(b []byte) []byte { return bytes.Clone(b[:len(b)-hint.TagBytes]) }
	mut := func(b []byte, f func(b []byte) []byte) []byte { return f(bytes.Clone(b)) }
	resign := func(b []byte, f func(f []byte) []byte) []byte { return sign(secret, f(frame(b))) }
	stale, future := keyMessage(), keyMessage()
	stale.IssuedAt = t0.Add(-window - time.Millisecond)
	future.IssuedAt = t0.Add(window + time.Millisecond)
	return map[string][]byte{
		"tamper_tag":      mut(key, func(b []byte) []byte { b[len(b)-1] ^= 0x01; return b }),
		"tamper_region":   mut(key, func(b []byte) []byte { b[offRegion] ^= 0x01; return b }),
		"tamper_issued":   mut(key, func(b []byte) []byte { b[offIssuedAt+7] ^= 0x01; return b }),
		"tamper_kind":     mut(region, func(b []byte) []byte { b[offKind] = byte(hint.KeyInvalidated); return b }),
		"tamper_magic":    mut(key, func(b []byte) []byte { b[1] = 'X'; return b }),
		"tamper_version":  mut(key, func(b []byte) []byte { b[offVersion] = 2; return b }),
		"truncated":       key[:len(key)-1],
		"trailing":        append(bytes.Clone(key), 0),
		"too_short":       key[:hint.MinBytes-1],
		"too_long":        append(bytes.Clone(seal(t, c, largestMessage())), 0),
		"other_secret":    seal(t, newCodec(t, otherSecret, t0), keyMessage()),
		"stale":           seal(t, c, stale),
		"future":          seal(t, c, future),
		"signed_kind":     resign(key, func(f []byte) []byte { f[offKind] = 3; return f }),
		"signed_sender":   resign(key, func(f []byte) []byte { clear(f[offSender : offSender+16]); return f }),
		"signed_issued":   resign(key, func(f []byte) []byte { f[offIssuedAt] |= 0x80; return f }),
		"signed_region":   resign(key, func(f []byte) []byte { f[offRegion] = 'I'; return f }),
		"signed_region_0": resign(region, func(f []byte) []byte { f[offRegionLen] = 0; return f }),
		"signed_location": resign(key, func(f []byte) []byte { clear(f[offLocation : offLocation+32]); return f }),
		"signed_scope_0":  resign(key, func(f []byte) []byte { f[offScopeLen] = 0; return f[:offScope] }),
		"signed_scope_n":  resign(key, func(f []byte) []byte { f[offScopeLen]++; return f }),
		"signed_scope_x":  resign(key, func(f []byte) []byte { return append(f[:offScopeLen], 129) }),
		"signed_extra": resign(region, func(f []byte) []byte {
			return append(f, frame(key)[offLocation:]...) // a region hint with a location and scope
		}),
		"signed_missing": resign(key, func(f []byte) []byte { return f[:offLocation] }), // a key hint without them
	}
}

func hexPath(name string) string { return filepath.Join("testdata", name+".hex") }

func readHex(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(hexPath(name))
	require.NoError(t, err)
	b, err := hex.DecodeString(strings.TrimSpace(string(raw)))
	require.NoError(t, err, name)
	return b
}

func writeHex(t *testing.T, name string, b []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(hexPath(name), []byte(hex.EncodeToString(b)+"\n"), 0o644))
}

// TestGoldenVectors checks every line of testdata/expect.txt: the accepted
// vectors open to the messages above at t0 and are exactly what Seal
// writes for them; the refused ones fail with the expected category and
// reason and are still derived as derived() says. With -update it first
// rewrites the .hex files, then checks what it wrote.
func TestGoldenVectors(t *testing.T) {
	if *update {
		c := newCodec(t, secret, t0)
		for name, m := range goldens() {
			writeHex(t, name, seal(t, c, m))
		}
		for name, b := range derived(t) {
			writeHex(t, name, b)
		}
	}
	c := newCodec(t, secret, t0)
	want, refused := goldens(), derived(t)
	f, err := os.Open(filepath.Join("testdata", "expect.txt"))
	require.NoError(t, err)
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, "|")
		require.Len(t, parts, 3, line)
		name, expect, reason := parts[0], parts[1], parts[2]
		seen[name] = true
		b := readHex(t, name)
		got, err := c.Open(b)
		if expect == "OK" {
			require.NoError(t, err, name)
			m, ok := want[name]
			require.True(t, ok, "%s is not a golden message", name)
			assert.Equal(t, m, got, name)
			assert.Equal(t, b, seal(t, c, m), "%s: Seal still writes the golden bytes", name)
			assert.Equal(t, b, seal(t, c, got), "%s: the opened message re-seals byte for byte", name)
			assert.Equal(t, b, sign(secret, b[:len(b)-hint.TagBytes]), "%s: the tag is the documented construction", name)
			continue
		}
		var he *hint.Error
		require.ErrorAs(t, err, &he, name)
		assert.Equal(t, expect, he.Category.String(), "%s: %v", name, err)
		assert.Equal(t, reason, he.Reason, name)
		d, ok := refused[name]
		require.True(t, ok, "%s is not a derived vector", name)
		assert.Equal(t, d, b, "%s is still derived as derived() says", name)
	}
	require.NoError(t, sc.Err())
	for name := range want {
		assert.True(t, seen[name], "golden %s has no line in expect.txt", name)
	}
	for name := range refused {
		assert.True(t, seen[name], "vector %s has no line in expect.txt", name)
	}
}

// TestLayout builds keyMessage's frame by hand from the table in doc.go.
func TestLayout(t *testing.T) {
	m := keyMessage()
	var f []byte
	f = append(f, 0xC5, 'H', 'N', 'T', 1, 1)
	f = append(f, m.Sender[:]...)
	f = binary.BigEndian.AppendUint64(f, uint64(t0.UnixMilli()))
	f = append(f, byte(len(m.Region)))
	f = append(f, m.Region...)
	f = append(f, m.Location[:]...)
	f = append(f, byte(len(m.Scope)))
	f = append(f, m.Scope...)
	assert.Equal(t, sign(secret, f), seal(t, newCodec(t, secret, t0), m))
	assert.Len(t, seal(t, newCodec(t, secret, t0), largestMessage()), hint.MaxBytes)
	assert.Equal(t, 288, hint.MaxBytes)
	assert.Equal(t, 64, hint.MinBytes)
	assert.LessOrEqual(t, hint.MaxBytes, 512)
}

package render

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// goldenResult is the Result whose encoding testdata/result/*.hex holds.
func goldenResult() *Result {
	return &Result{Module: "renderer", ModuleSHA256: sha256.Sum256([]byte("renderer.wasm")), Template: "welcome", Version: 1,
		RequestedLocale: "de-AT", Locale: "de", Channel: Email, Now: testNow, Parts: []Part{
			{Name: "subject", ContentType: ctPlain, Body: []byte("Willkommen, Jörg")},
			{Name: "text", ContentType: ctPlain, Body: []byte("Hallo Jörg,\n\nIhr Konto A-1 ist bereit.\n")},
			{Name: "html", ContentType: ctHTML, Body: []byte("<p>Hallo J&ouml;rg &lt;b&gt;,</p>\n")},
		}}
}

// readHex reads a golden file of hex lines (whitespace ignored).
func readHex(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	raw, err := hex.DecodeString(strings.Join(strings.Fields(string(b)), ""))
	require.NoError(t, err)
	return raw
}

func writeHex(t *testing.T, path string, b []byte) {
	t.Helper()
	var sb strings.Builder
	for len(b) > 0 {
		n := min(32, len(b))
		sb.WriteString(hex.EncodeToString(b[:n]) + "\n")
		b = b[n:]
	}
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(sb.String()), 0o644))
}

func TestResultGoldenBytes(t *testing.T) {
	path := filepath.Join("testdata", "result", "welcome-de-email.hex")
	enc, err := goldenResult().MarshalBinary()
	require.NoError(t, err)
	if *update {
		writeHex(t, path, enc)
	}
	golden := readHex(t, path)
	assert.Equal(t, golden, enc, "encoding changed: a stored plan would no longer read back (bump the format version)")
	// Hand-checked landmarks: magic and version, the module name, and the
	// trailing digest over everything before it.
	assert.Equal(t, []byte("CNRR\x01\x08renderer\x20"), golden[:15])
	sum := sha256.Sum256(golden[:len(golden)-32])
	assert.Equal(t, sum[:], golden[len(golden)-32:])

	var got Result
	require.NoError(t, got.UnmarshalBinary(golden))
	assert.Equal(t, goldenResult(), &got)
	again, err := got.AppendBinary([]byte("prefix"))
	require.NoError(t, err)
	assert.Equal(t, golden, again[len("prefix"):], "decode then encode gives the same bytes")
}

func TestResultDecodeRefuses(t *testing.T) {
	golden := readHex(t, filepath.Join("testdata", "result", "welcome-de-email.hex"))
	reseal := func(b []byte) []byte {
		b = bytes.Clone(b[:len(b)-32])
		sum := sha256.Sum256(b)
		return append(b, sum[:]...)
	}
	flip := func(i int) []byte {
		b := bytes.Clone(golden)
		b[i] ^= 1
		return b
	}
	// replace swaps old for repl in the body and reseals the digest: a
	// well-formed encoding of a Result that breaks a rule.
	replace := func(old, repl string) []byte {
		body := golden[:len(golden)-32]
		i := bytes.Index(body, []byte(old))
		require.GreaterOrEqual(t, i, 0, old)
		require.Equal(t, len(old), len(repl))
		b := bytes.Clone(golden)
		copy(b[i:], repl)
		return reseal(b)
	}
	for name, b := range map[string][]byte{
		"empty":             nil,
		"wrong magic":       flip(0),
		"format version 2":  reseal(append([]byte("CNRR\x02"), golden[5:]...)),
		"digest mismatch":   flip(40),
		"truncated":         golden[:len(golden)-1],
		"trailing byte":     reseal(append(bytes.Clone(golden[:len(golden)-32]), 0, 0)),
		"CRLF in subject":   replace("Willkommen, Jörg", "Willkommen,\r\nJörg"[:len("Willkommen, Jörg")]),
		"bidi in body":      replace("Ihr Konto", "\u202eKonto "[:len("Ihr Konto")]),
		"unknown channel":   replace("\x05email", "\x05fax!!"),
		"template not id":   replace("\x07welcome", "\x07Welcome"),
		"part renamed":      replace("\x04html", "\x04body"),
		"locale not a tag":  replace("\x05de-AT", "\x05de_AT"),
		"oversize encoding": make([]byte, MaxEncodedBytes+1),
	} {
		var r Result
		err := r.UnmarshalBinary(b)
		assert.ErrorIs(t, err, ErrCorruptResult, name)
		assert.Equal(t, Result{}, r, "%s: r untouched", name)
	}
}

func TestResultEncodeRefusesWhatDecodeWould(t *testing.T) {
	for name, mut := range map[string]func(*Result){
		"no module":     func(r *Result) { r.Module = "" },
		"version 0":     func(r *Result) { r.Version = 0 },
		"bad locale":    func(r *Result) { r.Locale = "x" },
		"bad channel":   func(r *Result) { r.Channel = "fax" },
		"sub-ms now":    func(r *Result) { r.Now = r.Now.Add(1) },
		"negative now":  func(r *Result) { r.Now = testNow.AddDate(-100, 0, 0) },
		"CR in subject": func(r *Result) { r.Parts[0].Body = []byte("a\rb") },
		"missing part":  func(r *Result) { r.Parts = r.Parts[1:] },
		"oversize part": func(r *Result) { r.Parts[1].Body = bytes.Repeat([]byte("x"), HardMaxPartBytes+1) },
		"formula in csv": func(r *Result) {
			r.Channel = CSV
			r.Parts = []Part{{Name: "csv", ContentType: ctCSV, Body: []byte("=1\n")}}
		},
	} {
		r := goldenResult()
		mut(r)
		_, err := r.MarshalBinary()
		assert.Error(t, err, name)
	}
}

// TestFrozenResultSurvivesHotSwap: a stored Result re-sends the same bytes
// after its module is swapped for one that renders the template
// differently, and a new render records the new module's digest.
func TestFrozenResultSurvivesHotSwap(t *testing.T) {
	r, mgr := newRenderer(t, Options{})
	ctx := context.Background()
	first, err := r.Render(ctx, welcome("de", Text))
	require.NoError(t, err)
	stored, err := first.MarshalBinary()
	require.NoError(t, err)

	_, err = mgr.Swap(ctx, "renderer", th.Wasm("altrenderer"))
	require.NoError(t, err)
	second, err := r.Render(ctx, welcome("de", Text))
	require.NoError(t, err)
	assert.Equal(t, "Hallo Ada, Konto A-1 ist aktiv.\n", string(second.Parts[0].Body))
	assert.Equal(t, sha256.Sum256(th.Wasm("altrenderer")), second.ModuleSHA256)

	var replay Result
	require.NoError(t, replay.UnmarshalBinary(stored))
	assert.Equal(t, first, &replay)
	assert.Equal(t, "Hallo Ada,\n\nIhr Konto A-1 ist bereit.\n\nGesendet am 29.11.2026\n", string(replay.Parts[0].Body))
	assert.Equal(t, sha256.Sum256(th.Wasm("renderer")), replay.ModuleSHA256)
}

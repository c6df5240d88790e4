package extism

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

// asModulePath is where `make guests` writes the AssemblyScript reference
// guest (guests/rate-policy-as), with the native twin's vectors bundled.
// Building it needs npm and node_modules, which `go test` does not run, so
// the tests read the built file and fail (never skip) without it.
var asModulePath = filepath.Join("..", "..", "build", "guests", "rate-policy-as.wasm")

// asWasm returns the built AssemblyScript guest.
func asWasm(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(asModulePath)
	if errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s is missing: run `make guests` (it builds the AssemblyScript guest with npm ci and asc; needs Node.js 20+ and npm)", asModulePath)
	}
	require.NoError(t, err)
	return b
}

func loadAS(t testing.TB, e *Engine, lim plugins.Limits) *Module {
	t.Helper()
	lim.Grants = plugins.AllGrants // it imports caphost_log and caphost_count
	m, err := e.Load(context.Background(), "rate-policy-as", asWasm(t), lim)
	require.NoError(t, err)
	return m
}

// rawRequests are requests the host's encoder never produces, one per way
// abi.Decoder refuses a RateSelectRequest (in the order it checks), plus
// well-formed ones on the edges the guests must classify alike.
func rawRequests() map[string][]byte {
	str := func(s string) []byte { return abi.AppendString(nil, s) }
	// head is a valid request up to and including the attrs count.
	head := func(method string, attrs int) []byte {
		b := []byte{byte(abi.TagRateSelectRequest)}
		for _, s := range []string{"/orders/42", method, "", "pro", "public"} {
			b = append(b, str(s)...)
		}
		return abi.AppendUvarint(b, uint64(attrs))
	}
	withMethod := func(raw []byte) []byte {
		b := append([]byte{byte(abi.TagRateSelectRequest)}, str("/x")...)
		b = append(b, raw...)
		for range 3 {
			b = append(b, 0)
		}
		return append(b, 0)
	}
	attr := func(name, value string) []byte { return append(str(name), str(value)...) }
	long := func(n int) string { return string(bytes.Repeat([]byte("a"), n)) }
	return map[string][]byte{
		"empty":                    {},
		"wrong tag":                {byte(abi.TagRenderRequest), 0},
		"tag only":                 {byte(abi.TagRateSelectRequest)},
		"truncated varint":         {byte(abi.TagRateSelectRequest), 0x80},
		"non-minimal varint":       {byte(abi.TagRateSelectRequest), 0x80, 0x00},
		"11-byte varint":           append([]byte{byte(abi.TagRateSelectRequest)}, bytes.Repeat([]byte{0xff}, 11)...),
		"10th varint byte over 1":  append(append([]byte{byte(abi.TagRateSelectRequest)}, bytes.Repeat([]byte{0xff}, 9)...), 0x02),
		"2^64-1 route length":      append(append([]byte{byte(abi.TagRateSelectRequest)}, bytes.Repeat([]byte{0xff}, 9)...), 0x01),
		"route over 1024 bytes":    append([]byte{byte(abi.TagRateSelectRequest)}, str(long(1025))...),
		"route of 1024 bytes":      append(append([]byte{byte(abi.TagRateSelectRequest)}, str(long(1024))...), append(str("GET"), 0, 0, 0, 0)...),
		"truncated route":          {byte(abi.TagRateSelectRequest), 5, '/', 'x'},
		"method over 128 bytes":    withMethod(str(long(129))),
		"overlong NUL":             withMethod([]byte{2, 0xc0, 0x80}),
		"surrogate":                withMethod([]byte{3, 0xed, 0xa0, 0x80}),
		"above U+10FFFF":           withMethod([]byte{4, 0xf4, 0x90, 0x80, 0x80}),
		"lone continuation":        withMethod([]byte{1, 0x80}),
		"truncated rune":           withMethod([]byte{2, 0xe2, 0x82}),
		"valid non-ASCII method":   withMethod(str("GÉT")),
		"long s: poſt is POST":     withMethod(str("poſt")),
		"long s: OPTIONſ":          withMethod(str("OPTIONſ")),
		"Kelvin sign is no method": withMethod(str("PATCH\u212a")),
		"65 attrs":                 head("GET", 65),
		"count beyond the input":   head("GET", 3),
		"attr name over 128":       append(head("GET", 1), attr(long(129), "v")...),
		"attr value over 1024":     append(head("GET", 1), attr("n", long(1025))...),
		"attr value not UTF-8":     append(head("GET", 1), append(str("n"), 1, 0xff)...),
		"64 attrs":                 append(head("GET", 64), bytes.Repeat(attr("n", "v"), 64)...),
		"trailing bytes":           append(head("GET", 0), 0),
		"unknown method":           head("BREW", 0),
	}
}

// TestASRefusesMalformedLikeGo: every malformed request gets the same
// invalid-request frame, byte for byte, from the AssemblyScript guest's
// hand-written decoder as from both Go twins (abi.Decoder's text), and the
// edge cases that are well formed get the same answer.
func TestASRefusesMalformedLikeGo(t *testing.T) {
	ctx := context.Background()
	as := loadAS(t, newExtism(t, plugins.Config{}), generous)
	goExt := loadExt(t, newExtism(t, plugins.Config{}), "rate-policy-extism", generous)
	native := loadNative(t, newNative(t, plugins.Config{}), "rate-policy", generous)
	for name, in := range rawRequests() {
		want, err := native.Call(ctx, abi.ExportRateSelect, in, nil)
		require.NoError(t, err, name)
		got, err := as.Call(ctx, abi.ExportRateSelect, in, nil)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, "%s: native %q, as %q", name, want, got)
		ext, err := goExt.Call(ctx, abi.ExportRateSelect, in, nil)
		require.NoError(t, err, name)
		assert.Equal(t, want, ext, name)
	}

	// The texts themselves, independently of the Go decoder.
	detail := func(name string) string {
		out, err := as.Call(ctx, abi.ExportRateSelect, rawRequests()[name], nil)
		require.NoError(t, err)
		_, err = abi.ParseFrame(out)
		var se *abi.StatusError
		require.ErrorAs(t, err, &se, name)
		require.Equal(t, abi.CodeInvalidRequest, se.Code, name)
		return se.Detail
	}
	for name, want := range map[string]string{
		"empty":                  "abi: malformed message: field tag at byte 0: truncated",
		"wrong tag":              "abi: malformed message: field tag at byte 0: message tag 11, want 9",
		"non-minimal varint":     "abi: malformed message: field route at byte 1: non-minimal varint",
		"11-byte varint":         "abi: malformed message: field route at byte 1: bad varint",
		"2^64-1 route length":    "abi: malformed message: field route at byte 11: length 18446744073709551615 exceeds bound 1024",
		"truncated route":        "abi: malformed message: field route at byte 2: truncated",
		"surrogate":              "abi: malformed message: field method at byte 8: not UTF-8",
		"65 attrs":               "abi: malformed message: field attrs at byte 29: 65 items exceed bound 64",
		"count beyond the input": "abi: malformed message: field attrs at byte 29: count exceeds remaining input",
		"trailing bytes":         "abi: malformed message: field message at byte 29: trailing bytes",
		"unknown method":         "unknown method",
	} {
		assert.Equal(t, want, detail(name), name)
	}
	sels, err := plugins.RateSelect(ctx, as, &abi.RateSelectRequest{Route: "/x", Method: "poſt", APIKeyPlan: "pro"})
	require.NoError(t, err)
	assert.Equal(t, "pro.write", sels.Selections[0].PolicyID, "Go's EqualFold folds ſ to S; so must the AS guest")
}

// FuzzASRateSelect: on any input the AssemblyScript guest answers exactly
// what the Go-Extism twin answers (abi's decoder and tiers' selection), and
// it never fails as a guest.
func FuzzASRateSelect(f *testing.F) {
	for _, in := range rawRequests() {
		f.Add(in)
	}
	f.Add((&abi.RateSelectRequest{Route: "/search/items", Method: "get", PrincipalTier: "enterprise",
		Attrs: []abi.Attr{{Name: "region", Value: "eu"}}}).AppendTo(nil))
	as := loadAS(f, newExtism(f, plugins.Config{}), generous)
	goExt := loadExt(f, newExtism(f, plugins.Config{}), "rate-policy-extism", generous)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, in []byte) {
		want, err := goExt.Call(ctx, abi.ExportRateSelect, in, nil)
		require.NoError(t, err)
		got, err := as.Call(ctx, abi.ExportRateSelect, in, nil)
		require.NoError(t, err)
		require.Equal(t, want, got)
	})
}

// TestASDescribeAndHostFunctions: the describe frame is the Go-Extism
// twin's byte for byte (so the declarations are the same), describe logs
// through caphost_log and a refused request is counted through
// caphost_count, as the Go twin does.
func TestASDescribeAndHostFunctions(t *testing.T) {
	ctx := context.Background()
	o := newObserved(t, "rate-policy.invalid-request")
	as := loadAS(t, o.e, generous)
	goExt := loadExt(t, newExtism(t, plugins.Config{}), "rate-policy-extism", generous)
	want, err := goExt.Call(ctx, abi.ExportDescribe, nil, nil)
	require.NoError(t, err)
	got, err := as.Call(ctx, abi.ExportDescribe, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))
	assert.Equal(t, goExt.Description(), as.Description())
	assert.Contains(t, o.log(), `guest_msg="rate-policy-as described"`)

	_, err = as.RateSelect(ctx, &abi.RateSelectRequest{Route: "/x", Method: "BREW"})
	require.ErrorIs(t, err, abi.CodeInvalidRequest)
	assert.Equal(t, []string{"rate-policy.invalid-request"}, o.obs.got())

	// Only the exports of its declared kind exist.
	_, err = as.Call(ctx, abi.ExportRender, nil, nil)
	requireClass(t, err, plugins.ClassNotDeclared)
}

// TestASLargeRequest: a request at the host's 1 MiB input cap (a route and
// attributes at their bounds, then padding the decoder refuses) is read
// whole and refused with the Go decoder's text, twice on one instance, so
// the input buffer grows and is reused.
func TestASLargeRequest(t *testing.T) {
	ctx := context.Background()
	as := loadAS(t, newExtism(t, plugins.Config{}), plugins.Limits{MaxInputBytes: abi.MaxMessageBytes, PoolSize: 1, CallTimeout: generous.CallTimeout})
	goExt := loadExt(t, newExtism(t, plugins.Config{}), "rate-policy-extism", plugins.Limits{MaxInputBytes: abi.MaxMessageBytes, CallTimeout: generous.CallTimeout})
	req := &abi.RateSelectRequest{Route: string(bytes.Repeat([]byte("r"), abi.MaxValueBytes)), Method: "GET"}
	for range abi.MaxListItems {
		req.Attrs = append(req.Attrs, abi.Attr{Name: string(bytes.Repeat([]byte("n"), abi.MaxNameBytes)), Value: string(bytes.Repeat([]byte("v"), abi.MaxValueBytes))})
	}
	valid := req.AppendTo(nil)
	in := append(valid, make([]byte, abi.MaxMessageBytes-len(valid))...)
	want, err := goExt.Call(ctx, abi.ExportRateSelect, in, nil)
	require.NoError(t, err)
	for range 2 {
		got, err := as.Call(ctx, abi.ExportRateSelect, in, nil)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
		got, err = as.Call(ctx, abi.ExportRateSelect, valid, nil)
		require.NoError(t, err)
		sel, err := goExt.Call(ctx, abi.ExportRateSelect, valid, nil)
		require.NoError(t, err)
		require.Equal(t, sel, got)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
	"github.com/caphost/caphost/plugins"
	"github.com/caphost/caphost/third_party/wazero"
	"github.com/caphost/caphost/third_party/wazero/api"
	"github.com/caphost/caphost/third_party/wazero/imports/wasi_snapshot_preview1"
)

// This guest against its AssemblyScript twin (guests/codec-as), which must
// answer every request byte for byte alike: both modules as `make guests`
// builds them, loaded in the host's native engine (plugins), get the same
// raw requests and must answer the same frames (or fail with the same
// class). The SDK's Dispatcher over Module, run natively, answers too, so
// a module built from older source than this tree's fails here rather than
// hiding a difference.

var (
	twinInputs = flag.Int("codec.twins", 2_000, "generated inputs TestTwinDifferentialWhole sends (with their mutations; TestTwinDifferential a tenth)")
	twinSeed   = flag.Uint64("codec.twinseed", 1, "seed of TestTwinDifferential's generator")
)

// twinPath is where `make guests` writes a module.
func twinPath(name string) string {
	return filepath.Join("..", "..", "build", "guests", name+".wasm")
}

// readTwin reads a built module; a missing one fails the test.
func readTwin(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(twinPath(name))
	if err != nil {
		tb.Fatalf("%s: %v (run `make guests` first)", twinPath(name), err)
	}
	return b
}

// twins are the two modules, loaded once per test process (a fuzz worker
// loads its own), and the native reference.
type twins struct {
	goGuest, asGuest *plugins.Module
	native           *guest.Dispatcher
}

var (
	twinsOnce sync.Once
	twinsVal  *twins
	twinsErr  error
)

func loadTwins(tb testing.TB) *twins {
	tb.Helper()
	goWasm, asWasm := readTwin(tb, "codec"), readTwin(tb, "codec-as")
	twinsOnce.Do(func() {
		ctx := context.Background()
		e, err := plugins.NewEngine(plugins.Config{})
		if err != nil {
			twinsErr = err
			return
		}
		// Requests and answers up to the ABI's bounds, and time for the Go
		// guest's largest ones: a difference must never be a limit's.
		lim := plugins.Limits{PoolSize: 1, MaxInputBytes: abi.MaxMessageBytes, MaxOutputBytes: abi.MaxMessageBytes,
			CallTimeout: 10 * time.Second, MemoryPages: 1024}
		tw := &twins{}
		if tw.goGuest, err = e.Load(ctx, "codec", goWasm, lim); err != nil {
			twinsErr = fmt.Errorf("load codec: %w", err)
			return
		}
		if tw.asGuest, err = e.Load(ctx, "codec-as", asWasm, lim); err != nil {
			twinsErr = fmt.Errorf("load codec-as: %w", err)
			return
		}
		if tw.native, err = guest.NewDispatcher(Module()); err != nil {
			twinsErr = err
			return
		}
		twinsVal = tw
	})
	if twinsErr != nil {
		tb.Fatal(twinsErr)
	}
	return twinsVal
}

// classOf is a call's failure class, "" for an answer.
func classOf(err error) plugins.Class {
	var ge *plugins.GuestError
	if errors.As(err, &ge) {
		return ge.Class
	}
	if err != nil {
		return "not a GuestError: " + plugins.Class(err.Error())
	}
	return ""
}

// frameText shows a frame for a failure message.
func frameText(f []byte) string {
	if len(f) == 0 {
		return "(none)"
	}
	body, err := abi.ParseFrame(f)
	if err != nil {
		return err.Error()
	}
	if len(body) > 300 {
		return fmt.Sprintf("ok %q... (%d bytes)", body[:300], len(body))
	}
	return fmt.Sprintf("ok %q", body)
}

func shorten(b []byte) string {
	if len(b) > 400 {
		return fmt.Sprintf("%q... (%d bytes)", b[:400], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// differ sends req to export e of both modules and the native reference,
// and says how the answers differ, or "".
func (tw *twins) differ(e abi.Export, req []byte) string {
	_, d := tw.compare(e, req)
	return d
}

// compare is differ that also returns the frame both modules answered (nil
// when both failed alike).
func (tw *twins) compare(e abi.Export, req []byte) ([]byte, string) {
	ctx := context.Background()
	goFrame, goErr := tw.goGuest.Call(ctx, e, req, nil)
	asFrame, asErr := tw.asGuest.Call(ctx, e, req, nil)
	if classOf(goErr) != classOf(asErr) {
		return nil, fmt.Sprintf("%s of %s:\n go %v\n as %v", e.Name(), shorten(req), goErr, asErr)
	}
	if goErr != nil {
		return nil, ""
	}
	if !bytes.Equal(goFrame, asFrame) {
		return nil, fmt.Sprintf("%s of %s:\n go %s\n as %s", e.Name(), shorten(req), frameText(goFrame), frameText(asFrame))
	}
	if len(req) <= abi.MaxMessageBytes {
		if native := tw.native.Handle(e, req, nil); !bytes.Equal(native, goFrame) {
			return nil, fmt.Sprintf("%s of %s: build/guests/codec.wasm is not this tree's guest (run `make guests`):\n wasm   %s\n native %s",
				e.Name(), shorten(req), frameText(goFrame), frameText(native))
		}
	}
	return asFrame, ""
}

// twinCall is one codec call a payload is sent as: encode (version 0,
// encode true) or decode at version.
type twinCall struct {
	schema  string
	encode  bool
	version uint32
}

// twinCalls: every declared schema's encode and its decode at every stored
// version, declared or not (0, one past the write version, the largest
// u32), and unknown schemas (a case variant and the empty name among them).
func twinCalls() []twinCall {
	var out []twinCall
	for _, c := range Module().Codecs {
		id := c.Decl.SchemaID
		out = append(out, twinCall{schema: id, encode: true})
		for v := range c.Decl.WriteVersion + 2 {
			out = append(out, twinCall{schema: id, version: v})
		}
		out = append(out, twinCall{schema: id, version: 1<<32 - 1})
	}
	for _, s := range []string{"nope", "Product", "", "product "} {
		out = append(out, twinCall{schema: s, encode: true}, twinCall{schema: s, version: 1})
	}
	return out
}

// request is c's request for payload.
func (c twinCall) request(payload []byte) (abi.Export, []byte) {
	if c.encode {
		return abi.ExportCodecEncode, (&abi.CodecEncodeRequest{Schema: c.schema, Value: payload}).AppendTo(nil)
	}
	return abi.ExportCodecDecode, (&abi.CodecDecodeRequest{Schema: c.schema, StoredVersion: c.version, Payload: payload}).AppendTo(nil)
}

// hostile are payloads the generator of differential_test.go does not
// make, or not often: deep nesting, huge arrays and strings, numbers at and
// beyond every bound, white space and escapes everywhere, and every payload
// of the self-test vectors cut at every byte.
func hostile(tb testing.TB) [][]byte {
	var out [][]byte
	add := func(s string) { out = append(out, []byte(s)) }
	for _, depth := range []int{1, 2, 64, 10_000, 200_000} {
		add(strings.Repeat("[", depth))
		add(`{"tags":` + strings.Repeat("[", depth))
		add(`{"id":"a","name":"b","price_cents":1,"currency":"USD","tags":` + strings.Repeat(`[`, depth) + strings.Repeat(`]`, depth) + `}`)
		add(strings.Repeat(`{"a":`, depth))
	}
	tags := func(n int, s string) string {
		t := make([]string, n)
		for i := range t {
			t[i] = strconv.Quote(s + strconv.Itoa(i))
		}
		return "[" + strings.Join(t, ",") + "]"
	}
	for _, n := range []int{0, 1, 15, 16, 17, 100, 101, 10_000, 60_000} {
		add(`{"id":"a","name":"b","price_cents":1,"currency":"USD","tags":` + tags(n, "t") + `}`)
		add(`{"query":"q","page":1,"ids":` + tags(n, "id-") + `}`)
		add(`{"query":"q","page":1,"ids":` + tags(n, strings.Repeat("x", 60)) + `}`)
	}
	for _, n := range []int{0, 1, 63, 64, 65, 255, 256, 257, 100_000, abi.MaxPayloadBytes - 100} {
		s := strings.Repeat("q", n)
		add(`{"query":"` + s + `","page":1,"ids":[]}`)
		add(`{"id":"` + s + `","name":"n","price_cents":1,"currency":"USD"}`)
		add(`{"id":"u","name":"` + s + `","email":"e","locale":"de"}`)
		add(`{"query":"q","page":1,"ids":["` + s + `"]}`)
	}
	add(`{"query":"q","page":1,"ids":["` + strings.Repeat(`\u00e9<>&\n`, 20_000) + `"]}`)
	add(`{"id":"` + strings.Repeat(`\ud83d\ude00`, 30_000) + `","name":"n","price_cents":1,"currency":"USD"}`)
	add(strings.Repeat(" ", 500_000) + `{"query":"q","page":1,"ids":[]}` + strings.Repeat("\n", 500_000))
	for _, num := range []string{"0", "-0", "1", "-1", "9999", "10000", "99999999999999", "100000000000000",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"18446744073709551616", "1.0", "1e0", "1E+2", "0.5e-3", "-", "01", "00", "-01", "1.", ".1", "1e", "1e+",
		"123456789012345678901234567890", "1" + strings.Repeat("0", 400), "+1", "0x10", "NaN", "Infinity"} {
		add(`{"query":"q","page":` + num + `,"ids":[]}`)
		add(`{"id":"a","name":"b","price_cents":` + num + `,"currency":"USD"}`)
		add(`{"id":"a","name":"b","price_cents":` + num)
	}
	for _, price := range []string{"0", "0.0", "0.29", "1.5", "1.50", "1.505", "999999999999.99", "1000000000000",
		"", ".", "1.", ".5", "-1", "+1", "1e3", "١", "0.2٩", "12.3.4", "1,5", " 1", "1 "} {
		add(`{"id":"a","name":"b","price":"` + price + `","currency":"EUR"}`)
	}
	for _, cur := range []string{"USD", "usd", "US", "USDX", "ÜSD", "U\u0000D", "\u0055SD", "US\u0044"} {
		add(`{"id":"a","name":"b","price_cents":1,"currency":"` + cur + `"}`)
	}
	// White space and escapes around and inside every token.
	for _, ws := range []string{" ", "\t", "\n", "\r", "\u00a0", "\x0b", "\x0c"} {
		add(ws + `{` + ws + `"query"` + ws + `:` + ws + `"q"` + ws + `,` + ws + `"page"` + ws + `:` + ws + `1` + ws + `,` + ws + `"ids"` + ws + `:` + ws + `[` + ws + `"a"` + ws + `]` + ws + `}` + ws)
	}
	for _, s := range []string{`\u0071uery`, `QUERY`, `Query`, `query\u0000`, `qu\u0065ry`, `\"query`, `query\/`} {
		add(`{"` + s + `":"q","page":1,"ids":[]}`)
	}
	// Every rune class in a member name and in a value.
	for _, s := range []string{"\u2028", "\u2029", "<", ">", "&", "é", "a\u2028b", "\u0085", "\u00ad", "\u200b", "\ufeff", "\U0001F600", "\U000E0001", "\u0378", "\x7f", "\u061c",
		`\u0000`, `\u001f`, `\u007f`, `\u0085`, `\u2028`, `\ud7ff`, `\ue000`, `\uffff`, `\udbff\udfff`, `\ud800\udc00`,
		`\ud800`, `\udc00`, `\ud800\ud800`, `\udc00\ud800`, `\ud800\u0041`, `\ud800x`, `\ud800\`, `\ud800\u`, `\ud800\ud`} {
		add(`{"` + s + `":1}`)
		add(`{"` + strings.Repeat(s, 40) + `":1}`)
		add(`{"query":"` + s + `","page":1,"ids":["` + s + `"]}`)
		add(`{"id":"` + s + `","name":"` + s + `","price_cents":1,"currency":"USD","tags":["` + s + `"]}`)
	}
	// Bytes that are not UTF-8, alone and cut short, in names, values and
	// between tokens.
	for _, b := range []string{"\x80", "\xbf", "\xc0\x80", "\xc1\xbf", "\xc2", "\xe0\x80\x80", "\xe0\xa0", "\xed\xa0\x80",
		"\xed\x9f\xbf", "\xef\xbf\xbf", "\xf0\x8f\xbf\xbf", "\xf0\x90\x80", "\xf4\x90\x80\x80", "\xf4\x8f\xbf\xbf", "\xf5", "\xff"} {
		add(`{"` + b + `":1}`)
		add(`{"query":"` + b + `","page":1,"ids":[]}`)
		add(`{"query":"q` + b)
		add(`{"query":"q",` + b + `"page":1,"ids":[]}`)
		add(b)
	}
	// The vectors' payloads, and a canonical 1 KiB product, cut at every byte.
	f := readSelfTestPayloads()
	f = append(f, product1K(tb))
	for _, p := range f {
		for i := range len(p) {
			out = append(out, p[:i])
		}
	}
	return out
}

// readSelfTestPayloads are the values and payloads of selftest.json's
// requests.
func readSelfTestPayloads() [][]byte {
	var out [][]byte
	raw, err := os.ReadFile("selftest.json")
	if err != nil {
		return nil
	}
	// Cheap and sufficient: every "value" or "payload" string member.
	for _, key := range []string{`"value":`, `"payload":`} {
		for rest := string(raw); ; {
			i := strings.Index(rest, key)
			if i < 0 {
				break
			}
			rest = rest[i+len(key):]
			rest = strings.TrimLeft(rest, " ")
			if s, err := strconv.QuotedPrefix(rest); err == nil {
				if u, err := strconv.Unquote(s); err == nil {
					out = append(out, []byte(u))
				}
			}
		}
	}
	return out
}

// malformedRequests are requests the ABI decoder must refuse (or barely
// accept), built from valid ones: cut at every byte, each byte replaced,
// every bound met and exceeded, non-minimal and overlong varints, a
// message of the other export, trailing bytes.
func malformedRequests() [][]byte {
	var out [][]byte
	payload := []byte(`{"query":"q","page":1,"ids":[]}`)
	valid := [][]byte{
		(&abi.CodecEncodeRequest{Schema: "search-page", Value: payload}).AppendTo(nil),
		(&abi.CodecDecodeRequest{Schema: "search-page", StoredVersion: 1, Payload: payload}).AppendTo(nil),
		(&abi.CodecDecodeRequest{Schema: "product", StoredVersion: 300, Payload: nil}).AppendTo(nil),
	}
	for _, v := range valid {
		for i := range len(v) + 1 {
			out = append(out, v[:i], append(append([]byte(nil), v...), v[:i]...))
		}
		for i := range len(v) {
			for _, c := range []byte{0x00, 0x01, 0x02, 0x03, 0x04, 0x7f, 0x80, 0x81, 0xc0, 0xff} {
				m := append([]byte(nil), v...)
				m[i] = c
				out = append(out, m)
			}
		}
	}
	uv := func(v uint64) []byte { return abi.AppendUvarint(nil, v) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	schema := cat(uv(7), []byte("product"))
	for _, tag := range []byte{1, 3} {
		t := []byte{tag}
		out = append(out,
			cat(t, uv(128), bytes.Repeat([]byte("a"), 128), uv(0)),
			cat(t, uv(129), bytes.Repeat([]byte("a"), 129), uv(0)),
			cat(t, uv(1<<40), []byte("a")),
			cat(t, []byte{0x87, 0x00}, []byte("product"), uv(0), uv(0)),
			cat(t, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02}),
			cat(t, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00}),
			cat(t, []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}),
			cat(t, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00}),
			cat(t, uv(3), []byte("a\xffb"), uv(0)),
			cat(t, uv(3), []byte("\xed\xa0\x80"), uv(0)),
			cat(t, schema, uv(1<<32), uv(0)),
			cat(t, schema, uv(1<<32-1), uv(0)),
			cat(t, schema, uv(1<<33), uv(0)),
			cat(t, schema, uv(2), uv(abi.MaxPayloadBytes+1)),
			cat(t, schema, uv(2), uv(abi.MaxPayloadBytes)),
			cat(t, schema, uv(abi.MaxPayloadBytes+1)),
			cat(t, schema, uv(2), []byte{0x80, 0x00}),
			cat(t, schema, []byte{0x82, 0x00}, uv(0)),
			cat(t, schema, uv(2), uv(2), []byte("{}")),
			cat(t, schema, uv(2), uv(2), []byte("{}"), []byte{0}),
			cat(t, schema, uv(2), uv(5), []byte("{}")),
			cat(t, schema, uv(0), uv(0)),
		)
	}
	out = append(out, nil, []byte{}, []byte{0}, []byte{2}, []byte{4}, []byte{0xff},
		cat([]byte{1}, uv(abi.MaxNameBytes+1)),
		cat([]byte{1}, schema, uv(abi.MaxPayloadBytes), bytes.Repeat([]byte(" "), abi.MaxPayloadBytes)),
		cat([]byte{1}, schema, uv(abi.MaxPayloadBytes), bytes.Repeat([]byte(" "), abi.MaxPayloadBytes), []byte("x")),
	)
	return out
}

// TestTwinDifferential sends a tenth of the generated corpus (the race
// detector slows the twins' Wasm calls about fivefold);
// TestTwinDifferentialWhole, built only without it, sends all of it.
func TestTwinDifferential(t *testing.T) { twinDifferential(t, *twinInputs/10) }

// twinDifferential sends every payload of the corpus (n generated inputs
// with their mutations) as every codec call, and malformed requests to
// both exports, to both modules.
func twinDifferential(t *testing.T, n int) {
	tw := loadTwins(t)
	g := &gen{r: rand.New(rand.NewPCG(*twinSeed, 7))}
	var payloads [][]byte
	for _, in := range corpus(t) {
		payloads = append(payloads, g.mutations(in)...)
	}
	for range n {
		payloads = append(payloads, g.mutations(g.input())...)
		payloads = append(payloads, g.canonical()) // mostly answered: valid values, written or not
	}
	payloads = append(payloads, hostile(t)...)

	calls := twinCalls()
	requests, byStatus := 0, map[string]int{}
	for _, p := range payloads {
		for _, c := range calls {
			e, req := c.request(p)
			requests++
			f, d := tw.compare(e, req)
			if d != "" {
				t.Fatal(d)
			}
			// Tally what was compared (the AS answer equals the Go one).
			if f != nil {
				if _, err := abi.ParseFrame(f); err != nil {
					var se *abi.StatusError
					if errors.As(err, &se) {
						byStatus[se.Code.String()]++
					}
				} else {
					byStatus["ok"]++
				}
			}
		}
	}
	raw := malformedRequests()
	for _, req := range raw {
		for _, e := range []abi.Export{abi.ExportCodecEncode, abi.ExportCodecDecode} {
			requests++
			if d := tw.differ(e, req); d != "" {
				t.Fatal(d)
			}
		}
	}
	t.Logf("%d payloads × %d calls and %d malformed requests × 2 exports: %d requests compared, answers by status %v",
		len(payloads), len(calls), len(raw), requests, byStatus)
	assert.Greater(t, byStatus["ok"], n, "the corpus must reach the schemas' answers, not only refusals")
	assert.Greater(t, byStatus["corrupt"], 10*n)
	assert.Greater(t, byStatus["invalid-request"], 10*n)
}

// TestTwinQuotesEveryRune: an unknown member's name is quoted in the
// detail (%.32q), escaped where strconv.IsPrint says a rune is not
// printable; the twin carries Go's table, checked here for every rune.
func TestTwinQuotesEveryRune(t *testing.T) {
	tw := loadTwins(t)
	const perName = 16 // \UXXXXXXXX each: the detail stays below 256 bytes
	var name strings.Builder
	flush := func() {
		if name.Len() == 0 {
			return
		}
		for _, c := range []twinCall{{schema: "product", encode: true}, {schema: "search-page", version: 1}} {
			e, req := c.request([]byte(`{"` + name.String() + `":1}`))
			if d := tw.differ(e, req); d != "" {
				t.Fatal(d)
			}
		}
		name.Reset()
	}
	count := 0
	for r := rune(0); r <= utf8.MaxRune; r++ {
		switch {
		case r >= 0xd800 && r < 0xe000:
			continue // not a rune UTF-8 may carry
		case r == '"' || r == '\\':
			name.WriteString(`\` + string(r))
		case r < 0x20:
			fmt.Fprintf(&name, `\u%04x`, r)
		default:
			name.WriteRune(r)
		}
		count++
		if count%perName == 0 {
			flush()
		}
	}
	flush()
	t.Logf("%d runes quoted alike", count)
}

// FuzzCodecTwins: any payload as any schema's encode and decode (sel picks
// the schema, an unknown one included; version is the stored version), or,
// with sel's top bit, any bytes as the request of either export.
func FuzzCodecTwins(f *testing.F) {
	for i, in := range corpus(f) {
		f.Add(uint8(i), uint32(i%4), in)
	}
	for i, req := range malformedRequests()[:200] {
		f.Add(uint8(0x80|i), uint32(0), req)
	}
	f.Add(uint8(1), uint32(2), product1K(f))
	schemas := []string{"user-profile", "product", "search-page", "nope"}
	f.Fuzz(func(t *testing.T, sel uint8, version uint32, payload []byte) {
		tw := loadTwins(t)
		if sel&0x80 != 0 {
			e := abi.ExportCodecEncode
			if sel&1 != 0 {
				e = abi.ExportCodecDecode
			}
			if d := tw.differ(e, payload); d != "" {
				t.Fatal(d)
			}
			return
		}
		schema := schemas[int(sel)%len(schemas)]
		for _, c := range []twinCall{{schema: schema, encode: true}, {schema: schema, version: version}} {
			e, req := c.request(payload)
			if d := tw.differ(e, req); d != "" {
				t.Fatal(d)
			}
		}
	})
}

// rawInstance is a module instantiated on a bare wazero runtime and called
// as the host calls it (abi/ABI.md §3), so a test reaches what the engine
// never sends: a request outside the caphost_alloc region, the exports of
// kinds the module does not declare, and its memory's size.
type rawInstance struct {
	mod    api.Module
	alloc  api.Function
	region uint32
	size   uint32
}

func newRawInstance(t *testing.T, wasm []byte) *rawInstance {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	t.Cleanup(func() { _ = rt.Close(ctx) })
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	mod, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithStartFunctions().WithName(""))
	require.NoError(t, err)
	if init := mod.ExportedFunction("_initialize"); init != nil {
		_, err := init.Call(ctx)
		require.NoError(t, err)
	}
	return &rawInstance{mod: mod, alloc: mod.ExportedFunction("caphost_alloc")}
}

// call sends req to export name as the host does: a region of at least
// 4 KiB, asked for again only for a larger request.
func (r *rawInstance) call(t *testing.T, name string, req []byte) []byte {
	t.Helper()
	if n := uint32(len(req)); n > r.size {
		want := max(n, 4096)
		res, err := r.alloc.Call(context.Background(), uint64(want))
		require.NoError(t, err)
		r.region, r.size = uint32(res[0]), want
	}
	require.True(t, r.mod.Memory().Write(r.region, req))
	return r.callAt(t, name, r.region, uint32(len(req)))
}

// callAt calls export name with (ptr, n) and returns a copy of the frame.
func (r *rawInstance) callAt(t *testing.T, name string, ptr, n uint32) []byte {
	t.Helper()
	res, err := r.mod.ExportedFunction(name).Call(context.Background(), uint64(ptr), uint64(n))
	require.NoError(t, err, name)
	frame, ok := r.mod.Memory().Read(uint32(res[0]>>32), uint32(res[0]))
	require.True(t, ok)
	return bytes.Clone(frame)
}

// pages is the size of linear memory in 64 KiB pages.
func (r *rawInstance) pages() uint32 { return r.mod.Memory().Size() / 65536 }

// TestTwinGlue: what the SDK's glue answers outside the engine's path —
// requests outside the region, the exports of undeclared kinds (with good
// and malformed requests), describe — the twin answers alike.
func TestTwinGlue(t *testing.T) {
	goInst, asInst := newRawInstance(t, readTwin(t, "codec")), newRawInstance(t, readTwin(t, "codec-as"))
	same := func(name string, req []byte) {
		t.Helper()
		want, got := goInst.call(t, name, req), asInst.call(t, name, req)
		require.Equal(t, want, got, "%s of %q: go %s, as %s", name, req, frameText(want), frameText(got))
	}
	canon := (&abi.CanonicalizeRequest{Region: "products", Attrs: []abi.Attr{{Name: "key", Value: "SKU-1"}}}).AppendTo(nil)
	admit := (&abi.AdmitRequest{Region: "products", SizeBytes: 10, Class: "c", CostHintUS: 1, LoadLatency: 2}).AppendTo(nil)
	rate := (&abi.RateSelectRequest{Route: "/"}).AppendTo(nil)
	render := (&abi.RenderRequest{Template: "t", Version: 1}).AppendTo(nil)
	for _, name := range []string{"caphost_describe", "caphost_codec_encode", "caphost_codec_decode", "caphost_cache_canonicalize",
		"caphost_cache_admit", "caphost_rate_select", "caphost_render"} {
		for _, req := range [][]byte{nil, canon, admit, rate, render, {0xff}} {
			same(name, req)
			for i := range len(req) {
				same(name, req[:i])
			}
		}
		// A request that runs past the region, starts inside it, or lies
		// elsewhere.
		for _, at := range []func(r *rawInstance) (uint32, uint32){
			func(r *rawInstance) (uint32, uint32) { return r.region, r.size + 1 },
			func(r *rawInstance) (uint32, uint32) { return r.region + 1, 1 },
			func(r *rawInstance) (uint32, uint32) { return 8, 1 },
			func(r *rawInstance) (uint32, uint32) { return 0, 1 },
			func(r *rawInstance) (uint32, uint32) { return 1 << 31, 1 },
		} {
			gp, gn := at(goInst)
			ap, an := at(asInst)
			want, got := goInst.callAt(t, name, gp, gn), asInst.callAt(t, name, ap, an)
			require.Equal(t, want, got, "%s at (%d, %d): go %s, as %s", name, gp, gn, frameText(want), frameText(got))
		}
	}
	// caphost_alloc: 0 beyond a message's bound.
	for _, size := range []uint64{abi.MaxMessageBytes + 1, 1 << 31} {
		res, err := asInst.alloc.Call(context.Background(), size)
		require.NoError(t, err)
		assert.Zero(t, res[0], "caphost_alloc(%d)", size)
	}
	v, err := asInst.mod.ExportedFunction("caphost_abi_version").Call(context.Background())
	require.NoError(t, err)
	assert.Equal(t, uint64(abi.PackVersion(abi.Major, abi.Minor)), v[0])
}

// TestTwinMemoryStaysFlat: the twin allocates nothing per call (its
// buffers are reused), so an instance serving 100,000 decodes of a 1 KiB
// product — and encodes that write, refusals and a large request among
// them — keeps the linear memory it had after its first calls.
func TestTwinMemoryStaysFlat(t *testing.T) {
	inst := newRawInstance(t, readTwin(t, "codec-as"))
	value := product1K(t)
	decode := (&abi.CodecDecodeRequest{Schema: "product", StoredVersion: 2, Payload: value}).AppendTo(nil)
	upgrade := (&abi.CodecDecodeRequest{Schema: "product", StoredVersion: 1,
		Payload: []byte(`{"id":"SKU-7","name":"Wool socks \u003c3","price":"0.29","currency":"USD"}`)}).AppendTo(nil)
	rewrite := (&abi.CodecEncodeRequest{Schema: "search-page",
		Value: []byte(`{ "ids": ["a", "b<"], "page": 2, "query": "red \u00e9 shoes" }`)}).AppendTo(nil)
	refused := (&abi.CodecEncodeRequest{Schema: "product", Value: []byte(`{"\u00e9` + strings.Repeat("x", 300) + `":1}`)}).AppendTo(nil)
	large := (&abi.CodecDecodeRequest{Schema: "search-page", StoredVersion: 1,
		Payload: []byte(`{"query":"q","page":1,"ids":["` + strings.Repeat(`\u00e9`, 50_000) + `"]}`)}).AppendTo(nil)
	mix := [][]byte{upgrade, rewrite, refused, large}
	round := func(calls int) {
		for i := range calls {
			frame := inst.call(t, "caphost_codec_decode", decode)
			require.Equal(t, byte(abi.CodeOK), frame[0])
			if i%100 == 0 {
				req := mix[(i/100)%len(mix)]
				name := "caphost_codec_decode"
				if req[0] == byte(abi.TagCodecEncodeRequest) {
					name = "caphost_codec_encode"
				}
				inst.call(t, name, req)
			}
		}
	}
	round(1_000) // every buffer at the size the mix needs
	warm := inst.pages()
	round(100_000)
	after := inst.pages()
	t.Logf("linear memory: %d pages (%d KiB) after 1,000 calls, %d pages after 100,000 more", warm, warm*64, after)
	assert.Equal(t, warm, after, "memory grew while serving")
	assert.LessOrEqual(t, after, uint32(16), "the twin's memory stays within 1 MiB for these requests")
}

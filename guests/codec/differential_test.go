package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi/guest"
)

// The codec's reader and writer against the reference (reference_test.go):
// every codec of Module and of refModule answers every input alike: the
// same payload or value byte for byte, or the same status and detail.

var (
	diffInputs = flag.Int("codec.diff", 1_000, "generated inputs TestDifferential compares (with their mutations)")
	diffSeed   = flag.Uint64("codec.seed", 1, "seed of TestDifferential's generator")
)

// call is one codec call: encode (version 0) or decode at version.
type call struct {
	schema  string
	version uint32
}

// calls lists every call the codecs of m answer, declared versions and one
// beyond.
func calls(m *guest.Module) []call {
	var out []call
	for _, c := range m.Codecs {
		out = append(out, call{c.Decl.SchemaID, 0})
		for v := range c.Decl.WriteVersion + 1 {
			out = append(out, call{c.Decl.SchemaID, v + 1})
		}
	}
	return out
}

// answer is what a codec call answered, as text: the output, or the error.
func (c call) answer(m *guest.Module, in []byte) (string, bool) {
	for _, cd := range m.Codecs {
		if cd.Decl.SchemaID != c.schema {
			continue
		}
		var out []byte
		var err error
		if c.version == 0 {
			out, err = cd.Encode(in)
		} else {
			out, err = cd.Decode(c.version, in)
		}
		if err != nil {
			return err.Error(), false
		}
		return string(out), true
	}
	panic("no codec " + c.schema)
}

// differ returns how the codecs of Module and refModule answer in
// differently, or "". For user-profile, whose reference reads through
// encoding/json (case-insensitive names, the last of repeated members, null
// as "", invalid UTF-8 as U+FFFD), Module may refuse what the reference
// accepts, as the other schemas always did; what it accepts, it answers
// alike.
func differ(in []byte) string {
	m, ref := Module(), refModule()
	for _, c := range calls(ref) {
		got, gotOK := c.answer(m, in)
		want, wantOK := c.answer(ref, in)
		if c.schema == "user-profile" && !gotOK {
			continue
		}
		if got != want || gotOK != wantOK {
			return fmt.Sprintf("%s v%d of %q:\n got  %v %q\n want %v %q", c.schema, c.version, in, gotOK, got, wantOK, want)
		}
	}
	return ""
}

// TestDifferential compares the codecs over the fuzz corpus, the inputs
// the other tests name, and generated inputs (values of the three schemas,
// right and wrong, canonical and not) with mutations of each: cut short at
// every byte, and bytes replaced, inserted and removed.
func TestDifferential(t *testing.T) {
	inputs := corpus(t)
	g := &gen{r: rand.New(rand.NewPCG(*diffSeed, 0))}
	n := *diffInputs
	if testing.Short() {
		n /= 10
	}
	for range n {
		inputs = append(inputs, g.input())
	}
	checked := 0
	for _, in := range inputs {
		for _, m := range g.mutations(in) {
			checked++
			if d := differ(m); d != "" {
				t.Fatal(d)
			}
		}
	}
	t.Logf("%d inputs compared", checked)
}

// FuzzReference is TestDifferential's comparison for any bytes.
func FuzzReference(f *testing.F) {
	for _, in := range corpus(f) {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if d := differ(in); d != "" {
			t.Fatal(d)
		}
	})
}

// corpus is FuzzCodecs' seeds and corpus (testdata/fuzz), and texts of the
// tests' cases.
func corpus(tb testing.TB) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, s := range []string{
		`{"id":"SKU-42","name":"Trail shoe","price_cents":12999,"currency":"EUR","tags":["outdoor","sale"]}`,
		`{"id":"SKU-7","name":"Wool socks","price":"0.29","currency":"USD"}`,
		`{"query":"red running shoes","page":2,"ids":["SKU-42"]}`,
		`{"id":"a\u00e9<>&","name":"\ud83d\ude00","price_cents":0,"currency":"USD","tags":[]}`,
		"", "{}", "null", "\xff",
		`{"id":"u-7","name":"Ada Lovelace","email":"ada@example.com","locale":"de"}`,
		`{"id":"u-9","full_name":"Grace Hopper","email":"grace@example.com"}`,
		`{"ID":"u","NAME":"n","email":null,"locale":"\ud800","x":1}`,
		`{"id":"a","name":"b","price_cents":-0,"currency":"USD"}`,
		`{"id":"a","name":"b","price_cents":1,"currency":"USD","tags":["\u2028","\u2029","` + "\u2028" + `"]}`,
		`{"id":"a\/b","name":"\b\f\n\r\t\"\\","price_cents":1,"currency":"USD"}`,
		`{"id":"\ud800\u12Z`, `{"id":"\ud800\u12Z"}`, `{"id":"\ud800\uZZZZ"}`, `{"id":"\ud800\uZZ`,
		`{"id":"a\u12"`, `{"id":"a\x"`, `{"id":"\ud83d`, `{"id":"` + "\xe2\x82",
		`[{"id":"a"}]`, `"id"`, `123abc`, `nul`, `-`, `tx`, `{"a":1}x`, `{"id":"a",}`, `{"id" "a"}`,
		`{"tags":[1,]}`, `{"ids":["a",]}`, `{"ids":["a" "b"]}`, `{"ids":[}`, `{"ids":[,`, `{"ids":]`,
		`{"query":"q","page":1e400,"ids":[]}`, `{"query":"q","page":18446744073709551617,"ids":[]}`,
		`{"query":"q","page":-9223372036854775808,"ids":[]}`, `{"query":"q","page":01,"ids":[]}`,
		" \n\t", "{\"id\":\"a\tb\"}", `{"id":"a"} x`, `{"id":"a"}]`,
	} {
		out = append(out, []byte(s))
	}
	files, err := filepath.Glob(filepath.Join("testdata", "fuzz", "*", "*"))
	require.NoError(tb, err)
	for _, name := range files {
		out = append(out, readCorpusFile(tb, name)...)
	}
	return out
}

// readCorpusFile reads the []byte values of a "go test fuzz v1" file.
func readCorpusFile(tb testing.TB, name string) [][]byte {
	tb.Helper()
	f, err := os.Open(name)
	require.NoError(tb, err)
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if lit, ok := strings.CutPrefix(line, "[]byte("); ok {
			s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
			require.NoError(tb, err, "%s: %s", name, line)
			out = append(out, []byte(s))
		}
	}
	require.NoError(tb, sc.Err())
	return out
}

// gen generates inputs for the three schemas.
type gen struct{ r *rand.Rand }

func (g *gen) pick(ss ...string) string { return ss[g.r.IntN(len(ss))] }

func (g *gen) one(n int) bool { return g.r.IntN(n) == 0 }

// space is white space, mostly none.
func (g *gen) space() string {
	if !g.one(8) {
		return ""
	}
	return g.pick(" ", "\n", "\t", "\r", "  ", " \n ")
}

// char is one piece of a string's text: mostly plain ASCII, else an escape
// (valid or not), non-ASCII text, bytes that are not UTF-8 or characters a
// writer escapes.
func (g *gen) char() string {
	if !g.one(4) {
		return string(rune('a' + g.r.IntN(26)))
	}
	switch g.r.IntN(12) {
	case 0:
		return g.pick(`\"`, `\\`, `\/`, `\b`, `\f`, `\n`, `\r`, `\t`, `\x`, `\`, `\u`)
	case 1:
		return fmt.Sprintf(`\u%04x`, g.r.IntN(0x10000))
	case 2:
		return fmt.Sprintf(`\u%04X`, 0xd800+g.r.IntN(0x800)) // a surrogate
	case 3:
		hi, lo := 0xd800+g.r.IntN(0x400), 0xdc00+g.r.IntN(0x400)
		return fmt.Sprintf(`\u%04x\u%04x`, hi, lo) // a valid pair
	case 4:
		return g.pick("é", "€", "😀", "\u2028", "\u2029", "\ufffd", "中")
	case 5:
		return g.pick("\xff", "\xc3", "\xe2\x82", "\xed\xa0\x80", "\xc0\xaf", "\xf0\x9f\x98")
	case 6:
		return g.pick("<", ">", "&", "'", "\x00", "\x1f", "\x7f", "\t", "\n")
	case 7:
		return g.pick(`\u003c`, `\u2028`, `\u0000`, `\ud83d\ude00`, `\uD83D\uDE00`, `\ud83d`, `\ude00`)
	default:
		return string(rune(' ' + g.r.IntN(95)))
	}
}

// text is a string's content, of n pieces.
func (g *gen) text(n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(g.char())
	}
	return b.String()
}

// str is a JSON string, most often a plain one.
func (g *gen) str() string {
	switch g.r.IntN(6) {
	case 0:
		return `"` + g.text(g.r.IntN(20)) + `"`
	case 1:
		return `""`
	case 2:
		return g.pick(`"USD"`, `"EUR"`, `"usd"`, `"US"`, `"ÜSD"`)
	case 3:
		return g.pick(`"1.00"`, `"0.29"`, `"12"`, `"1234.5"`, `"1."`, `".5"`, `"1e3"`, `"-1"`, `"999999999999.99"`, `"1000000000000"`)
	}
	return `"` + strings.Repeat(string(rune('a'+g.r.IntN(26))), 1+g.r.IntN(70)) + `"`
}

// number is a JSON number or something close to one.
func (g *gen) number() string {
	switch g.r.IntN(6) {
	case 0:
		return g.pick("0", "-0", "1", "-1", "01", "-", "1.", "1.0", "1e2", "1E+2", "1e-2", ".5", "+1", "1e", "0x10")
	case 1:
		return g.pick("9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
			"18446744073709551617", "99999999999999", "100000000000000", "9999", "10000", "1e400")
	case 2:
		return strconv.FormatFloat(g.r.NormFloat64()*1000, 'g', -1, 64)
	}
	return strconv.Itoa(g.r.IntN(20000) - 100)
}

// value is a value of the kind a member wants, usually, or another.
func (g *gen) value(kind byte) string {
	if g.one(6) {
		kind = "snaox"[g.r.IntN(5)]
	}
	switch kind {
	case 's':
		return g.str()
	case 'n':
		return g.number()
	case 'a':
		var els []string
		for range g.r.IntN(5) + g.r.IntN(2)*g.r.IntN(110) {
			if g.one(10) {
				els = append(els, g.value('x'))
			} else {
				els = append(els, g.str())
			}
		}
		return "[" + g.space() + strings.Join(els, g.space()+","+g.space()) + g.space() + "]"
	case 'o':
		return g.pick(`{}`, `{"a":1}`, `{"id":"x"}`)
	}
	return g.pick("null", "true", "false", "nul", "tru", "[", "{", "]", "}", ",", ":", `"`, "x", "[1,]", "[]")
}

// schemas lists each schema's members and their kinds (s string, n
// number, a array of strings), and one unknown name.
var schemas = [][]struct {
	name string
	kind byte
}{
	{{"id", 's'}, {"name", 's'}, {"price_cents", 'n'}, {"currency", 's'}, {"tags", 'a'}},
	{{"id", 's'}, {"name", 's'}, {"price", 's'}, {"currency", 's'}},
	{{"query", 's'}, {"page", 'n'}, {"ids", 'a'}},
	{{"id", 's'}, {"name", 's'}, {"email", 's'}, {"locale", 's'}, {"full_name", 's'}},
}

// input is an object of a schema's members, mostly each once and in order,
// sometimes shuffled, missing, repeated, renamed or unknown; or a value
// encoding/json writes (so canonical) for a valid one.
func (g *gen) input() []byte {
	if g.one(4) {
		return g.canonical()
	}
	ms := schemas[g.r.IntN(len(schemas))]
	type kv struct{ k, v string }
	var kvs []kv
	for _, m := range ms {
		if g.one(10) {
			continue
		}
		name := `"` + m.name + `"`
		if g.one(30) {
			name = g.pick(`"x"`, `"`+strings.ToUpper(m.name)+`"`, `"\u0069d"`, `"`+m.name+` "`, `"na\u006de"`, `"`+strings.Repeat("long", 20)+`"`)
		}
		kvs = append(kvs, kv{name, g.value(m.kind)})
		if g.one(30) {
			kvs = append(kvs, kvs[len(kvs)-1])
		}
	}
	if g.one(5) {
		g.r.Shuffle(len(kvs), func(i, j int) { kvs[i], kvs[j] = kvs[j], kvs[i] })
	}
	var b strings.Builder
	b.WriteString(g.space() + "{")
	for i, e := range kvs {
		if i > 0 {
			b.WriteString(g.space() + ",")
		}
		b.WriteString(g.space() + e.k + g.space() + ":" + g.space() + e.v)
	}
	b.WriteString(g.space() + "}" + g.space())
	if g.one(30) {
		b.WriteString(g.pick("{}", "x", "]", "null", "\xff"))
	}
	return []byte(b.String())
}

// goodText is a string without a fault: mostly plain, sometimes with
// non-ASCII text, characters Marshal escapes, or bytes that are not UTF-8
// (which every reader refuses).
func (g *gen) goodText(max int) string {
	var b strings.Builder
	plain := g.one(2)
	for range 1 + g.r.IntN(max) {
		if plain || !g.one(6) {
			b.WriteByte(byte('a' + g.r.IntN(26)))
			continue
		}
		b.WriteString(g.pick("é", "😀", "\u2028", "\u2029", "<", ">", "&", "\"", "\\", "\n", "\x00", "\x7f", "/", " ", "\xff"))
	}
	return b.String()
}

// canonical is encoding/json's text of a valid value of one of the three
// schemas' current forms, or a text of the same value next to it: with
// '<', '>', '&', U+2028 or U+2029 unescaped, white space, the members
// sorted by name, -0 for 0, or an empty "tags" member.
func (g *gen) canonical() []byte {
	var v any
	switch g.r.IntN(3) {
	case 0:
		p := Product{ID: g.goodText(10), Name: g.goodText(80), PriceCents: g.r.Int64N(maxPriceCents + 1), Currency: g.pick("USD", "EUR", "JPY")}
		if g.one(4) {
			p.PriceCents = 0
		}
		for range g.r.IntN(maxTags+1) * g.r.IntN(2) {
			p.Tags = append(p.Tags, g.goodText(50))
		}
		v = p
	case 1:
		s := SearchPage{Query: g.goodText(maxSearchQuery), Page: 1 + g.r.Int64N(maxSearchPage), IDs: []string{}}
		for range g.r.IntN(maxSearchIDs+1) * g.r.IntN(2) {
			s.IDs = append(s.IDs, g.goodText(maxSearchID))
		}
		v = s
	default:
		v = Profile{ID: g.goodText(10), Name: g.goodText(30), Email: g.goodText(30), Locale: g.pick("en", "de")}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	if g.one(2) {
		return b
	}
	switch g.r.IntN(6) {
	case 0: // unescaped HTML characters
		var w strings.Builder
		enc := json.NewEncoder(&w)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			panic(err)
		}
		return []byte(strings.TrimSuffix(w.String(), "\n"))
	case 1: // unescaped line and paragraph separators
		return []byte(strings.NewReplacer(`\u2028`, "\u2028", `\u2029`, "\u2029").Replace(string(b)))
	case 2:
		b, err = json.MarshalIndent(v, "", g.pick(" ", "\t", ""))
	case 3: // members by name
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			panic(err)
		}
		b, err = json.Marshal(m)
	case 4:
		return []byte(strings.Replace(string(b), `"price_cents":0,`, `"price_cents":-0,`, 1))
	default:
		if _, ok := v.(Product); ok && !strings.Contains(string(b), `"tags"`) {
			return append(b[:len(b)-1], `,"tags":[]}`...)
		}
	}
	if err != nil {
		panic(err)
	}
	return b
}

// mutations returns in, in cut short at each byte (at most 24 of them,
// spread), and a few copies with a byte replaced, inserted or removed.
func (g *gen) mutations(in []byte) [][]byte {
	out := [][]byte{in}
	step := max(1, len(in)/24)
	for i := 0; i < len(in); i += step {
		out = append(out, in[:i])
	}
	special := []byte("\"\\{}[],: x0-9.eEu\x00\x1f\x7f\x80\xff\xc3\xe2\xed")
	for range 4 {
		if len(in) == 0 {
			break
		}
		i := g.r.IntN(len(in))
		c := special[g.r.IntN(len(special))]
		m := append([]byte(nil), in...)
		switch g.r.IntN(3) {
		case 0:
			m[i] = c
		case 1:
			m = append(m[:i], append([]byte{c}, m[i:]...)...)
		default:
			m = append(m[:i], m[i+1:]...)
		}
		out = append(out, m)
	}
	return out
}

// appendString and the per-type writers against encoding/json's Marshal.
func TestWriterIsMarshal(t *testing.T) {
	g := &gen{r: rand.New(rand.NewPCG(*diffSeed, 1))}
	check := func(v any, got []byte) {
		t.Helper()
		want, err := json.Marshal(v)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%#v", v)
	}
	randomString := func() string {
		switch g.r.IntN(3) {
		case 0: // any bytes
			b := make([]byte, g.r.IntN(40))
			for i := range b {
				b[i] = byte(g.r.UintN(256))
			}
			return string(b)
		case 1: // any runes
			var b strings.Builder
			for range g.r.IntN(20) {
				b.WriteRune(rune(g.r.IntN(0x110000)))
			}
			return b.String()
		}
		return g.goodText(40)
	}
	for c := range 256 { // every byte alone, and in the middle of a word
		check(string(rune(c)), appendString(nil, string(rune(c))))
		check(string([]byte{byte(c)}), appendString(nil, string([]byte{byte(c)})))
		s := "0123456789" + string([]byte{byte(c)}) + "abcdefghij"
		check(s, appendString(nil, s))
	}
	for range 20_000 {
		s := randomString()
		check(s, appendString(nil, s))
	}
	for range 2_000 {
		p := Product{ID: randomString(), Name: randomString(), PriceCents: int64(g.r.Uint64()), Currency: randomString()}
		switch g.r.IntN(3) {
		case 0:
			p.Tags = []string{}
		case 1:
			for range g.r.IntN(5) {
				p.Tags = append(p.Tags, randomString())
			}
		}
		check(p, canonical(p))
		s := SearchPage{Query: randomString(), Page: int64(g.r.Uint64())}
		if !g.one(4) { // nil IDs are null
			s.IDs = []string{}
			for range g.r.IntN(5) {
				s.IDs = append(s.IDs, randomString())
			}
		}
		check(s, canonical(s))
		pr := Profile{ID: randomString(), Name: randomString(), Email: randomString(), Locale: randomString()}
		check(pr, canonical(pr))
	}
}

// FuzzWriter: appendString writes any string as Marshal does.
func FuzzWriter(f *testing.F) {
	for _, s := range []string{"", "a", "<>&", "\u2028\u2029", "\xff", "\x00\x1f\x7f", "é😀", "\"\\/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		require.NoError(t, err)
		require.Equal(t, string(want), string(appendString(nil, s)))
	})
}

// parseInt parses a JSON number's text as strconv.ParseInt does.
func TestParseIntIsStrconv(t *testing.T) {
	g := &gen{r: rand.New(rand.NewPCG(*diffSeed, 2))}
	texts := []string{"0", "-0", "1", "-1", "9223372036854775807", "9223372036854775808", "-9223372036854775808",
		"-9223372036854775809", "18446744073709551615", "18446744073709551616", "99999999999999999999", "1.5", "1e3", "-1E+2",
		"92233720368547758070", "-92233720368547758080", "10000000000000000000"}
	for range 10_000 {
		switch g.r.IntN(3) {
		case 0:
			texts = append(texts, strconv.FormatInt(int64(g.r.Uint64()), 10))
		case 1:
			texts = append(texts, strconv.FormatUint(g.r.Uint64(), 10))
		default:
			texts = append(texts, strconv.FormatInt(g.r.Int64N(1<<20)-1<<19, 10)+g.pick("", ".0", "e1", "0", "00"))
		}
	}
	for _, s := range texts {
		want, err := strconv.ParseInt(s, 10, 64)
		got, ok := parseInt([]byte(s))
		assert.Equal(t, err == nil, ok, s)
		if ok {
			assert.Equal(t, want, got, s)
		}
	}
}

// A text readCanonical calls already written is the writer's text of what
// it read (so copying it is writing it), over the generator's canonical
// inputs and their mutations.
func TestSameIsWritten(t *testing.T) {
	g := &gen{r: rand.New(rand.NewPCG(*diffSeed, 3))}
	same := 0
	for range 5_000 {
		in := g.canonical()
		for _, m := range g.mutations(in) {
			if p, ok, err := readProduct(m); err == nil && ok {
				assert.Equal(t, string(m), string(canonical(p)))
				same++
			}
			if s, ok, err := readSearchPage(m); err == nil && ok {
				assert.Equal(t, string(m), string(canonical(s)))
				same++
			}
		}
	}
	assert.Greater(t, same, 100)
	// Plain text that is canonical all the same: UTF-8 other than U+2028
	// and U+2029 is written as it is.
	p, ok, err := readProduct([]byte(`{"id":"é","name":"😀","price_cents":1,"currency":"USD","tags":["中"]}`))
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, `{"id":"é","name":"😀","price_cents":1,"currency":"USD","tags":["中"]}`, string(canonical(p)))
}

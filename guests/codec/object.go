package main

import (
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// The product and search-page schemas read JSON through readObject rather
// than encoding/json's Unmarshal, which matches member names
// case-insensitively, keeps the last of a repeated member, reads null as the
// zero value and turns invalid UTF-8 and lone surrogate escapes into U+FFFD:
// each would let a value the schema does not define pass as one it does, and
// a missing price_cents read as a price of 0. readObject is a scanner over
// the bytes of the text written for these schemas (every L2 cache hit
// decodes, and encoding/json's token decoder, which this replaced, cost an
// allocation per token). It reads in order and answers every input as that
// decoder with the checks above did, error texts and byte offsets included;
// reference_test.go keeps the former reader and compares. The guest keeps
// to the standard library (DESIGN). Errors name members, never values.

// member is one member of an object schema; read says what its value must
// be and where it goes.
type member struct {
	name     string
	optional bool
	read     reader
}

// reader is a member's value: a string, an integer or an array of at most
// max strings, stored through the one pointer of its kind once read.
type reader struct {
	str  *string
	num  *int64
	strs *[]string
	max  int
}

// readString reads a string value into dst.
func readString(dst *string) reader { return reader{str: dst} }

// readInt reads an integer value into dst: a number with a fraction or an
// exponent (1.0, 1e3) or beyond int64 is refused, never rounded.
func readInt(dst *int64) reader { return reader{num: dst} }

// readStrings reads an array of at most max strings into dst (empty, not
// nil, for []), so a long array is refused before it is read.
func readStrings(dst *[]string, max int) reader { return reader{strs: dst, max: max} }

var (
	errNotString  = errors.New("must be a string")
	errNotInteger = errors.New("must be an integer")
	errNotStrings = errors.New("must be an array of strings")

	errNoValue   = &syntaxError{"no JSON value"}
	errTruncated = &syntaxError{"truncated JSON"}
)

// syntaxError is input that is not JSON.
type syntaxError struct{ msg string }

func (e *syntaxError) Error() string { return e.msg }

func malformed(offset int) error {
	return &syntaxError{fmt.Sprintf("malformed JSON at byte %d", offset)}
}

// isSyntax reports whether err is the scanner's (the input is not JSON)
// rather than a member reader's (the JSON is not the schema).
func isSyntax(err error) bool {
	var se *syntaxError
	return errors.As(err, &se)
}

// readObject reads data, which must be exactly one JSON object whose members
// are among ms (names matched exactly, each at most once, none null) and
// include every required one.
func readObject(data []byte, ms ...member) error {
	_, err := readCanonical(data, ms...)
	return err
}

// readCanonical is readObject that also reports whether data is already
// written as a schema's writer (write.go) writes the values read, when that
// writer writes ms in order, each name as it is, and an optional member
// when it is a non-empty array, else not at all: no white space, no escape
// and no character the writer escapes in a string, no -0, the members in
// order, no optional empty array.
func readCanonical(data []byte, ms ...member) (canon bool, err error) {
	d := decoder{data: data, canon: true}
	if err := d.object(ms); err != nil {
		return false, err
	}
	return d.canon, nil
}

// decoder reads one JSON text, data, from pos on. A string value read
// without escapes is a substring of text, which is data itself seen as a
// string: reading allocates only for escaped strings and arrays, so the
// values read share data's memory and data must not change while they are
// in use. Every reader here is done with them before its codec call
// returns (a decode's value is written out, or is data itself), and a
// codec call's input is not touched until the call has returned.
type decoder struct {
	data    []byte
	pos     int
	text    string
	hasText bool
	buf     []byte // the last string read with escapes, unescaped
	canon   bool   // see readCanonical
}

// fail is the error for the token that began at start (its separators and
// white space included), which the scanner could not read past at: the
// first byte of the text that breaks the JSON grammar, or len(data) for the
// end of the input. As one reading the text in order would, it names the
// first fault: a byte that is not UTF-8, or a \u escape of a surrogate that
// is not in a valid pair, before at comes first (badText, whose rules decide
// the offset of every fault within a string).
func (d *decoder) fail(start, at int) error {
	if i := badText(d.data[start:], at-start); i >= 0 {
		return malformed(start + i)
	}
	if at >= len(d.data) {
		return errTruncated
	}
	return malformed(at)
}

// more skips white space and reports whether a byte follows.
func (d *decoder) more() bool {
	if d.pos < len(d.data) && d.data[d.pos] > ' ' {
		return true // no white space (inlined: the common case)
	}
	return d.skipSpace()
}

// skipSpace is more, for white space.
func (d *decoder) skipSpace() bool {
	for d.pos < len(d.data) {
		switch d.data[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
			d.canon = false
		default:
			return true
		}
	}
	return false
}

// object reads the whole text: one object of members ms.
func (d *decoder) object(ms []member) error {
	data := d.data
	if !d.more() {
		return errNoValue
	}
	if data[d.pos] != '{' {
		// The first value is read whole before it is refused, so a fault
		// in it is a syntax error.
		if _, err := d.value(0); err != nil {
			return err
		}
		return errors.New("not a JSON object")
	}
	d.pos++
	var seen uint64 // bit i: ms[i] was read
	last := -1      // the index of the member read last
	for first := true; ; first = false {
		start := d.pos
		if !d.more() {
			return d.fail(start, len(data))
		}
		c := data[d.pos]
		if c == '}' || c == ']' {
			if c == ']' {
				return d.fail(start, d.pos)
			}
			d.pos++
			break
		}
		if !first {
			if c != ',' {
				return d.fail(start, d.pos)
			}
			d.pos++
			if !d.more() {
				return d.fail(start, len(data))
			}
			c = data[d.pos]
		}
		if c != '"' {
			return d.fail(start, d.pos)
		}
		name, _, err := d.stringBytes(start)
		if err != nil {
			return err
		}
		i := 0
		for i < len(ms) && ms[i].name != string(name) {
			i++
		}
		switch {
		case i == len(ms):
			return fmt.Errorf("unknown member %.32q", string(name))
		case seen&(1<<i) != 0:
			return errors.New("repeated member")
		}
		seen |= 1 << i
		if i < last {
			d.canon = false
		}
		last = i
		m := &ms[i]
		if err := d.member(&m.read); err != nil {
			if isSyntax(err) {
				return err
			}
			return fmt.Errorf("%s %w", m.name, err)
		}
		if m.optional && m.read.strs != nil && len(*m.read.strs) == 0 {
			d.canon = false // written without it
		}
	}
	if d.more() {
		return errors.New("trailing data after the object")
	}
	for i, m := range ms {
		if seen&(1<<i) == 0 && !m.optional {
			return fmt.Errorf("missing member %q", m.name)
		}
	}
	return nil
}

// member reads a member's value, from the colon after its name, into r.
func (d *decoder) member(r *reader) error {
	start := d.pos
	if !d.more() {
		return d.fail(start, len(d.data))
	}
	if d.data[d.pos] != ':' {
		return d.fail(start, d.pos)
	}
	d.pos++
	if !d.more() {
		return d.fail(start, len(d.data))
	}
	switch {
	case r.str != nil:
		s, ok, err := d.stringValue(start)
		switch {
		case err != nil:
			return err
		case !ok:
			return errNotString
		}
		*r.str = s
	case r.num != nil:
		n, ok, err := d.intValue(start)
		switch {
		case err != nil:
			return err
		case !ok:
			return errNotInteger
		}
		*r.num = n
	default:
		if d.data[d.pos] != '[' {
			if _, err := d.value(start); err != nil {
				return err
			}
			return errNotStrings
		}
		d.pos++
		return d.strings(r.strs, r.max)
	}
	return nil
}

// strings reads the rest of an array of at most max strings, after its '['.
func (d *decoder) strings(dst *[]string, max int) error {
	var small [16]string
	out := small[:0]
	for first := true; ; first = false {
		start := d.pos
		if !d.more() {
			return d.fail(start, len(d.data))
		}
		c := d.data[d.pos]
		if c == ']' || c == '}' {
			if c == '}' {
				return d.fail(start, d.pos)
			}
			d.pos++
			break
		}
		if len(out) == max {
			return fmt.Errorf("must hold at most %d strings", max)
		}
		if !first {
			if c != ',' {
				return d.fail(start, d.pos)
			}
			d.pos++
			if !d.more() {
				return d.fail(start, len(d.data))
			}
		}
		s, ok, err := d.stringValue(start)
		switch {
		case err != nil:
			return err
		case !ok:
			return errNotStrings
		}
		out = append(out, s)
	}
	*dst = make([]string, len(out)) // [] is empty, not nil
	copy(*dst, out)
	return nil
}

// A value's kind, as value reads it.
const (
	kindOther   = iota // an object or an array, whose '{' or '[' alone is read
	kindString         // read whole, as all below
	kindNumber         // the text of a JSON number
	kindLiteral        // true, false or null
)

// value reads the value at pos (white space skipped, a byte there): a
// string, number or literal whole, an object or array only its first byte,
// as encoding/json's token decoder did. A byte no value starts with, a
// stray delimiter included, is a syntax error there, as is a fault in the
// string, number or literal; the end of the input within one is truncation.
func (d *decoder) value(start int) (kind int, err error) {
	switch c := d.data[d.pos]; {
	case c == '{' || c == '[':
		d.pos++
		return kindOther, nil
	case c == '"':
		if _, _, err := d.stringBytes(start); err != nil {
			return 0, err
		}
		return kindString, nil
	case c == '-' || '0' <= c && c <= '9':
		return kindNumber, d.number(start)
	case c == 't':
		return kindLiteral, d.literal(start, "true")
	case c == 'f':
		return kindLiteral, d.literal(start, "false")
	case c == 'n':
		return kindLiteral, d.literal(start, "null")
	}
	return 0, d.fail(start, d.pos)
}

// stringValue reads the value at pos as a string: ok is false for a value
// of another kind (read whole, so a syntax error in it comes first).
func (d *decoder) stringValue(start int) (s string, ok bool, err error) {
	data, from := d.data, d.pos+1
	if data[d.pos] == '"' { // the common case first: plain text
		if i := skipPlain(data, from); i < len(data) && data[i] == '"' {
			d.pos = i + 1
			return d.substring(from, i), true, nil
		}
	} else {
		_, err := d.value(start)
		return "", false, err
	}
	b, escaped, err := d.stringBytes(start)
	switch {
	case err != nil:
		return "", false, err
	case escaped:
		return string(b), true, nil
	}
	return d.substring(from, from+len(b)), true, nil
}

// substring is data[from:to] as a string sharing data's memory (see
// decoder): a 1 KiB payload's copy was a fifth of a decode in Wasm.
func (d *decoder) substring(from, to int) string {
	if !d.hasText {
		d.text, d.hasText = unsafe.String(unsafe.SliceData(d.data), len(d.data)), true
	}
	return d.text[from:to]
}

// intValue reads the value at pos as an integer: ok is false for a value of
// another kind, a number with a fraction or an exponent, or one beyond
// int64.
func (d *decoder) intValue(start int) (n int64, ok bool, err error) {
	from := d.pos
	kind, err := d.value(start)
	if err != nil || kind != kindNumber {
		return 0, false, err
	}
	text := d.data[from:d.pos]
	if n, ok = parseInt(text); ok && n == 0 && text[0] == '-' {
		d.canon = false // -0 is written 0
	}
	return n, ok, nil
}

// parseInt parses b, a JSON number, as strconv.ParseInt(b, 10, 64) would.
func parseInt(b []byte) (int64, bool) {
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	const limit = 1 << 63 // the magnitude of the smallest int64
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' || u > limit/10 {
			return 0, false // a fraction, an exponent, or too many digits
		}
		u = u*10 + uint64(c-'0')
		if u > limit {
			return 0, false
		}
	}
	switch {
	case neg:
		return -int64(u), true // -(1<<63) wraps to itself
	case u == limit:
		return 0, false
	}
	return int64(u), true
}

// number reads the JSON number at pos.
func (d *decoder) number(start int) error {
	data := d.data
	digits := func() error { // one or more
		if d.pos == len(data) {
			return d.fail(start, len(data))
		}
		if c := data[d.pos]; c < '0' || c > '9' {
			return d.fail(start, d.pos)
		}
		for d.pos++; d.pos < len(data) && '0' <= data[d.pos] && data[d.pos] <= '9'; d.pos++ {
		}
		return nil
	}
	if data[d.pos] == '-' {
		d.pos++
	}
	if d.pos < len(data) && data[d.pos] == '0' {
		d.pos++ // not followed by digits: they would be the next token
	} else if err := digits(); err != nil {
		return err
	}
	if d.pos < len(data) && data[d.pos] == '.' {
		d.pos++
		if err := digits(); err != nil {
			return err
		}
	}
	if d.pos < len(data) && (data[d.pos] == 'e' || data[d.pos] == 'E') {
		d.pos++
		if d.pos < len(data) && (data[d.pos] == '+' || data[d.pos] == '-') {
			d.pos++
		}
		if err := digits(); err != nil {
			return err
		}
	}
	return nil
}

// literal reads lit (true, false or null) at pos.
func (d *decoder) literal(start int, lit string) error {
	for i := 0; i < len(lit); i, d.pos = i+1, d.pos+1 {
		switch {
		case d.pos == len(d.data):
			return d.fail(start, len(d.data))
		case d.data[d.pos] != lit[i]:
			return d.fail(start, d.pos)
		}
	}
	return nil
}

// stringBytes reads the string at pos (its opening quote) and returns its
// value: the text between the quotes when it has no escapes, else (escaped)
// the unescaped value in d.buf, valid until the next string. A string must
// be valid UTF-8 and escape a surrogate only as a valid pair.
func (d *decoder) stringBytes(start int) (b []byte, escaped bool, err error) {
	data := d.data
	quote := d.pos
	i := skipPlain(data, quote+1)
	if i < len(data) && data[i] == '"' { // the common case: plain text
		d.pos = i + 1
		return data[quote+1 : i], false, nil
	}
	// Escapes, characters the writer escapes, or not ASCII: unescape (into
	// buf, from the first escape on) and check.
	buf := d.buf[:0]
	from := quote + 1 // the text not yet copied to buf
	for i < len(data) {
		switch c := data[i]; {
		case c == '"':
			d.pos = i + 1
			if !escaped {
				return data[quote+1 : i], false, nil
			}
			d.buf = append(buf, data[from:i]...)
			return d.buf, true, nil
		case c < 0x20:
			return nil, false, d.stringFail(start, quote)
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(data[i:])
			switch r {
			case utf8.RuneError:
				if size == 1 {
					return nil, false, d.stringFail(start, quote)
				}
			case '\u2028', '\u2029':
				d.canon = false
			}
			i = skipPlain(data, i+size)
		case c == '\\':
			if i+1 == len(data) {
				return nil, false, d.stringFail(start, quote)
			}
			escaped, d.canon = true, false
			buf = append(buf, data[from:i]...)
			e := data[i+1]
			if e == 'u' {
				r := hex4(data[i+2:])
				n := 6
				switch {
				case r < 0:
					return nil, false, d.stringFail(start, quote)
				case utf16.IsSurrogate(r):
					// Only a high surrogate, then an escaped low one.
					if i+12 > len(data) || data[i+6] != '\\' || data[i+7] != 'u' {
						return nil, false, d.stringFail(start, quote)
					}
					if r = utf16.DecodeRune(r, hex4(data[i+8:])); r == utf8.RuneError {
						return nil, false, d.stringFail(start, quote)
					}
					n = 12
				}
				buf = utf8.AppendRune(buf, r)
				i += n
			} else {
				u := unescape[e]
				if u == 0 {
					return nil, false, d.stringFail(start, quote)
				}
				buf = append(buf, u)
				i += 2
			}
			from = i
			i = skipPlain(data, i)
		default: // '<', '>' or '&'
			d.canon = false
			i = skipPlain(data, i+1)
		}
	}
	return nil, false, d.stringFail(start, quote)
}

// unescape maps the byte after a backslash to the byte it stands for, 0 for
// none (\u is read apart).
var unescape = [256]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// stringFail is the error for the string at quote, in the token that began
// at start, which stringBytes could not accept: it finds where the JSON
// grammar stops the string (a control byte, a bad escape byte, the end of
// the input) and leaves the rest to fail. A string the grammar accepts has
// invalid UTF-8 or a surrogate escape outside a valid pair, which badText
// finds before its end.
func (d *decoder) stringFail(start, quote int) error {
	data := d.data
	for i := quote + 1; i < len(data); {
		switch c := data[i]; {
		case c == '"':
			return d.fail(start, i+1)
		case c < 0x20:
			return d.fail(start, i)
		case c != '\\':
			i++
		case i+1 == len(data):
			return d.fail(start, len(data))
		case data[i+1] == 'u':
			for j := i + 2; j < i+6; j++ {
				if j == len(data) {
					return d.fail(start, len(data))
				}
				if hexValue(data[j]) < 0 {
					return d.fail(start, j)
				}
			}
			i += 6
		case unescape[data[i+1]] == 0:
			return d.fail(start, i+1)
		default:
			i += 2
		}
	}
	return d.fail(start, len(data))
}

// badText returns the offset in JSON text b of the first byte before n that
// is not UTF-8 or starts a \u escape of a UTF-16 surrogate not in a valid
// pair or an escape the scanner stopped in, or -1. Before n (where the
// scanner stopped: the end of a token, a bad byte or the end of the input) a
// backslash is in a string. b runs to the end of the input, so a sequence it
// cuts short is truncated input, not a fault.
func badText(b []byte, n int) int {
	for i := 0; i < n; {
		switch c := b[i]; {
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(b[i:])
			switch {
			case !utf8.FullRune(b[i:]):
				return -1
			case r == utf8.RuneError && size == 1:
				return i
			}
			i += size
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			r := hex4(b[i+2:])
			switch {
			case i+len(`\uXXXX`) > n && n < len(b):
				return i // the scanner stopped at a bad byte in the escape
			case !utf16.IsSurrogate(r):
				i += len(`\uXXXX`) // or the input ends within it
				continue
			}
			// A high surrogate, then \u and a low one.
			pair := b[i:min(i+len(`\uXXXX\uXXXX`), len(b))]
			low := hex4(b[min(i+8, len(b)):])
			switch {
			case len(pair) > 6 && pair[6] != '\\', len(pair) > 7 && pair[7] != 'u':
				return i
			case len(pair) < 12:
				return -1
			case utf16.DecodeRune(r, low) == utf8.RuneError:
				return i
			}
			i += len(pair)
		case c == '\\':
			if i+2 > n && n < len(b) {
				return i // an escape the scanner stopped at
			}
			i += 2
		default:
			i++
		}
	}
	return -1
}

// hex4 is the value of the 4 hex digits b starts with, or -1.
func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		v := hexValue(c)
		if v < 0 {
			return -1
		}
		r = r<<4 | v
	}
	return r
}

// hexValue is the value of hex digit c, or -1.
func hexValue(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c - 'a' + 10)
	case 'A' <= c && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

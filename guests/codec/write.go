package main

import (
	"strconv"
	"unicode/utf8"
)

// The canonical payloads are written by hand, member by member, with the
// bytes encoding/json's Marshal writes for the same value (reference_test.go
// compares them): compact, members in declaration order, strings escaped as
// Marshal escapes them, HTML characters included.

// jsonWriter is a schema's current form: it appends its canonical payload
// and says about how long that is.
type jsonWriter interface {
	appendJSON(b []byte) []byte
	jsonSize() int
}

// canonical writes v's canonical payload.
func canonical[T jsonWriter](v T) []byte {
	return v.appendJSON(make([]byte, 0, v.jsonSize()))
}

func (p Product) jsonSize() int {
	return len(`{"id":"","name":"","price_cents":-9223372036854775808,"currency":"","tags":[]}`) +
		len(p.ID) + len(p.Name) + len(p.Currency) + stringsSize(p.Tags)
}

// appendJSON writes p as Marshal does: tags omitted when empty (omitempty).
func (p Product) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, p.ID)
	b = append(b, `,"name":`...)
	b = appendString(b, p.Name)
	b = append(b, `,"price_cents":`...)
	b = strconv.AppendInt(b, p.PriceCents, 10)
	b = append(b, `,"currency":`...)
	b = appendString(b, p.Currency)
	if len(p.Tags) > 0 {
		b = append(b, `,"tags":`...)
		b = appendStrings(b, p.Tags)
	}
	return append(b, '}')
}

func (s SearchPage) jsonSize() int {
	return len(`{"query":"","page":-9223372036854775808,"ids":[]}`) + len(s.Query) + stringsSize(s.IDs)
}

func (s SearchPage) appendJSON(b []byte) []byte {
	b = append(b, `{"query":`...)
	b = appendString(b, s.Query)
	b = append(b, `,"page":`...)
	b = strconv.AppendInt(b, s.Page, 10)
	b = append(b, `,"ids":`...)
	b = appendStrings(b, s.IDs)
	return append(b, '}')
}

func (p Profile) jsonSize() int {
	return len(`{"id":"","name":"","email":"","locale":""}`) + len(p.ID) + len(p.Name) + len(p.Email) + len(p.Locale)
}

func (p Profile) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, p.ID)
	b = append(b, `,"name":`...)
	b = appendString(b, p.Name)
	b = append(b, `,"email":`...)
	b = appendString(b, p.Email)
	b = append(b, `,"locale":`...)
	b = appendString(b, p.Locale)
	return append(b, '}')
}

// stringsSize is about the length of ss written: the strings, their quotes
// and commas.
func stringsSize(ss []string) int {
	n := 0
	for _, s := range ss {
		n += len(s) + len(`"",`)
	}
	return n
}

// appendStrings writes ss as Marshal writes a []string: null for nil.
func appendStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// plain holds the bytes written as they are, in strings both the reader and
// the writer can copy unexamined: ASCII, not a control byte, not '"' or
// '\\', and not '<', '>' or '&', which Marshal escapes for HTML.
var plain = func() (t [256]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// Eight bytes at a time, as one little-endian word: a byte value times lsb
// is that byte in every lane, and a lane's top bit (msb) flags it.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// le64 is b[i:i+8] as a little-endian word (one load once compiled).
func le64[T []byte | string](b T, i int) uint64 {
	b = b[i : i+8]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

// skipPlain returns the offset of the first byte of b at or after i that is
// not plain, or len(b). It tests a word at a time: a lane is flagged when it
// is below 0x20 (the borrow test) or not ASCII (its top bit), or when it is
// zero once xor-ed with a byte of the set tested (the zero-lane test). '"'
// and '&' differ only in bit 0x04, '<' and '>' only in 0x02, so one test
// clearing that bit takes each pair. A borrow may flag a lane above a
// flagged one, never a word without one: the word is then read by byte.
func skipPlain[T []byte | string](b T, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := le64(b, i)
		q := x&^(lsb*0x04) ^ (lsb * '"') // '"' or '&'
		a := x&^(lsb*0x02) ^ (lsb * '<') // '<' or '>'
		s := x ^ (lsb * '\\')
		if (x|(x-lsb*0x20)&^x|(q-lsb)&^q|(a-lsb)&^a|(s-lsb)&^s)&msb != 0 {
			break
		}
	}
	for i < len(b) && plain[b[i]] {
		i++
	}
	return i
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string, escaped as Marshal escapes it:
// '"' and '\\' with a backslash, \b \f \n \r \t by name, other control
// bytes and '<', '>', '&' as \u00XX, U+2028 and U+2029 as \u2028 and \u2029,
// and each byte that is not UTF-8 as \ufffd.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0 // s[start:i] is still to copy
	for i := 0; i < len(s); {
		if i = skipPlain(s, i); i == len(s) {
			break
		}
		if c := s[i]; c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, `\b`...)
			case '\f':
				b = append(b, `\f`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			case '\t':
				b = append(b, `\t`...)
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

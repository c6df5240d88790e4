// The strict JSON reader of guests/codec/object.go, ported function by
// function (same names, same order of checks): exact member names, each at
// most once, no null, integers without fraction or exponent, valid UTF-8,
// no lone surrogate escape, nothing after the object. Every refusal must
// carry the Go reader's text and byte offset, so fail, stringFail and
// badText decide offsets exactly as object.go does; read object.go's
// comments for why each rule is what it is.
//
// Values read are spans (pointer, length): into the payload itself for a
// string without escapes, else into the arena, where escaped strings are
// unescaped. The arena is reserved at the payload's length before a read
// (an unescaped string is never longer than its text), so it never moves
// during one, and it is reused by the next: a read allocates nothing.

import { Buf, runeSize } from "../../internal/asabi/wire";
import { decodeRune } from "./wire";
import { isPrint } from "./isprint";

// A member's kind: what its value must be.
export const K_STRING = 0;
export const K_INT = 1;
export const K_STRINGS = 2; // an array of at most max strings

// Member is one member of an object schema and, once read, its value.
export class Member {
  // The value: a string (ptr, len), an integer, or count strings whose
  // spans are in items, (ptr u32, len u32) each.
  ptr: usize = 0;
  len: i32 = 0;
  num: i64 = 0;
  count: i32 = 0;
  items: usize = 0;

  constructor(
    public name: string,
    public kind: i32,
    public optional: bool = false,
    public max: i32 = 0,
  ) {
    if (kind == K_STRINGS) this.items = heap.alloc(<usize>max << 3);
  }

  @inline itemPtr(i: i32): usize {
    return <usize>load<u32>(this.items + (<usize>i << 3));
  }

  @inline itemLen(i: i32): i32 {
    return <i32>load<u32>(this.items + (<usize>i << 3), 4);
  }
}

// Errors: syntax errors (the input is not JSON) first, then the others. A
// member's own error is reported after its name ("price_cents must be an
// integer"), a syntax error within it is not.
export const E_NONE = 0;
export const E_NO_VALUE = 1; // "no JSON value"
export const E_TRUNCATED = 2; // "truncated JSON"
export const E_MALFORMED = 3; // "malformed JSON at byte N"
export const E_NOT_OBJECT = 4; // "not a JSON object"
export const E_UNKNOWN_MEMBER = 5; // `unknown member %.32q`
export const E_REPEATED = 6; // "repeated member"
export const E_TRAILING = 7; // "trailing data after the object"
export const E_MISSING = 8; // `missing member %q`
export const E_NOT_STRING = 9; // "must be a string"
export const E_NOT_INTEGER = 10; // "must be an integer"
export const E_NOT_STRINGS = 11; // "must be an array of strings"
export const E_TOO_MANY = 12; // "must hold at most N strings"
export const E_TEXT = 13; // a schema's own text (errText)

// A value's kind, as value reads it.
const KIND_OTHER = 0; // an object or an array, whose '{' or '[' alone is read
const KIND_STRING = 1; // read whole, as all below
const KIND_NUMBER = 2;
const KIND_LITERAL = 3;

const LSB: u64 = 0x0101010101010101;
const MSB: u64 = 0x8080808080808080;

// plain(c): byte c is written as it is in a string by the writer and read
// unexamined by the reader: ASCII, not a control byte, not '"' or '\\', and
// not '<', '>' or '&', which Marshal escapes for HTML (write.go's plain).
const PLAIN = heap.alloc(256);
for (let c = 0; c < 256; c++) {
  store<u8>(PLAIN + <usize>c, c >= 0x20 && c < 0x80 && c != 0x22 && c != 0x5c && c != 0x3c && c != 0x3e && c != 0x26 ? 1 : 0);
}

@inline function plain(c: u8): bool {
  return load<u8>(PLAIN + <usize>c) != 0;
}

// skipPlain returns the offset of the first byte at or after i, below n,
// of the text at p that is not plain, or n. Most of a payload is plain
// text, so this is the reader's (and the writer's) inner loop: sixteen
// bytes a test with SIMD, a byte below 0x20 or not ASCII being one test
// (signed, both are below 0x20), and '"' and '&' another (they differ
// only in bit 0x04), as '<' and '>' (bit 0x02); then eight bytes a test as
// write.go's skipPlain (which says how that word test works); then bytes.
export function skipPlain(p: usize, i: i32, n: i32): i32 {
  for (; i + 16 <= n; i += 16) {
    const x = v128.load(p + <usize>i);
    const bad = v128.or(
      v128.or(i8x16.lt_s(x, i8x16.splat(0x20)), i8x16.eq(x, i8x16.splat(0x5c))),
      v128.or(
        i8x16.eq(v128.and(x, i8x16.splat(<i8>0xfb)), i8x16.splat(0x22)),
        i8x16.eq(v128.and(x, i8x16.splat(<i8>0xfd)), i8x16.splat(0x3c)),
      ),
    );
    if (v128.any_true(bad)) return i + ctz(i8x16.bitmask(bad));
  }
  for (; i + 8 <= n; i += 8) {
    const x = load<u64>(p + <usize>i);
    const q = (x & ~(LSB * 0x04)) ^ (LSB * 0x22); // '"' or '&'
    const a = (x & ~(LSB * 0x02)) ^ (LSB * 0x3c); // '<' or '>'
    const s = x ^ (LSB * 0x5c); // '\\'
    if (((x | ((x - LSB * 0x20) & ~x) | ((q - LSB) & ~q) | ((a - LSB) & ~a) | ((s - LSB) & ~s)) & MSB) != 0) break;
  }
  while (i < n && plain(load<u8>(p + <usize>i))) i++;
  return i;
}

// hexValue is the value of hex digit c, or -1.
@inline function hexValue(c: u8): i32 {
  if (c >= 0x30 && c <= 0x39) return <i32>c - 0x30;
  if (c >= 0x61 && c <= 0x66) return <i32>c - 0x61 + 10;
  if (c >= 0x41 && c <= 0x46) return <i32>c - 0x41 + 10;
  return -1;
}

// hex4 is the value of the 4 hex digits at p (avail bytes there), or -1.
function hex4(p: usize, avail: i32): i32 {
  if (avail < 4) return -1;
  let r = 0;
  for (let k = 0; k < 4; k++) {
    const v = hexValue(load<u8>(p + <usize>k));
    if (v < 0) return -1;
    r = (r << 4) | v;
  }
  return r;
}

@inline function isSurrogate(r: i32): bool {
  return r >= 0xd800 && r < 0xe000;
}

// decodePair is utf16.DecodeRune: the rune of a surrogate pair, or -1
// (Go's U+FFFD) when hi and lo are not one.
@inline function decodePair(hi: i32, lo: i32): i32 {
  if (hi >= 0xd800 && hi < 0xdc00 && lo >= 0xdc00 && lo < 0xe000) {
    return (((hi - 0xd800) << 10) | (lo - 0xdc00)) + 0x10000;
  }
  return -1;
}

// unescape maps the byte after a backslash to the byte it stands for, 0
// for none (\u is read apart).
function unescape(e: u8): u8 {
  switch (e) {
    case 0x22: return 0x22; // "
    case 0x5c: return 0x5c; // \
    case 0x2f: return 0x2f; // /
    case 0x62: return 0x08; // b
    case 0x66: return 0x0c; // f
    case 0x6e: return 0x0a; // n
    case 0x72: return 0x0d; // r
    case 0x74: return 0x09; // t
  }
  return 0;
}

// fullRune is utf8.FullRune for the avail bytes at p (the first not ASCII):
// false only for the start of a valid encoding cut short by the end.
function fullRune(p: usize, avail: i32): bool {
  const c = load<u8>(p);
  let size = 1; // an invalid first byte is a rune of its own
  let lo: u8 = 0x80;
  let hi: u8 = 0xbf;
  if (c >= 0xc2 && c <= 0xdf) {
    size = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    size = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    size = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  }
  if (avail >= size) return true;
  if (avail > 1) {
    const c1 = load<u8>(p + 1);
    if (c1 < lo || c1 > hi) return true;
  }
  if (avail > 2) {
    const c2 = load<u8>(p + 2);
    if (c2 < 0x80 || c2 > 0xbf) return true;
  }
  return false;
}

// appendRune appends r's UTF-8 encoding (r valid).
function appendRune(w: Buf, r: i32): void {
  if (r < 0x80) {
    w.byte(<u8>r);
  } else if (r < 0x800) {
    w.byte(<u8>(0xc0 | (r >> 6)));
    w.byte(<u8>(0x80 | (r & 0x3f)));
  } else if (r < 0x10000) {
    w.byte(<u8>(0xe0 | (r >> 12)));
    w.byte(<u8>(0x80 | ((r >> 6) & 0x3f)));
    w.byte(<u8>(0x80 | (r & 0x3f)));
  } else {
    w.byte(<u8>(0xf0 | (r >> 18)));
    w.byte(<u8>(0x80 | ((r >> 12) & 0x3f)));
    w.byte(<u8>(0x80 | ((r >> 6) & 0x3f)));
    w.byte(<u8>(0x80 | (r & 0x3f)));
  }
}

// The scanner's state: object.go's decoder, as module globals (one read at
// a time). Globals rather than an object's fields because the optimizer
// may keep a global's value across a store to memory, which it cannot do
// for a field that store may alias (measured: a 1 KiB product read in 0.62
// rather than 0.79 µs).
//
// src and srcLen are the JSON text read, pos where the reader is.
let src: usize = 0;
let srcLen: i32 = 0;
let pos: i32 = 0;
let canon = true; // see object.go's readCanonical
const arena = new Buf(4096);

// The string stringBytes read last.
let sPtr: usize = 0;
let sLen: i32 = 0;

// The integer parseInt read last.
let num: i64 = 0;

// The first error: its kind, the member it is reported under ("" for
// none), its offset (E_MALFORMED), bound (E_TOO_MANY), text (E_TEXT) or
// member name (E_UNKNOWN_MEMBER: the span; E_MISSING: name).
let err: i32 = E_NONE;
let errMember: string = "";
let errAt: i32 = 0;
let errText: string = "";
let errPtr: usize = 0;
let errLen: i32 = 0;

@inline function at(i: i32): u8 {
  return load<u8>(src + <usize>i);
}

// set records err and returns false, so `return set(...)` fails.
function set(e: i32): bool {
  err = e;
  return false;
}

// text records a schema's own refusal (after a successful read).
export function text(msg: string): bool {
  err = E_TEXT;
  errMember = "";
  errText = msg;
  return false;
}

// readCanonical reads the n bytes at p, which must be exactly one object
// of members ms, into ms; canon then says whether the text is already
// written as the schema's writer writes what was read (object.go).
export function readCanonical(p: usize, n: i32, ms: StaticArray<Member>): bool {
  src = p;
  srcLen = n;
  pos = 0;
  canon = true;
  err = E_NONE;
  errMember = "";
  arena.reset();
  arena.reserve(n);
  return object(ms);
}

// isCanon reports whether the text readCanonical read last is already
// its canonical payload.
export function isCanon(): bool {
  return canon;
}

// fail is object.go's fail: the error for the token that began at start,
// which the scanner could not read past at.
function fail(start: i32, at: i32): bool {
  const i = badText(start, at - start);
  if (i >= 0) {
    errAt = start + i;
    return set(E_MALFORMED);
  }
  if (at >= srcLen) return set(E_TRUNCATED);
  errAt = at;
  return set(E_MALFORMED);
}

// more skips white space and reports whether a byte follows.
@inline function more(): bool {
  if (pos < srcLen && at(pos) > 0x20) return true;
  return skipSpace();
}

function skipSpace(): bool {
  while (pos < srcLen) {
    const c = at(pos);
    if (c == 0x20 || c == 0x09 || c == 0x0a || c == 0x0d) {
      pos++;
      canon = false;
    } else {
      return true;
    }
  }
  return false;
}

// object reads the whole text: one object of members ms.
function object(ms: StaticArray<Member>): bool {
  if (!more()) return set(E_NO_VALUE);
  if (at(pos) != 0x7b) { // '{'
    // The first value is read whole before it is refused, so a fault in
    // it is a syntax error.
    if (value(0) < 0) return false;
    return set(E_NOT_OBJECT);
  }
  pos++;
  let seen: u32 = 0; // bit i: ms[i] was read
  let last = -1; // the index of the member read last
  for (let first = true; ; first = false) {
    const start = pos;
    if (!more()) return fail(start, srcLen);
    let c = at(pos);
    if (c == 0x7d || c == 0x5d) { // '}' or ']'
      if (c == 0x5d) return fail(start, pos);
      pos++;
      break;
    }
    if (!first) {
      if (c != 0x2c) return fail(start, pos); // ','
      pos++;
      if (!more()) return fail(start, srcLen);
      c = at(pos);
    }
    if (c != 0x22) return fail(start, pos); // '"'
    if (!stringBytes(start)) return false;
    const i = lookup(ms, sPtr, sLen);
    if (i == ms.length) {
      errPtr = sPtr;
      errLen = sLen;
      return set(E_UNKNOWN_MEMBER);
    }
    if ((seen & (1 << i)) != 0) return set(E_REPEATED);
    seen |= 1 << i;
    if (i < last) canon = false;
    last = i;
    const m = unchecked(ms[i]);
    if (!member(m)) {
      if (err > E_MALFORMED) errMember = m.name;
      return false;
    }
    if (m.optional && m.kind == K_STRINGS && m.count == 0) canon = false; // written without it
  }
  if (more()) return set(E_TRAILING);
  for (let i = 0; i < ms.length; i++) {
    const m = unchecked(ms[i]);
    if ((seen & (1 << i)) == 0) {
      if (!m.optional) {
        errText = m.name;
        return set(E_MISSING);
      }
      // Absent: the zero value (no tags).
      m.count = 0;
    }
  }
  return true;
}

// member reads a member's value, from the colon after its name, into m.
function member(m: Member): bool {
  const start = pos;
  if (!more()) return fail(start, srcLen);
  if (at(pos) != 0x3a) return fail(start, pos); // ':'
  pos++;
  if (!more()) return fail(start, srcLen);
  if (m.kind == K_STRING) {
    const kind = stringValue(start);
    if (kind < 0) return false;
    if (kind != KIND_STRING) return set(E_NOT_STRING);
    m.ptr = sPtr;
    m.len = sLen;
    return true;
  }
  if (m.kind == K_INT) return intValue(start, m);
  if (at(pos) != 0x5b) { // '['
    if (value(start) < 0) return false;
    return set(E_NOT_STRINGS);
  }
  pos++;
  return strings(m);
}

// strings reads the rest of an array of at most m.max strings, after its '['.
function strings(m: Member): bool {
  let count = 0;
  for (let first = true; ; first = false) {
    const start = pos;
    if (!more()) return fail(start, srcLen);
    const c = at(pos);
    if (c == 0x5d || c == 0x7d) { // ']' or '}'
      if (c == 0x7d) return fail(start, pos);
      pos++;
      break;
    }
    if (count == m.max) {
      errAt = m.max;
      return set(E_TOO_MANY);
    }
    if (!first) {
      if (c != 0x2c) return fail(start, pos);
      pos++;
      if (!more()) return fail(start, srcLen);
    }
    const kind = stringValue(start);
    if (kind < 0) return false;
    if (kind != KIND_STRING) return set(E_NOT_STRINGS);
    const item = m.items + (<usize>count << 3);
    store<u32>(item, <u32>sPtr);
    store<u32>(item, <u32>sLen, 4);
    count++;
  }
  m.count = count;
  return true;
}

// value reads the value at pos (white space skipped, a byte there): a
// string, number or literal whole, an object or array only its first
// byte. It returns the value's kind, or -1 for a syntax error.
function value(start: i32): i32 {
  const c = at(pos);
  if (c == 0x7b || c == 0x5b) {
    pos++;
    return KIND_OTHER;
  }
  if (c == 0x22) return stringBytes(start) ? KIND_STRING : -1;
  if (c == 0x2d || (c >= 0x30 && c <= 0x39)) return readNumber(start) ? KIND_NUMBER : -1;
  if (c == 0x74) return literal(start, "true") ? KIND_LITERAL : -1;
  if (c == 0x66) return literal(start, "false") ? KIND_LITERAL : -1;
  if (c == 0x6e) return literal(start, "null") ? KIND_LITERAL : -1;
  fail(start, pos);
  return -1;
}

// stringValue reads the value at pos, a string into sPtr/sLen (the kind
// KIND_STRING) or a value of another kind whole (so a syntax error in it
// comes first); -1 for a syntax error.
function stringValue(start: i32): i32 {
  if (at(pos) == 0x22) { // the common case first: plain text
    const from = pos + 1;
    const i = skipPlain(src, from, srcLen);
    if (i < srcLen && at(i) == 0x22) {
      pos = i + 1;
      sPtr = src + <usize>from;
      sLen = i - from;
      return KIND_STRING;
    }
  } else {
    return value(start);
  }
  return stringBytes(start) ? KIND_STRING : -1;
}

// intValue reads the value at pos as an integer into m: a value of
// another kind, a number with a fraction or an exponent, or one beyond
// int64 is E_NOT_INTEGER.
function intValue(start: i32, m: Member): bool {
  const from = pos;
  const kind = value(start);
  if (kind < 0) return false;
  if (kind != KIND_NUMBER || !parseInt64(from, pos)) return set(E_NOT_INTEGER);
  m.num = num;
  if (num == 0 && at(from) == 0x2d) canon = false; // -0 is written 0
  return true;
}

// parseInt parses the JSON number at [from, to) into num as
// strconv.ParseInt(text, 10, 64) would; false for a fraction, an
// exponent or a value beyond int64.
function parseInt64(from: i32, to: i32): bool {
  const neg = at(from) == 0x2d;
  if (neg) from++;
  const limit: u64 = 1 << 63; // the magnitude of the smallest int64
  let u: u64 = 0;
  for (let i = from; i < to; i++) {
    const c = at(i);
    if (c < 0x30 || c > 0x39 || u > limit / 10) return false;
    u = u * 10 + <u64>(c - 0x30);
    if (u > limit) return false;
  }
  if (neg) {
    num = -(<i64>u); // -(1<<63) wraps to itself
    return true;
  }
  if (u == limit) return false;
  num = <i64>u;
  return true;
}

// digits reads one or more digits at pos (number's closure).
function digits(start: i32): bool {
  if (pos == srcLen) return fail(start, srcLen);
  const c = at(pos);
  if (c < 0x30 || c > 0x39) return fail(start, pos);
  pos++;
  while (pos < srcLen && at(pos) >= 0x30 && at(pos) <= 0x39) pos++;
  return true;
}

// number reads the JSON number at pos.
function readNumber(start: i32): bool {
  if (at(pos) == 0x2d) pos++;
  if (pos < srcLen && at(pos) == 0x30) {
    pos++; // not followed by digits: they would be the next token
  } else if (!digits(start)) {
    return false;
  }
  if (pos < srcLen && at(pos) == 0x2e) { // '.'
    pos++;
    if (!digits(start)) return false;
  }
  if (pos < srcLen && (at(pos) == 0x65 || at(pos) == 0x45)) { // e E
    pos++;
    if (pos < srcLen && (at(pos) == 0x2b || at(pos) == 0x2d)) pos++;
    if (!digits(start)) return false;
  }
  return true;
}

// literal reads lit (true, false or null) at pos.
function literal(start: i32, lit: string): bool {
  for (let i = 0; i < lit.length; i++, pos++) {
    if (pos == srcLen) return fail(start, srcLen);
    if (<i32>at(pos) != lit.charCodeAt(i)) return fail(start, pos);
  }
  return true;
}

// stringBytes reads the string at pos (its opening quote) into
// sPtr/sLen: the text between the quotes when it has no escapes, else
// its unescaped value in the arena. It must be valid UTF-8 and escape a
// surrogate only as a valid pair.
function stringBytes(start: i32): bool {
  const p = src;
  const n = srcLen;
  const quote = pos;
  let i = skipPlain(p, quote + 1, n);
  if (i < n && at(i) == 0x22) { // the common case: plain text
    pos = i + 1;
    sPtr = p + <usize>(quote + 1);
    sLen = i - quote - 1;
    return true;
  }
  // Escapes, characters the writer escapes, or not ASCII: unescape (into
  // the arena, from the first escape on) and check.
  const buf = arena;
  const bufStart = buf.len;
  let escaped = false;
  let from = quote + 1; // the text not yet copied to the arena
  while (i < n) {
    const c = at(i);
    if (c == 0x22) {
      pos = i + 1;
      if (!escaped) {
        sPtr = p + <usize>(quote + 1);
        sLen = i - quote - 1;
        return true;
      }
      buf.bytes(p + <usize>from, i - from);
      sPtr = buf.ptr + <usize>bufStart;
      sLen = buf.len - bufStart;
      return true;
    } else if (c < 0x20) {
      return stringFail(start, quote);
    } else if (c >= 0x80) {
      const size = runeSize(p + <usize>i, n - i);
      if (size == 0) return stringFail(start, quote);
      if (size == 3) {
        const r = decodeRune(p + <usize>i, 3);
        if (r == 0x2028 || r == 0x2029) canon = false;
      }
      i = skipPlain(p, i + size, n);
    } else if (c == 0x5c) { // '\\'
      if (i + 1 == n) return stringFail(start, quote);
      escaped = true;
      canon = false;
      buf.bytes(p + <usize>from, i - from);
      const e = at(i + 1);
      if (e == 0x75) { // 'u'
        let r = hex4(p + <usize>(i + 2), n - i - 2);
        let size = 6;
        if (r < 0) return stringFail(start, quote);
        if (isSurrogate(r)) {
          // Only a high surrogate, then an escaped low one.
          if (i + 12 > n || at(i + 6) != 0x5c || at(i + 7) != 0x75) return stringFail(start, quote);
          r = decodePair(r, hex4(p + <usize>(i + 8), n - i - 8));
          if (r < 0) return stringFail(start, quote);
          size = 12;
        }
        appendRune(buf, r);
        i += size;
      } else {
        const u = unescape(e);
        if (u == 0) return stringFail(start, quote);
        buf.byte(u);
        i += 2;
      }
      from = i;
      i = skipPlain(p, i, n);
    } else { // '<', '>' or '&'
      canon = false;
      i = skipPlain(p, i + 1, n);
    }
  }
  return stringFail(start, quote);
}

// stringFail is object.go's stringFail: the error for the string at
// quote, in the token that began at start, which stringBytes could not
// accept.
function stringFail(start: i32, quote: i32): bool {
  const n = srcLen;
  let i = quote + 1;
  while (i < n) {
    const c = at(i);
    if (c == 0x22) return fail(start, i + 1);
    if (c < 0x20) return fail(start, i);
    if (c != 0x5c) {
      i++;
    } else if (i + 1 == n) {
      return fail(start, n);
    } else if (at(i + 1) == 0x75) {
      for (let j = i + 2; j < i + 6; j++) {
        if (j == n) return fail(start, n);
        if (hexValue(at(j)) < 0) return fail(start, j);
      }
      i += 6;
    } else if (unescape(at(i + 1)) == 0) {
      return fail(start, i + 1);
    } else {
      i += 2;
    }
  }
  return fail(start, n);
}

// badText is object.go's badText over the text from start to the end of
// the input (b there): the offset from start of the first byte before
// limit that is not UTF-8 or starts a \u escape of a surrogate not in a
// valid pair or an escape the scanner stopped in, or -1.
function badText(start: i32, limit: i32): i32 {
  const b = src + <usize>start;
  const len = srcLen - start;
  let i = 0;
  while (i < limit) {
    const c = load<u8>(b + <usize>i);
    if (c >= 0x80) {
      if (!fullRune(b + <usize>i, len - i)) return -1;
      const size = runeSize(b + <usize>i, len - i);
      if (size == 0) return i;
      i += size;
    } else if (c == 0x5c && i + 1 < len && load<u8>(b + <usize>(i + 1)) == 0x75) {
      const r = hex4(b + <usize>(i + 2), len - i - 2);
      if (i + 6 > limit && limit < len) return i; // the scanner stopped at a bad byte in the escape
      if (!isSurrogate(r)) {
        i += 6; // or the input ends within it
        continue;
      }
      // A high surrogate, then \u and a low one.
      const pair = min(12, len - i);
      const lowAt = min(i + 8, len);
      const low = hex4(b + <usize>lowAt, len - lowAt);
      if ((pair > 6 && load<u8>(b + <usize>(i + 6)) != 0x5c) || (pair > 7 && load<u8>(b + <usize>(i + 7)) != 0x75)) return i;
      if (pair < 12) return -1;
      if (decodePair(r, low) < 0) return i;
      i += pair;
    } else if (c == 0x5c) {
      if (i + 2 > limit && limit < len) return i; // an escape the scanner stopped at
      i += 2;
    } else {
      i++;
    }
  }
  return -1;
}

// appendError appends the error's text, as object.go's errors print.
export function appendError(w: Buf): void {
  if (errMember.length > 0) {
    w.ascii(errMember);
    w.byte(0x20);
  }
  switch (err) {
    case E_NO_VALUE:
      w.ascii("no JSON value");
      break;
    case E_TRUNCATED:
      w.ascii("truncated JSON");
      break;
    case E_MALFORMED:
      w.ascii("malformed JSON at byte ");
      w.decimal(<u64>errAt);
      break;
    case E_NOT_OBJECT:
      w.ascii("not a JSON object");
      break;
    case E_UNKNOWN_MEMBER:
      w.ascii("unknown member ");
      appendQuoted(w, errPtr, errLen, 32);
      break;
    case E_REPEATED:
      w.ascii("repeated member");
      break;
    case E_TRAILING:
      w.ascii("trailing data after the object");
      break;
    case E_MISSING:
      w.ascii("missing member \"");
      w.ascii(errText);
      w.byte(0x22);
      break;
    case E_NOT_STRING:
      w.ascii("must be a string");
      break;
    case E_NOT_INTEGER:
      w.ascii("must be an integer");
      break;
    case E_NOT_STRINGS:
      w.ascii("must be an array of strings");
      break;
    case E_TOO_MANY:
      w.ascii("must hold at most ");
      w.decimal(<u64>errAt);
      w.ascii(" strings");
      break;
    default:
      w.ascii(errText);
  }
}

// lookup is the index in ms of the member named by the n bytes at p, or
// ms.length.
function lookup(ms: StaticArray<Member>, p: usize, n: i32): i32 {
  for (let i = 0; i < ms.length; i++) {
    const name = unchecked(ms[i]).name;
    if (name.length != n) continue;
    const s = changetype<usize>(name);
    let k = 0;
    while (k < n && <u16>load<u8>(p + <usize>k) == load<u16>(s + (<usize>k << 1))) k++;
    if (k == n) return i;
  }
  return ms.length;
}

const HEX = "0123456789abcdef";

function appendHex(w: Buf, v: i32, digits: i32): void {
  for (let s = (digits - 1) * 4; s >= 0; s -= 4) w.byte(<u8>HEX.charCodeAt((v >> s) & 0xf));
}

// appendQuoted writes the n bytes at p as fmt's %.<maxRunes>q does: the
// first maxRunes runes (a byte that is not UTF-8 counts as one), quoted by
// strconv.Quote: '"' and '\\' backslashed, printable runes (isPrint) as
// they are, \a \b \f \n \r \t \v by name, other bytes below 0x20, DEL and
// bytes that are not UTF-8 as \xXX, other runes as \uXXXX or \UXXXXXXXX.
export function appendQuoted(w: Buf, p: usize, n: i32, maxRunes: i32): void {
  w.byte(0x22);
  let i = 0;
  for (let runes = 0; i < n && runes < maxRunes; runes++) {
    const c = load<u8>(p + <usize>i);
    let r = <i32>c;
    let size = 1;
    if (c >= 0x80) {
      size = runeSize(p + <usize>i, n - i);
      if (size == 0) {
        w.ascii("\\x");
        appendHex(w, c, 2);
        i++;
        continue;
      }
      r = decodeRune(p + <usize>i, size);
    }
    if (r == 0x22 || r == 0x5c) {
      w.byte(0x5c);
      w.byte(<u8>r);
    } else if (isPrint(r)) {
      w.bytes(p + <usize>i, size);
    } else if (r == 0x07) {
      w.ascii("\\a");
    } else if (r == 0x08) {
      w.ascii("\\b");
    } else if (r == 0x0c) {
      w.ascii("\\f");
    } else if (r == 0x0a) {
      w.ascii("\\n");
    } else if (r == 0x0d) {
      w.ascii("\\r");
    } else if (r == 0x09) {
      w.ascii("\\t");
    } else if (r == 0x0b) {
      w.ascii("\\v");
    } else if (r < 0x20 || r == 0x7f) {
      w.ascii("\\x");
      appendHex(w, r, 2);
    } else if (r < 0x10000) {
      w.ascii("\\u");
      appendHex(w, r, 4);
    } else {
      w.ascii("\\U");
      appendHex(w, r, 8);
    }
    i += size;
  }
  w.byte(0x22);
}

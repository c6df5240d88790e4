// The canonical payloads' writer of guests/codec/write.go: compact JSON,
// members in declaration order, strings escaped exactly as encoding/json's
// Marshal escapes them (HTML characters included), so equal values have
// equal payloads, and the same bytes as the Go guest writes.

import { Buf, runeSize } from "../../internal/asabi/wire";
import { decodeRune } from "./wire";
import { Member, K_STRING, K_INT, skipPlain } from "./scanner";

const HEX = "0123456789abcdef";

@inline function hexDigit(v: i32): u8 {
  return <u8>HEX.charCodeAt(v & 0xf);
}

// appendString writes the n bytes at p as a JSON string, escaped as Marshal
// escapes it: '"' and '\\' with a backslash, \b \f \n \r \t by name, other
// control bytes and '<', '>', '&' as \u00XX, U+2028 and U+2029 as \u2028
// and \u2029, and each byte that is not UTF-8 as \ufffd.
export function appendString(w: Buf, p: usize, n: i32): void {
  w.byte(0x22);
  let start = 0; // [start, i) is still to copy
  let i = 0;
  while (i < n) {
    i = skipPlain(p, i, n);
    if (i == n) break;
    const c = load<u8>(p + <usize>i);
    if (c < 0x80) {
      w.bytes(p + <usize>start, i - start);
      switch (c) {
        case 0x22:
        case 0x5c:
          w.byte(0x5c);
          w.byte(c);
          break;
        case 0x08:
          w.ascii("\\b");
          break;
        case 0x0c:
          w.ascii("\\f");
          break;
        case 0x0a:
          w.ascii("\\n");
          break;
        case 0x0d:
          w.ascii("\\r");
          break;
        case 0x09:
          w.ascii("\\t");
          break;
        default:
          w.ascii("\\u00");
          w.byte(hexDigit(<i32>c >> 4));
          w.byte(hexDigit(<i32>c));
      }
      i++;
      start = i;
      continue;
    }
    const size = runeSize(p + <usize>i, n - i);
    if (size == 0) {
      w.bytes(p + <usize>start, i - start);
      w.ascii("\\ufffd");
      i++;
      start = i;
      continue;
    }
    const r = size == 3 ? decodeRune(p + <usize>i, 3) : 0;
    if (r == 0x2028 || r == 0x2029) {
      w.bytes(p + <usize>start, i - start);
      w.ascii("\\u202");
      w.byte(hexDigit(r));
      i += size;
      start = i;
      continue;
    }
    i += size;
  }
  w.bytes(p + <usize>start, n - start);
  w.byte(0x22);
}

// appendName writes `,"name":` (or `{"name":` for the first member).
export function appendName(w: Buf, first: bool, name: string): void {
  w.byte(first ? 0x7b : 0x2c);
  w.byte(0x22);
  w.ascii(name);
  w.byte(0x22);
  w.byte(0x3a);
}

// appendValue writes m's value: a string, an integer, or an array of
// strings (Marshal's []string; a read array is never nil, so never null).
export function appendValue(w: Buf, m: Member): void {
  if (m.kind == K_STRING) {
    appendString(w, m.ptr, m.len);
  } else if (m.kind == K_INT) {
    w.int(m.num);
  } else {
    w.byte(0x5b);
    for (let i = 0; i < m.count; i++) {
      if (i > 0) w.byte(0x2c);
      appendString(w, m.itemPtr(i), m.itemLen(i));
    }
    w.byte(0x5d);
  }
}

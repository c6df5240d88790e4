// The caphost ABI v1 binary encoding (abi/ABI.md §4–§5), by hand: the
// RateSelectRequest decoder and the writers for response frames and
// RateSelectResponse. It must accept exactly what the Go decoder
// (abi.Decoder, via abi.RateSelectRequest.Unmarshal) accepts and refuse
// everything else with the same text, because a refusal is an
// invalid-request frame whose detail the host compares byte for byte with
// the Go twins' (self-test vectors, conformance). So the checks run in the
// Go decoder's order, the first violation sticks, and the detail is
// abi.DecodeError's: "abi: malformed message: field F at byte N: REASON".
//
// Nothing here allocates on the call path: the request is read in place
// from a reusable buffer and every answer is written into a reusable
// buffer, so the instance's memory stays flat however many calls it serves.

// Bounds of the encoding (abi/wire.go, abi/messages.go).
export const MAX_MESSAGE_BYTES: u64 = 1 << 20;
export const MAX_LIST_ITEMS: u64 = 64;
export const MAX_NAME_BYTES: u64 = 128;
export const MAX_VALUE_BYTES: u64 = 1024;
export const MAX_DETAIL_BYTES: i32 = 256;

// Message tags and status codes used by this guest.
export const TAG_RATE_SELECT_REQUEST: u8 = 9;
export const TAG_RATE_SELECT_RESPONSE: u8 = 10;
export const CODE_OK: u8 = 0;
export const CODE_INVALID_REQUEST: u8 = 3;

// Buf is a growable byte buffer outside the managed heap (heap.alloc): the
// collector never scans or moves it, and reuse makes a call allocation-free.
export class Buf {
  ptr: usize = 0;
  len: i32 = 0;
  cap: i32 = 0;

  constructor(cap: i32) {
    this.ptr = heap.alloc(<usize>cap);
    this.cap = cap;
  }

  reset(): void {
    this.len = 0;
  }

  // reserve makes room for n more bytes.
  reserve(n: i32): void {
    const need = this.len + n;
    if (need <= this.cap) return;
    let c = this.cap * 2;
    while (c < need) c *= 2;
    this.ptr = heap.realloc(this.ptr, <usize>c);
    this.cap = c;
  }

  byte(b: u8): void {
    this.reserve(1);
    store<u8>(this.ptr + <usize>this.len, b);
    this.len++;
  }

  // ascii appends s, which must be ASCII (every string this guest writes is).
  ascii(s: string): void {
    const n = s.length;
    this.reserve(n);
    for (let i = 0; i < n; i++) {
      store<u8>(this.ptr + <usize>(this.len + i), <u8>s.charCodeAt(i));
    }
    this.len += n;
  }

  // uvarint appends v as minimal unsigned LEB128.
  uvarint(v: u64): void {
    while (v >= 0x80) {
      this.byte(<u8>(v & 0x7f) | 0x80);
      v >>= 7;
    }
    this.byte(<u8>v);
  }

  // decimal appends v in base 10, as Go's %d does.
  decimal(v: u64): void {
    let digits = 1;
    for (let t = v; t >= 10; t /= 10) digits++;
    this.reserve(digits);
    for (let i = digits - 1; i >= 0; i--) {
      store<u8>(this.ptr + <usize>(this.len + i), <u8>(0x30 + <i32>(v % 10)));
      v /= 10;
    }
    this.len += digits;
  }

  // string appends an ABI string: uvarint length, then the ASCII bytes.
  string(s: string): void {
    this.uvarint(<u64>s.length);
    this.ascii(s);
  }
}

// Why a request was refused: the reasons abi.Decoder reports.
const R_BAD_VARINT = 1; // "bad varint"
const R_NON_MINIMAL = 2; // "non-minimal varint"
const R_LENGTH_BOUND = 3; // "length N exceeds bound M"
const R_TRUNCATED = 4; // "truncated"
const R_NOT_UTF8 = 5; // "not UTF-8"
const R_ITEMS_BOUND = 6; // "N items exceed bound M"
const R_COUNT_REMAINING = 7; // "count exceeds remaining input"
const R_TAG = 8; // "message tag N, want M"
const R_TRAILING = 9; // "trailing bytes"
const R_TOO_LARGE = 10; // "message exceeds MaxMessageBytes"

// A string field decoded in place: offset and length in the request.
export class Field {
  off: i32 = 0;
  len: i32 = 0;
}

// Decoder reads one request with a sticky error, like abi.Decoder: after the
// first violation every read returns zero and the violation is kept.
export class Decoder {
  p: usize = 0;
  n: i32 = 0;
  off: i32 = 0;
  bad: bool = false;
  field: string = "";
  errOff: i32 = 0;
  reason: i32 = 0;
  a: u64 = 0;
  b: u64 = 0;

  reset(p: usize, n: i32): void {
    this.p = p;
    this.n = n;
    this.off = 0;
    this.bad = false;
    this.field = "";
  }

  // tooLarge records the over-1-MiB refusal abi.Decoder reports before
  // reading anything (the request is never loaded).
  tooLarge(): void {
    this.bad = false;
    this.fail("message", R_TOO_LARGE, 0, 0);
  }

  fail(field: string, reason: i32, a: u64, b: u64): void {
    if (this.bad) return;
    this.bad = true;
    this.field = field;
    this.errOff = this.off;
    this.reason = reason;
    this.a = a;
    this.b = b;
  }

  at(i: i32): u8 {
    return load<u8>(this.p + <usize>i);
  }

  // uvarint is Go's binary.Uvarint plus abi.Decoder's minimality check:
  // truncation, an 11th byte, or a 10th byte above 1 is "bad varint"; a
  // multi-byte encoding ending in 0x00 is "non-minimal varint"; the error
  // offset is the varint's first byte.
  uvarint(field: string): u64 {
    if (this.bad) return 0;
    let x: u64 = 0;
    let s: u64 = 0;
    for (let i = 0; i < 10 && this.off + i < this.n; i++) {
      const c = this.at(this.off + i);
      if (c < 0x80) {
        if (i == 9 && c > 1) {
          this.fail(field, R_BAD_VARINT, 0, 0);
          return 0;
        }
        if (i > 0 && c == 0) {
          this.fail(field, R_NON_MINIMAL, 0, 0);
          return 0;
        }
        this.off += i + 1;
        return x | (<u64>c << s);
      }
      x |= <u64>(c & 0x7f) << s;
      s += 7;
    }
    // Truncated, or an 11th byte would be needed.
    this.fail(field, R_BAD_VARINT, 0, 0);
    return 0;
  }

  // string reads a length-prefixed UTF-8 string of at most max bytes into f.
  // The bound is checked before truncation, UTF-8 last (offset after the
  // string), as abi.Decoder.String does.
  string(field: string, max: u64, f: Field): void {
    f.off = 0;
    f.len = 0;
    const n = this.uvarint(field);
    if (this.bad) return;
    if (n > max) {
      this.fail(field, R_LENGTH_BOUND, n, max);
      return;
    }
    if (n > <u64>(this.n - this.off)) {
      this.fail(field, R_TRUNCATED, 0, 0);
      return;
    }
    f.off = this.off;
    f.len = <i32>n;
    this.off += <i32>n;
    if (f.len > 0 && !validUTF8(this.p + <usize>f.off, f.len)) {
      this.fail(field, R_NOT_UTF8, 0, 0);
    }
  }

  // count reads a list length of at most max items, each at least a byte.
  count(field: string, max: u64): i32 {
    const n = this.uvarint(field);
    if (this.bad) return 0;
    if (n > max) {
      this.fail(field, R_ITEMS_BOUND, n, max);
      return 0;
    }
    if (n > <u64>(this.n - this.off)) {
      this.fail(field, R_COUNT_REMAINING, 0, 0);
      return 0;
    }
    return <i32>n;
  }

  tag(want: u8): void {
    if (this.bad) return;
    if (this.off >= this.n) {
      this.fail("tag", R_TRUNCATED, 0, 0);
      return;
    }
    const t = this.at(this.off);
    if (t != want) {
      this.fail("tag", R_TAG, <u64>t, <u64>want);
      return;
    }
    this.off++;
  }

  // finish reports trailing bytes; it returns whether the request is valid.
  finish(): bool {
    if (!this.bad && this.off != this.n) this.fail("message", R_TRAILING, 0, 0);
    return !this.bad;
  }

  // appendDetail appends abi.DecodeError's text for the violation.
  appendDetail(w: Buf): void {
    w.ascii("abi: malformed message: field ");
    w.ascii(this.field);
    w.ascii(" at byte ");
    w.decimal(<u64>this.errOff);
    w.ascii(": ");
    switch (this.reason) {
      case R_BAD_VARINT:
        w.ascii("bad varint");
        break;
      case R_NON_MINIMAL:
        w.ascii("non-minimal varint");
        break;
      case R_LENGTH_BOUND:
        w.ascii("length ");
        w.decimal(this.a);
        w.ascii(" exceeds bound ");
        w.decimal(this.b);
        break;
      case R_TRUNCATED:
        w.ascii("truncated");
        break;
      case R_NOT_UTF8:
        w.ascii("not UTF-8");
        break;
      case R_ITEMS_BOUND:
        w.decimal(this.a);
        w.ascii(" items exceed bound ");
        w.decimal(this.b);
        break;
      case R_COUNT_REMAINING:
        w.ascii("count exceeds remaining input");
        break;
      case R_TAG:
        w.ascii("message tag ");
        w.decimal(this.a);
        w.ascii(", want ");
        w.decimal(this.b);
        break;
      case R_TRAILING:
        w.ascii("trailing bytes");
        break;
      default:
        w.ascii("message exceeds MaxMessageBytes");
    }
  }
}

// RateSelectRequest (tag 9): route string(1024), method string(128),
// principal_tier, api_key_plan, client_ip_class string(128) each, attrs
// list(64) of { name string(128), value string(1024) }. Attributes are
// validated and not kept: this policy does not select on them.
export class RateSelectRequest {
  route: Field = new Field();
  method: Field = new Field();
  principalTier: Field = new Field();
  apiKeyPlan: Field = new Field();
  clientIPClass: Field = new Field();
  private scratch: Field = new Field();

  decode(d: Decoder): bool {
    d.tag(TAG_RATE_SELECT_REQUEST);
    d.string("route", MAX_VALUE_BYTES, this.route);
    d.string("method", MAX_NAME_BYTES, this.method);
    d.string("principal_tier", MAX_NAME_BYTES, this.principalTier);
    d.string("api_key_plan", MAX_NAME_BYTES, this.apiKeyPlan);
    d.string("client_ip_class", MAX_NAME_BYTES, this.clientIPClass);
    const n = d.count("attrs", MAX_LIST_ITEMS);
    for (let i = 0; i < n; i++) {
      d.string("attrs.name", MAX_NAME_BYTES, this.scratch);
      d.string("attrs.value", MAX_VALUE_BYTES, this.scratch);
    }
    return d.finish();
  }
}

// validUTF8 is Go's utf8.Valid: well-formed UTF-8 with no overlong forms,
// no surrogates (U+D800–U+DFFF) and nothing above U+10FFFF.
export function validUTF8(p: usize, n: i32): bool {
  let i = 0;
  while (i < n) {
    const c = load<u8>(p + <usize>i);
    if (c < 0x80) {
      i++;
      continue;
    }
    let need = 0;
    let lo: u8 = 0x80;
    let hi: u8 = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      need = 1;
    } else if (c == 0xe0) {
      need = 2;
      lo = 0xa0;
    } else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef) {
      need = 2;
    } else if (c == 0xed) {
      need = 2;
      hi = 0x9f;
    } else if (c == 0xf0) {
      need = 3;
      lo = 0x90;
    } else if (c >= 0xf1 && c <= 0xf3) {
      need = 3;
    } else if (c == 0xf4) {
      need = 3;
      hi = 0x8f;
    } else {
      return false;
    }
    if (n - i - 1 < need) return false;
    const c1 = load<u8>(p + <usize>(i + 1));
    if (c1 < lo || c1 > hi) return false;
    for (let k = 2; k <= need; k++) {
      const ck = load<u8>(p + <usize>(i + k));
      if (ck < 0x80 || ck > 0xbf) return false;
    }
    i += need + 1;
  }
  return true;
}

// appendErrorFrame appends a non-OK frame with an ASCII detail of at most
// MAX_DETAIL_BYTES (the guest's own constant texts).
export function appendErrorFrame(w: Buf, code: u8, detail: string): void {
  assert(detail.length <= MAX_DETAIL_BYTES);
  w.byte(code);
  w.string(detail);
}

// appendDecodeErrorFrame appends an invalid-request frame carrying d's
// violation. The detail (at most ~100 ASCII bytes) is written after a
// one-byte length placeholder, then bounded to MAX_DETAIL_BYTES; ASCII has
// no rune boundaries to respect, so truncation is abi's too.
export function appendDecodeErrorFrame(w: Buf, d: Decoder): void {
  w.byte(CODE_INVALID_REQUEST);
  const at = w.len;
  w.byte(0);
  d.appendDetail(w);
  let n = w.len - at - 1;
  if (n > MAX_DETAIL_BYTES) {
    n = MAX_DETAIL_BYTES;
    w.len = at + 1 + n;
  }
  if (n < 0x80) {
    store<u8>(w.ptr + <usize>at, <u8>n);
    return;
  }
  // Two length bytes: shift the detail right by one.
  w.reserve(1);
  memory.copy(w.ptr + <usize>(at + 2), w.ptr + <usize>(at + 1), <usize>n);
  store<u8>(w.ptr + <usize>at, <u8>(n & 0x7f) | 0x80);
  store<u8>(w.ptr + <usize>(at + 1), <u8>(n >> 7));
  w.len++;
}

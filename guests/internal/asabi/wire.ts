// The caphost ABI v1 binary encoding (abi/ABI.md §4–§5) by hand, shared by
// the AssemblyScript guests: guests/rate-policy-as (Extism flavour) and
// guests/codec-as (native flavour), which import it by relative path
// ("../../internal/asabi/wire") and keep only their own messages in their
// own assembly/wire.ts. It owns the bounds and status codes, the reusable
// byte buffer (Buf), the request decoder (Decoder: uvarint, uint32, bytes,
// string, count, tag, trailing bytes, and abi.DecodeError's detail), Go's
// utf8.Valid, and the writers of error frames.
//
// It must accept exactly what the Go decoder (abi.Decoder, through the
// messages' Unmarshal) accepts and refuse everything else with the same
// text, because a refusal is an invalid-request frame whose detail the host
// compares byte for byte with the Go twins' (self-test vectors,
// conformance, the twin tests). So the checks run in the Go decoder's
// order, the first violation sticks, and the detail is abi.DecodeError's:
// "abi: malformed message: field F at byte N: REASON". A fix here reaches
// both guests; rebuild and test both (`make guests`, plugins/extism's
// TestASRefusesMalformedLikeGo and FuzzASRateSelect, guests/codec's
// TestTwinDifferential and FuzzCodecTwins).
//
// Nothing here allocates on the call path: requests are read in place and
// answers written into buffers allocated once and reused (see Buf), so an
// instance's memory stays flat however many calls it serves. It imports
// nothing, so it builds with either guest's asc and runtime.

// Bounds of the encoding (abi/wire.go, abi/messages.go).
export const MAX_MESSAGE_BYTES: u64 = 1 << 20;
export const MAX_PAYLOAD_BYTES: u64 = (1 << 20) - 1024;
export const MAX_LIST_ITEMS: u64 = 64;
export const MAX_NAME_BYTES: u64 = 128;
export const MAX_VALUE_BYTES: u64 = 1024;
export const MAX_DETAIL_BYTES: i32 = 256;

// Status codes (abi/status.go).
export const CODE_OK: u8 = 0;
export const CODE_SCHEMA_MISMATCH: u8 = 1;
export const CODE_CORRUPT: u8 = 2;
export const CODE_INVALID_REQUEST: u8 = 3;
export const CODE_NOT_FOUND: u8 = 4;
export const CODE_UNSUPPORTED: u8 = 5;

// Buf is a growable byte buffer outside the managed heap (heap.alloc): the
// collector never scans or moves it; it is allocated once and reused, so a
// call allocates nothing, and it only grows, geometrically, for the largest
// request or answer seen so far.
export class Buf {
  ptr: usize = 0;
  len: i32 = 0;
  cap: i32 = 0;

  constructor(cap: i32) {
    this.ptr = heap.alloc(<usize>cap);
    this.cap = cap;
  }

  @inline reset(): void {
    this.len = 0;
  }

  // reserve makes room for n more bytes (ptr may move).
  reserve(n: i32): void {
    const need = this.len + n;
    if (need <= this.cap) return;
    let c = this.cap * 2;
    while (c < need) c *= 2;
    this.ptr = heap.realloc(this.ptr, <usize>c);
    this.cap = c;
  }

  @inline byte(b: u8): void {
    this.reserve(1);
    store<u8>(this.ptr + <usize>this.len, b);
    this.len++;
  }

  // bytes appends the n bytes at p.
  bytes(p: usize, n: i32): void {
    this.reserve(n);
    memory.copy(this.ptr + <usize>this.len, p, <usize>n);
    this.len += n;
  }

  // ascii appends s, which must be ASCII (every constant text the guests
  // write is).
  ascii(s: string): void {
    const n = s.length;
    this.reserve(n);
    const src = changetype<usize>(s);
    const dst = this.ptr + <usize>this.len;
    for (let i = 0; i < n; i++) {
      store<u8>(dst + <usize>i, <u8>load<u16>(src + (<usize>i << 1)));
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

  // decimal appends v in base 10, as Go's %d and strconv.AppendUint do.
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

  // int appends v in base 10, as strconv.AppendInt does.
  int(v: i64): void {
    if (v < 0) {
      this.byte(0x2d); // '-'
      this.decimal(<u64>0 - <u64>v); // -(1<<63) too
      return;
    }
    this.decimal(<u64>v);
  }

  // string appends an ABI string: uvarint length, then the ASCII s.
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
const R_UINT32 = 11; // "value exceeds uint32"

// A string or bytes field decoded in place: its offset and length in the
// request.
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

  // reset starts reading the n bytes at p; abi.Decoder refuses a message
  // over MaxMessageBytes before reading a byte of it.
  reset(p: usize, n: i32): void {
    this.p = p;
    this.n = n;
    this.off = 0;
    this.bad = false;
    this.field = "";
    if (<u64>n > MAX_MESSAGE_BYTES) this.fail("message", R_TOO_LARGE, 0, 0);
  }

  // tooLarge records that refusal for a request the guest never loads
  // (too large to be one): after reset(0, 0), as if its n bytes were read.
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

  @inline at(i: i32): u8 {
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

  // uint32 is abi.Decoder.Uint32: a uvarint below 2^32, refused at the
  // offset after it.
  uint32(field: string): u32 {
    const v = this.uvarint(field);
    if (v > 0xffffffff) {
      this.fail(field, R_UINT32, 0, 0);
      return 0;
    }
    return <u32>v;
  }

  // bytes reads a length-prefixed byte string of at most max bytes into f:
  // the bound is checked before truncation, both at the offset after the
  // length, as abi.Decoder.Bytes does.
  bytes(field: string, max: u64, f: Field): void {
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
  }

  // string is bytes that must be UTF-8, checked last (at the offset after
  // the string), as abi.Decoder.String does.
  string(field: string, max: u64, f: Field): void {
    this.bytes(field, max, f);
    if (!this.bad && f.len > 0 && !validUTF8(this.p + <usize>f.off, f.len)) {
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
      case R_UINT32:
        w.ascii("value exceeds uint32");
        break;
      default:
        w.ascii("message exceeds MaxMessageBytes");
    }
  }
}

// validUTF8 is Go's utf8.Valid: well-formed UTF-8 with no overlong forms,
// no surrogates (U+D800–U+DFFF) and nothing above U+10FFFF.
export function validUTF8(p: usize, n: i32): bool {
  let i = 0;
  while (i < n) {
    if (load<u8>(p + <usize>i) < 0x80) {
      i++;
      continue;
    }
    const size = runeSize(p + <usize>i, n - i);
    if (size == 0) return false;
    i += size;
  }
  return true;
}

// runeSize is the length of the UTF-8 encoding of one rune at p (at most
// avail bytes there, the first not ASCII), or 0 where Go's utf8.DecodeRune
// answers RuneError of width 1: a byte that starts no encoding, an encoding
// cut short, an overlong form, a surrogate or a rune above U+10FFFF.
export function runeSize(p: usize, avail: i32): i32 {
  const c = load<u8>(p);
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
    return 0;
  }
  if (avail - 1 < need) return 0;
  const c1 = load<u8>(p + 1);
  if (c1 < lo || c1 > hi) return 0;
  for (let k = 2; k <= need; k++) {
    const ck = load<u8>(p + <usize>k);
    if (ck < 0x80 || ck > 0xbf) return 0;
  }
  return need + 1;
}

// appendErrorFrame appends a non-OK frame whose detail is the text in
// detail, cut to MAX_DETAIL_BYTES on a rune boundary as
// abi.AppendErrorFrame does (a detail may quote a name, which may be any
// UTF-8).
export function appendErrorFrame(w: Buf, code: u8, detail: Buf): void {
  let n = detail.len;
  if (n > MAX_DETAIL_BYTES) {
    n = MAX_DETAIL_BYTES;
    // Back to the start of a rune: a byte that is not 0b10xxxxxx.
    while (n > 0 && (load<u8>(detail.ptr + <usize>n) & 0xc0) == 0x80) n--;
  }
  w.byte(code);
  w.uvarint(<u64>n);
  w.bytes(detail.ptr, n);
}

// appendTextFrame appends a non-OK frame with a constant ASCII detail,
// which must be at most MAX_DETAIL_BYTES (the guests' own short texts:
// nothing to cut).
export function appendTextFrame(w: Buf, code: u8, detail: string): void {
  w.byte(code);
  w.string(detail);
}

// appendDecodeErrorFrame appends an invalid-request frame carrying d's
// violation, with no second buffer: the detail (at most ~100 ASCII bytes)
// is written after a one-byte length placeholder, then bounded to
// MAX_DETAIL_BYTES; ASCII has no rune boundaries to respect, so the frame
// is appendErrorFrame's for the same detail.
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

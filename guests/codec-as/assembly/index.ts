// codec-as is the reference codec guest (guests/codec) written in
// AssemblyScript for the native flavour: caphost's own ABI on wazero
// (plugins), the ABI the Go guest speaks through abi/guest, with no Extism
// kernel and no imports at all. It declares the same schemas and must
// answer every request byte for byte as the Go guest does — the same
// response frames, status codes and details, byte offsets included — so it
// describes itself as module "codec" and `make guests` bundles the Go
// guest's self-test vectors (guests/codec/selftest.json) into it. Any
// change to guests/codec (a schema, a check, a text) must be made here too;
// guests/codec/twin_test.go compares the two modules. The ABI encoding by
// hand is guests/internal/asabi/wire.ts, shared with guests/rate-policy-as
// (a change there must keep both guests' answers); this guest's requests
// are decoded in wire.ts.
//
// Why a twin: the cache decodes a payload through the codec on every L2
// hit, and a hand-written reader without a Go runtime in the module costs
// a fraction of the Go guest's call (plugins' BenchmarkCodecGuestProduct1K).
//
// The glue below is abi/guest's (wasm.go, guest.go) by hand: caphost_alloc
// hands out one request region, every export answers with ptr << 32 | len
// of a response frame valid until the next call, and the SDK's answers for
// a request outside the region, a malformed request, an unknown schema, an
// unreadable version and the kinds this module does not implement are
// reproduced here.
//
// Build: `make guests` (npm ci, then asc with asconfig.json's release
// target, then selftestpack).

import {
  Buf, Decoder, Field, MAX_MESSAGE_BYTES,
  CODE_OK, CODE_SCHEMA_MISMATCH, CODE_CORRUPT, CODE_INVALID_REQUEST, CODE_NOT_FOUND, CODE_UNSUPPORTED,
  appendErrorFrame, appendTextFrame,
} from "../../internal/asabi/wire";
import {
  CodecRequest, TAG_CODEC_ENCODE_RESPONSE, TAG_CODEC_DECODE_RESPONSE, decodeCanonicalizeRequest, decodeAdmitRequest,
} from "./wire";
import { DESCRIPTION, SCHEMA_IDS, writeVersion, read, appendReadError, READ_FAILED, READ_SAME } from "./schemas";

// ABI v1.1, packed major << 16 | minor.
const ABI_VERSION: i32 = (1 << 16) | 1;

// The request region caphost_alloc handed out: inLen is the size asked
// for when it was allocated, the most a request may use (as the Go SDK's
// glue.in, whose length is its capacity).
let inPtr: usize = 0;
let inLen: u32 = 0;

// Reused across calls (an instance serves one call at a time): the
// response frame, a payload written, an error's text, the decoder state.
const out = new Buf(4096);
const value = new Buf(4096);
const detail = new Buf(512);
const decoder = new Decoder();
const request = new CodecRequest();
const scratch = new Field();

// describeFrame is the describe answer, built once.
const describeFrame = new Buf(1024);
describeFrame.byte(CODE_OK);
describeFrame.ascii(DESCRIPTION);

// abortHook is AssemblyScript's failure hook (a failed bounds check or
// assertion, memory exhausted), installed with --use abort=...: the call
// traps, which the host reports as a guest failure (class trap), never as
// an answer, and the module imports nothing.
function abortHook(message: string | null, fileName: string | null, line: u32, column: u32): void {
  unreachable();
}

export function caphost_abi_version(): i32 {
  return ABI_VERSION;
}

// caphost_alloc returns a region of at least size bytes that stays put
// until the next caphost_alloc; 0 for more than a message may hold.
export function caphost_alloc(size: u32): u32 {
  if (<u64>size > MAX_MESSAGE_BYTES) return 0;
  if (size == 0) size = 1;
  if (inLen < size) {
    if (inPtr != 0) heap.free(inPtr);
    inPtr = heap.alloc(<usize>size);
    inLen = size;
  }
  return <u32>inPtr;
}

// answer is the packed frame of w.
@inline function answer(w: Buf): u64 {
  return (<u64>w.ptr << 32) | <u64>w.len;
}

// begin starts an answer: the request must sit in the caphost_alloc region
// (the guest reads no other host-supplied address), else the answer is the
// SDK's refusal, and begin returns false.
function begin(ptr: u32, n: u32): bool {
  out.reset();
  if (n > 0 && (inLen == 0 || <usize>ptr != inPtr || n > inLen)) {
    appendTextFrame(out, CODE_INVALID_REQUEST, "request outside the caphost_alloc region");
    return false;
  }
  decoder.reset(inPtr, <i32>n);
  return true;
}

// malformed answers a request the decoder refused, with abi's text.
function malformed(): u64 {
  detail.reset();
  decoder.appendDetail(detail);
  appendErrorFrame(out, CODE_INVALID_REQUEST, detail);
  return answer(out);
}

// schema is the index of the requested schema, or -1.
function schema(f: Field): i32 {
  const p = inPtr + <usize>f.off;
  for (let i = 0; i < SCHEMA_IDS.length; i++) {
    const id = unchecked(SCHEMA_IDS[i]);
    if (id.length != f.len) continue;
    const s = changetype<usize>(id);
    let k = 0;
    while (k < f.len && <u16>load<u8>(p + <usize>k) == load<u16>(s + (<usize>k << 1))) k++;
    if (k == f.len) return i;
  }
  return -1;
}

// refuse answers the schema's refusal of a value or payload: prefix, then
// the reader's text.
function refuse(code: u8, prefix: string, version: u32): u64 {
  detail.reset();
  if (version > 0) {
    detail.byte(0x76); // 'v'
    detail.decimal(<u64>version);
  }
  detail.ascii(prefix);
  appendReadError(detail);
  appendErrorFrame(out, code, detail);
  return answer(out);
}

// appendAnswer appends the payload or value read answers: the request's
// own bytes when they are already canonical, else what was written.
function appendAnswer(result: i32): void {
  const f = request.payload;
  if (result == READ_SAME) {
    out.uvarint(<u64>f.len);
    out.bytes(inPtr + <usize>f.off, f.len);
  } else {
    out.uvarint(<u64>value.len);
    out.bytes(value.ptr, value.len);
  }
}

export function caphost_describe(ptr: u32, n: u32): u64 {
  if (!begin(ptr, n)) return answer(out);
  return answer(describeFrame);
}

// caphost_codec_encode validates an interchange value and answers its
// canonical payload at the schema's write version.
export function caphost_codec_encode(ptr: u32, n: u32): u64 {
  if (!begin(ptr, n)) return answer(out);
  if (!request.decodeEncode(decoder)) return malformed();
  const i = schema(request.schema);
  if (i < 0) {
    appendTextFrame(out, CODE_NOT_FOUND, "unknown schema");
    return answer(out);
  }
  const write = writeVersion(i);
  value.reset();
  const result = read(i, write, inPtr + <usize>request.payload.off, request.payload.len, value);
  if (result == READ_FAILED) return refuse(CODE_INVALID_REQUEST, "value: ", 0);
  out.byte(CODE_OK);
  out.byte(TAG_CODEC_ENCODE_RESPONSE);
  out.uvarint(<u64>write);
  appendAnswer(result);
  return answer(out);
}

// caphost_codec_decode reads a payload of any readable version and answers
// the current interchange value.
export function caphost_codec_decode(ptr: u32, n: u32): u64 {
  if (!begin(ptr, n)) return answer(out);
  if (!request.decodeDecode(decoder)) return malformed();
  const i = schema(request.schema);
  if (i < 0) {
    appendTextFrame(out, CODE_NOT_FOUND, "unknown schema");
    return answer(out);
  }
  const version = request.storedVersion;
  if (version < 1 || version > writeVersion(i)) {
    detail.reset();
    detail.ascii("stored version ");
    detail.decimal(<u64>version);
    detail.ascii(" is not readable");
    appendErrorFrame(out, CODE_SCHEMA_MISMATCH, detail);
    return answer(out);
  }
  value.reset();
  const result = read(i, version, inPtr + <usize>request.payload.off, request.payload.len, value);
  if (result == READ_FAILED) return refuse(CODE_CORRUPT, " payload: ", version);
  out.byte(CODE_OK);
  out.byte(TAG_CODEC_DECODE_RESPONSE);
  appendAnswer(result);
  return answer(out);
}

// The exports of the kinds this module does not declare answer as the Go
// SDK's do (the host never calls them: it knows the kinds from describe).

export function caphost_cache_canonicalize(ptr: u32, n: u32): u64 {
  if (!begin(ptr, n)) return answer(out);
  if (!decodeCanonicalizeRequest(decoder, scratch)) return malformed();
  appendTextFrame(out, CODE_NOT_FOUND, "unknown region");
  return answer(out);
}

export function caphost_cache_admit(ptr: u32, n: u32): u64 {
  if (!begin(ptr, n)) return answer(out);
  if (!decodeAdmitRequest(decoder, scratch)) return malformed();
  appendTextFrame(out, CODE_NOT_FOUND, "unknown region");
  return answer(out);
}

export function caphost_rate_select(ptr: u32, n: u32): u64 {
  if (!begin(ptr, n)) return answer(out);
  appendTextFrame(out, CODE_UNSUPPORTED, "module has no rate policies");
  return answer(out);
}

export function caphost_render(ptr: u32, n: u32): u64 {
  if (!begin(ptr, n)) return answer(out);
  appendTextFrame(out, CODE_UNSUPPORTED, "module has no renderer");
  return answer(out);
}

// rate-policy-as is the reference rate-policy guest written in
// AssemblyScript for the Extism flavour (plugins/extism), built with the
// Extism AssemblyScript PDK (@extism/as-pdk). It declares the same policies
// and gives the same answers, byte for byte, as its Go twins
// guests/rate-policy (native) and guests/rate-policy-extism (Go PDK), so it
// describes itself as module "rate-policy" and `make guests` bundles the
// native twin's self-test vectors (guests/rate-policy/selftest.json) into
// it.
//
// Extism's calling convention for ABI v1: an export caphost_<name> takes no
// parameters and returns an i32 (0); the request is the Extism input and
// the response frame the Extism output. caphost_abi_version returns the
// packed version. The caphost_v1 host functions are the Extism user
// functions caphost_log(level, block) and caphost_count(block).
//
// The ABI encoding by hand is guests/internal/asabi/wire.ts, shared with
// guests/codec-as; this guest's own message is in wire.ts, the policy
// table and the response in tiers.ts.
//
// Build: `make guests` (npm ci, then asc with asconfig.json's release
// target, then selftestpack).

import {
  alloc,
  free,
  input_length,
  input_load_u64,
  input_load_u8,
  output_set,
  store_u64,
  store_u8,
} from "@extism/as-pdk/lib/env";

import {
  Buf, Decoder, MAX_MESSAGE_BYTES, CODE_INVALID_REQUEST, CODE_OK, appendTextFrame, appendDecodeErrorFrame,
} from "../../internal/asabi/wire";
import { RateSelectRequest } from "./wire";
import { appendDescription, appendSelect } from "./tiers";

@external("extism:host/user", "caphost_log")
declare function hostLog(level: u64, block: u64): void;

@external("extism:host/user", "caphost_count")
declare function hostCount(block: u64): void;

// ABI v1.1, packed major << 16 | minor (the host serves any minor up to its own).
const ABI_VERSION: i32 = (1 << 16) | 1;

// LOG_DEBUG is abi.LogDebug.
const LOG_DEBUG: u64 = 0;

// Reused across calls (an instance serves one call at a time): the request
// as loaded from the Extism input, the response frame, the decoder state.
const input = new Buf(4096);
const output = new Buf(4096);
const decoder = new Decoder();
const request = new RateSelectRequest();

// describeFrame is the describe answer, built once.
const describeFrame = new Buf(2048);
describeFrame.byte(CODE_OK);
appendDescription(describeFrame);

// abort is AssemblyScript's failure hook (bounds checks, out of memory),
// installed with --use abort=...: the call traps, which the host reports as
// a guest failure (class trap) and never as an answer. It imports nothing,
// so the module needs no env.abort from the host.
function abortHook(message: string | null, fileName: string | null, line: u32, column: u32): void {
  unreachable();
}

export function caphost_abi_version(): i32 {
  return ABI_VERSION;
}

export function caphost_describe(): i32 {
  send(describeFrame);
  // The host functions are exercised where they cost nothing on the hot
  // path: once per describe, and on refused requests (as the Go twin does).
  callHost(true, "rate-policy-as described");
  return 0;
}

export function caphost_rate_select(): i32 {
  output.reset();
  const n = input_length();
  if (n > MAX_MESSAGE_BYTES) {
    // abi.Decoder refuses this before reading a byte; so does this guest.
    decoder.reset(0, 0);
    decoder.tooLarge();
    appendDecodeErrorFrame(output, decoder);
  } else {
    loadInput(<i32>n);
    decoder.reset(input.ptr, input.len);
    if (!request.decode(decoder)) {
      appendDecodeErrorFrame(output, decoder);
    } else if (!appendSelect(output, decoder, request.route, request.method, request.principalTier, request.apiKeyPlan)) {
      appendTextFrame(output, CODE_INVALID_REQUEST, "unknown method");
    }
  }
  send(output);
  if (load<u8>(output.ptr) == CODE_INVALID_REQUEST) callHost(false, "rate-policy.invalid-request");
  return 0;
}

// loadInput copies the Extism input (n bytes) into the input buffer, eight bytes
// per kernel call.
function loadInput(n: i32): void {
  input.reset();
  input.reserve(n);
  let i = 0;
  for (; i + 8 <= n; i += 8) store<u64>(input.ptr + <usize>i, input_load_u64(<u64>i));
  for (; i < n; i++) store<u8>(input.ptr + <usize>i, input_load_u8(<u64>i));
  input.len = n;
}

// send copies b into a fresh Extism memory block and makes it the output
// (the host frees the call's blocks).
function send(b: Buf): void {
  const block = alloc(<u64>b.len);
  let i = 0;
  for (; i + 8 <= b.len; i += 8) store_u64(block + <u64>i, load<u64>(b.ptr + <usize>i));
  for (; i < b.len; i++) store_u8(block + <u64>i, load<u8>(b.ptr + <usize>i));
  output_set(block, <u64>b.len);
}

// callHost sends an ASCII text to caphost_log (debug) or caphost_count
// through an Extism block it frees afterwards.
function callHost(isLog: bool, text: string): void {
  const n = text.length;
  const block = alloc(<u64>n);
  for (let i = 0; i < n; i++) store_u8(block + <u64>i, <u8>text.charCodeAt(i));
  if (isLog) {
    hostLog(LOG_DEBUG, block);
  } else {
    hostCount(block);
  }
  free(block);
}

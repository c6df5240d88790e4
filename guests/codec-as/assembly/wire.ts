// This guest's messages of the caphost ABI v1 binary encoding (abi/ABI.md
// §4–§5): the decoders of the requests it answers (the responses are
// written in index.ts). The encoding itself — bounds, status codes, Buf,
// Decoder, UTF-8, error frames — is guests/internal/asabi/wire.ts, shared
// with guests/rate-policy-as: each decoder here must accept exactly what
// its message's Unmarshal accepts and refuse everything else with the same
// detail, reading the fields in its order, because the twin's frames must
// equal the Go guest's byte for byte. Also decodeRune, the companion of
// asabi's runeSize that only this guest's JSON reader and writer need.
// Nothing here allocates on the call path: requests are decoded in place.

import { Decoder, Field, MAX_LIST_ITEMS, MAX_NAME_BYTES, MAX_PAYLOAD_BYTES, MAX_VALUE_BYTES } from "../../internal/asabi/wire";

// Message tags (abi/messages.go).
export const TAG_CODEC_ENCODE_REQUEST: u8 = 1;
export const TAG_CODEC_ENCODE_RESPONSE: u8 = 2;
export const TAG_CODEC_DECODE_REQUEST: u8 = 3;
export const TAG_CODEC_DECODE_RESPONSE: u8 = 4;
export const TAG_CANONICALIZE_REQUEST: u8 = 5;
export const TAG_ADMIT_REQUEST: u8 = 7;

// CodecRequest is a CodecEncodeRequest or a CodecDecodeRequest, decoded in
// place.
export class CodecRequest {
  schema: Field = new Field();
  storedVersion: u32 = 0; // decode only
  payload: Field = new Field(); // an encode's value or a decode's payload

  // decodeEncode reads a CodecEncodeRequest (tag 1): schema string(128),
  // value bytes(MaxPayloadBytes).
  decodeEncode(d: Decoder): bool {
    d.tag(TAG_CODEC_ENCODE_REQUEST);
    d.string("schema", MAX_NAME_BYTES, this.schema);
    d.bytes("value", MAX_PAYLOAD_BYTES, this.payload);
    return d.finish();
  }

  // decodeDecode reads a CodecDecodeRequest (tag 3): schema string(128),
  // stored_version u32, payload bytes(MaxPayloadBytes).
  decodeDecode(d: Decoder): bool {
    d.tag(TAG_CODEC_DECODE_REQUEST);
    d.string("schema", MAX_NAME_BYTES, this.schema);
    this.storedVersion = d.uint32("stored_version");
    d.bytes("payload", MAX_PAYLOAD_BYTES, this.payload);
    return d.finish();
  }
}

// CanonicalizeRequest (tag 5): region string(128), attrs list(64) of
// { name string(128), value string(1024) }. Only checked: this module
// declares no region, so every well-formed request is "unknown region".
export function decodeCanonicalizeRequest(d: Decoder, scratch: Field): bool {
  d.tag(TAG_CANONICALIZE_REQUEST);
  d.string("region", MAX_NAME_BYTES, scratch);
  const n = d.count("attrs", MAX_LIST_ITEMS);
  for (let i = 0; i < n; i++) {
    d.string("attrs.name", MAX_NAME_BYTES, scratch);
    d.string("attrs.value", MAX_VALUE_BYTES, scratch);
  }
  return d.finish();
}

// AdmitRequest (tag 7): region string(128), size_bytes uvarint, class
// string(128), cost_hint_us uvarint, load_latency_us uvarint. Only checked,
// as CanonicalizeRequest.
export function decodeAdmitRequest(d: Decoder, scratch: Field): bool {
  d.tag(TAG_ADMIT_REQUEST);
  d.string("region", MAX_NAME_BYTES, scratch);
  d.uvarint("size_bytes");
  d.string("class", MAX_NAME_BYTES, scratch);
  d.uvarint("cost_hint_us");
  d.uvarint("load_latency_us");
  return d.finish();
}

// decodeRune is the rune whose valid encoding of size bytes (asabi's
// runeSize) is at p.
export function decodeRune(p: usize, size: i32): i32 {
  const c = <i32>load<u8>(p);
  if (size == 1) return c;
  if (size == 2) return ((c & 0x1f) << 6) | (<i32>load<u8>(p + 1) & 0x3f);
  if (size == 3) {
    return ((c & 0x0f) << 12) | ((<i32>load<u8>(p + 1) & 0x3f) << 6) | (<i32>load<u8>(p + 2) & 0x3f);
  }
  return (
    ((c & 0x07) << 18) |
    ((<i32>load<u8>(p + 1) & 0x3f) << 12) |
    ((<i32>load<u8>(p + 2) & 0x3f) << 6) |
    (<i32>load<u8>(p + 3) & 0x3f)
  );
}

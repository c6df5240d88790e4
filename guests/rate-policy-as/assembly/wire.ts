// This guest's messages of the caphost ABI v1 binary encoding (abi/ABI.md
// §4–§5): the RateSelectRequest decoder (the RateSelectResponse is written
// by tiers.ts's appendSelect). The encoding itself — bounds, status codes,
// Buf, Decoder, UTF-8, error frames — is guests/internal/asabi/wire.ts,
// shared with guests/codec-as: RateSelectRequest.decode must accept exactly
// what abi.RateSelectRequest.Unmarshal accepts and refuse everything else
// with the same detail, reading the fields in its order. Nothing here
// allocates on the call path: the request is decoded in place.

import { Decoder, Field, MAX_LIST_ITEMS, MAX_NAME_BYTES, MAX_VALUE_BYTES } from "../../internal/asabi/wire";

// Message tags (abi/messages.go).
export const TAG_RATE_SELECT_REQUEST: u8 = 9;
export const TAG_RATE_SELECT_RESPONSE: u8 = 10;

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

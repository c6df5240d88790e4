// The product rate policy: the table and the selection of
// guests/internal/tiers (the Go twins' shared package), in AssemblyScript.
// Tiered token-bucket limits by API-key plan (free, pro, enterprise) and
// route class (read, write, search), plus a fixed-window guard for
// anonymous clients. A change here must be made there too: the Go tests in
// plugins/extism compare this guest's describe output byte for byte and its
// answers over an attribute matrix with the native guest's.

import { Buf, Decoder, Field, CODE_OK } from "../../internal/asabi/wire";
import { TAG_RATE_SELECT_RESPONSE } from "./wire";

// Every policy is declared at this revision, limits and bursts multiplied by
// it: tiers.Policies(REVISION). It is 1 (what the Go twins build by default)
// unless the build sets it, as `asc ... --use POLICY_REVISION=2` does for
// the hot-swap demo; like the native twin's -X=main.policyRevision=vN, a
// value outside 1..255 falls back to 1 so a bad flag never produces an
// invalid describe.
// @ts-ignore: POLICY_REVISION exists only when the build defines it.
const REVISION_FLAG: i64 = isDefined(POLICY_REVISION) ? <i64>POLICY_REVISION : 1;
const REVISION: u64 = REVISION_FLAG >= 1 && REVISION_FLAG <= 255 ? <u64>REVISION_FLAG : 1;

// plans and their per-minute limits per route class. Search is charged on
// the read bucket at a higher cost rather than getting a bucket of its own.
const PLANS: StaticArray<string> = ["free", "pro", "enterprise"];
const READ_LIMITS: StaticArray<u64> = [60, 600, 6000];
const WRITE_LIMITS: StaticArray<u64> = [10, 120, 1200];

// SEARCH_COST is what a search request costs on its plan's read bucket.
const SEARCH_COST: u64 = 5;

// appendDescription appends the describe JSON exactly as the Go twins'
// encoding/json writes abi.Description (field order, omitted zero fields):
// the host decodes it into the same declarations.
export function appendDescription(w: Buf): void {
  w.ascii('{"abi":{"major":1,"minor":1},"module":"rate-policy","kinds":["rate-policy"],"rate_policies":[');
  for (let p = 0; p < PLANS.length; p++) {
    for (let c = 0; c < 2; c++) {
      const limit = (c == 0 ? READ_LIMITS[p] : WRITE_LIMITS[p]) * REVISION;
      w.ascii('{"id":"');
      w.ascii(PLANS[p]);
      w.ascii(c == 0 ? ".read" : ".write");
      w.ascii('","revision":');
      w.decimal(REVISION);
      w.ascii(',"algorithm":"token-bucket","limit":');
      w.decimal(limit);
      w.ascii(',"window_ms":60000,"burst":');
      w.decimal((c == 0 ? READ_LIMITS[p] : WRITE_LIMITS[p]) / 4 * REVISION);
      w.ascii(',"maximum_cost":');
      w.decimal(c == 0 ? SEARCH_COST : 1);
      w.ascii(',"dimensions":["api-key"],"failure_mode":"fail-closed"},');
    }
  }
  w.ascii('{"id":"anonymous.ip","revision":');
  w.decimal(REVISION);
  w.ascii(',"algorithm":"fixed-window","limit":');
  w.decimal(30 * REVISION);
  w.ascii(',"window_ms":60000,"maximum_cost":1,"dimensions":["client-ip"],"failure_mode":"fail-closed"}]}');
}

// Route classes.
const CLASS_READ = 0;
const CLASS_WRITE = 1;
const CLASS_SEARCH = 2;

// equalBytes reports whether the field's bytes are exactly the ASCII s.
function equalBytes(d: Decoder, f: Field, s: string): bool {
  if (f.len != s.length) return false;
  for (let i = 0; i < f.len; i++) {
    if (<i32>d.at(f.off + i) != s.charCodeAt(i)) return false;
  }
  return true;
}

function hasPrefix(d: Decoder, f: Field, s: string): bool {
  if (f.len < s.length) return false;
  for (let i = 0; i < s.length; i++) {
    if (<i32>d.at(f.off + i) != s.charCodeAt(i)) return false;
  }
  return true;
}

// equalFoldMethod is Go's strings.EqualFold(method, m) for an upper-case
// ASCII method name m: ASCII letters match either case, and — Unicode
// simple folding, which Go applies — U+017F LATIN SMALL LETTER LONG S
// (UTF-8 C5 BF) matches S. No other rune folds to a letter of GET, HEAD,
// OPTIONS, POST, PUT, PATCH or DELETE (checked over every rune).
function equalFoldMethod(d: Decoder, f: Field, m: string): bool {
  let i = 0;
  let j = 0;
  while (i < f.len) {
    if (j == m.length) return false;
    const want = m.charCodeAt(j);
    let c = <i32>d.at(f.off + i);
    if (c < 0x80) {
      if (c >= 0x61 && c <= 0x7a) c -= 0x20;
      if (c != want) return false;
      i++;
    } else if (want == 0x53 && c == 0xc5 && i + 1 < f.len && d.at(f.off + i + 1) == 0xbf) {
      i += 2;
    } else {
      return false;
    }
    j++;
  }
  return j == m.length;
}

// routeClass classifies the request, -1 for an unknown method.
function routeClass(d: Decoder, method: Field, route: Field): i32 {
  if (equalFoldMethod(d, method, "GET") || equalFoldMethod(d, method, "HEAD") || equalFoldMethod(d, method, "OPTIONS")) {
    if (equalBytes(d, route, "/search") || hasPrefix(d, route, "/search/")) return CLASS_SEARCH;
    return CLASS_READ;
  }
  if (
    equalFoldMethod(d, method, "POST") ||
    equalFoldMethod(d, method, "PUT") ||
    equalFoldMethod(d, method, "PATCH") ||
    equalFoldMethod(d, method, "DELETE")
  ) {
    return CLASS_WRITE;
  }
  return -1;
}

// plan picks the API-key plan, else the principal tier; anything unknown is
// free (index 0) so a typo never grants a bigger budget.
function plan(d: Decoder, apiKeyPlan: Field, principalTier: Field): i32 {
  for (let i = 0; i < PLANS.length; i++) {
    if (equalBytes(d, apiKeyPlan, PLANS[i])) return i;
  }
  for (let i = 0; i < PLANS.length; i++) {
    if (equalBytes(d, principalTier, PLANS[i])) return i;
  }
  return 0;
}

// appendSelection appends one selection with a single dimension value.
function appendSelection(w: Buf, planName: string, bucket: string, dimension: string, cost: u64): void {
  w.uvarint(<u64>(planName.length + bucket.length));
  w.ascii(planName);
  w.ascii(bucket);
  w.uvarint(1);
  w.string(dimension);
  w.uvarint(cost);
}

// appendSelect appends the OK frame answering the request, or returns false
// (nothing written) for an unknown method. The dimension value names the
// host source that fills the api-key dimension: the key itself (""), else
// the principal, else (anonymous) the client IP; the guest never sees the
// values. Anonymous traffic is limited per client IP first, then on its
// plan's bucket keyed by that IP.
export function appendSelect(
  w: Buf,
  d: Decoder,
  route: Field,
  method: Field,
  principalTier: Field,
  apiKeyPlan: Field,
): bool {
  const cls = routeClass(d, method, route);
  if (cls < 0) return false;
  const name = PLANS[plan(d, apiKeyPlan, principalTier)];
  const bucket = cls == CLASS_WRITE ? ".write" : ".read";
  const cost: u64 = cls == CLASS_SEARCH ? SEARCH_COST : 1;
  w.byte(CODE_OK);
  w.byte(TAG_RATE_SELECT_RESPONSE);
  if (apiKeyPlan.len > 0) {
    w.uvarint(1);
    appendSelection(w, name, bucket, "", cost);
  } else if (principalTier.len > 0) {
    w.uvarint(1);
    appendSelection(w, name, bucket, "principal", cost);
  } else {
    w.uvarint(2);
    appendSelection(w, "anonymous", ".ip", "", 1);
    appendSelection(w, name, bucket, "client-ip", cost);
  }
  return true;
}

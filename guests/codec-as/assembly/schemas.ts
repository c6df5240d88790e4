// The codec's schemas, as guests/codec declares and reads them (main.go,
// schema.go, product.go, searchpage.go, profile.go): each stored version's
// members, the checks after reading and the canonical payload of the
// current form. The texts of every refusal are the Go guest's.
//
//   - "user-profile": write 2, readable 1 (full_name, no locale: upgraded
//     with locale "en") and 2 {id, name, email, locale}, all required;
//   - "product": write 2, readable 1 (price a decimal string, converted to
//     cents digit by digit) and 2 {id, name, price_cents, currency, tags?};
//   - "search-page": write 1 {query, page, ids}.

import { Buf } from "../../internal/asabi/wire";
import { Member, K_STRING, K_INT, K_STRINGS, readCanonical, isCanon, text, appendError } from "./scanner";
import { appendName, appendValue } from "./writer";

// The describe output (abi.Description as encoding/json writes it for the
// Go guest's guest.Module), byte for byte.
export const DESCRIPTION =
  '{"abi":{"major":1,"minor":1},"module":"codec","kinds":["codec"],"codecs":[' +
  '{"schema_id":"user-profile","write_version":2,"readable_versions":[1,2]},' +
  '{"schema_id":"product","write_version":2,"readable_versions":[1,2]},' +
  '{"schema_id":"search-page","write_version":1,"readable_versions":[1]}]}';

// The schemas, in declaration order (the SDK looks a schema up in it).
export const SCHEMA_IDS: StaticArray<string> = ["user-profile", "product", "search-page"];
const WRITE_VERSIONS: StaticArray<u32> = [2, 2, 1];

// writeVersion is schema i's write version; every version from 1 to it
// is readable.
export function writeVersion(i: i32): u32 {
  return unchecked(WRITE_VERSIONS[i]);
}

// What read answers: a refusal (its text in the scanner), the input itself
// (already the canonical payload of what it holds), or a payload written
// into the output buffer.
export const READ_FAILED = 0;
export const READ_SAME = 1;
export const READ_WRITTEN = 2;

// appendReadError appends the text of read's refusal.
export function appendReadError(w: Buf): void {
  appendError(w);
}

// user-profile

const profileID = new Member("id", K_STRING);
const profileName = new Member("name", K_STRING);
const profileEmail = new Member("email", K_STRING);
const profileLocale = new Member("locale", K_STRING);
const PROFILE_V2: StaticArray<Member> = [profileID, profileName, profileEmail, profileLocale];
const profileFullName = new Member("full_name", K_STRING);
const PROFILE_V1: StaticArray<Member> = [profileID, profileFullName, profileEmail];

// The locale of a profile stored before v2 had one, as UTF-8 (a span).
const DEFAULT_LOCALE = String.UTF8.encode("en");

function profileValid(): bool {
  if (profileID.len == 0 || profileName.len == 0 || profileEmail.len == 0 || profileLocale.len == 0) {
    return text("id, name, email and locale are required");
  }
  return true;
}

function readProfile(version: u32, p: usize, n: i32, out: Buf): i32 {
  if (version == 1) {
    // Upgraded: name from full_name, the default locale (never the v2
    // payload, so always written).
    if (!readCanonical(p, n, PROFILE_V1)) return READ_FAILED;
    profileName.ptr = profileFullName.ptr;
    profileName.len = profileFullName.len;
    profileLocale.ptr = changetype<usize>(DEFAULT_LOCALE);
    profileLocale.len = DEFAULT_LOCALE.byteLength;
    if (!profileValid()) return READ_FAILED;
    return writeMembers(out, PROFILE_V2);
  }
  if (!readCanonical(p, n, PROFILE_V2)) return READ_FAILED;
  if (!profileValid()) return READ_FAILED;
  return isCanon() ? READ_SAME : writeMembers(out, PROFILE_V2);
}

// product

const productID = new Member("id", K_STRING);
const productName = new Member("name", K_STRING);
const productPriceCents = new Member("price_cents", K_INT);
const productCurrency = new Member("currency", K_STRING);
const productTags = new Member("tags", K_STRINGS, true, 16);
const PRODUCT_V2: StaticArray<Member> = [productID, productName, productPriceCents, productCurrency, productTags];
const productPrice = new Member("price", K_STRING);
const PRODUCT_V1: StaticArray<Member> = [productID, productName, productPrice, productCurrency];

// The largest v1 price, 999999999999.99, so every v1 payload upgrades.
const MAX_PRICE_CENTS: i64 = 99_999_999_999_999;

function productValid(): bool {
  if (productID.len == 0 || productName.len == 0) return text("id and name must not be empty");
  const cents = productPriceCents.num;
  if (cents < 0 || cents > MAX_PRICE_CENTS) return text("price_cents must be 0-99999999999999");
  if (!isCurrency(productCurrency.ptr, productCurrency.len)) return text("currency must be 3 upper-case letters");
  return true;
}

// isCurrency: 3 letters A-Z (the shape of an ISO 4217 code).
function isCurrency(p: usize, n: i32): bool {
  if (n != 3) return false;
  for (let i = 0; i < 3; i++) {
    const c = load<u8>(p + <usize>i);
    if (c < 0x41 || c > 0x5a) return false;
  }
  return true;
}

function readProduct(version: u32, p: usize, n: i32, out: Buf): i32 {
  if (version == 1) {
    if (!readCanonical(p, n, PRODUCT_V1)) return READ_FAILED;
    if (!parseCents(productPrice.ptr, productPrice.len)) return READ_FAILED;
    productTags.count = 0; // v1 had no tags
    if (!productValid()) return READ_FAILED;
    return writeMembers(out, PRODUCT_V2);
  }
  if (!readCanonical(p, n, PRODUCT_V2)) return READ_FAILED;
  if (!productValid()) return READ_FAILED;
  return isCanon() ? READ_SAME : writeMembers(out, PRODUCT_V2);
}

// parseCents converts a v1 price, ^\d{1,12}(\.\d{1,2})?$, into
// productPriceCents digit by digit, exactly ("0.29" is 29, never 28).
function parseCents(p: usize, n: i32): bool {
  let dot = 0;
  while (dot < n && load<u8>(p + <usize>dot) != 0x2e) dot++;
  const units = dot;
  const frac = dot < n ? n - dot - 1 : -1; // -1: no dot
  if (!digits(p, units, 12) || (frac >= 0 && !digits(p + <usize>(dot + 1), frac, 2))) {
    return text("price must be a decimal of 1-12 digits and at most 2 decimals");
  }
  let cents: i64 = 0;
  for (let i = 0; i < units; i++) cents = cents * 10 + <i64>(load<u8>(p + <usize>i) - 0x30);
  for (let i = 0; i < 2; i++) {
    const d = i < frac ? <i64>(load<u8>(p + <usize>(dot + 1 + i)) - 0x30) : 0;
    cents = cents * 10 + d;
  }
  productPriceCents.num = cents;
  return true;
}

// digits: the n bytes at p are 1 to max ASCII digits.
function digits(p: usize, n: i32, max: i32): bool {
  if (n < 1 || n > max) return false;
  for (let i = 0; i < n; i++) {
    const c = load<u8>(p + <usize>i);
    if (c < 0x30 || c > 0x39) return false;
  }
  return true;
}

// search-page

const searchQuery = new Member("query", K_STRING);
const searchPage = new Member("page", K_INT);
const searchIDs = new Member("ids", K_STRINGS, false, 100);
const SEARCH_PAGE: StaticArray<Member> = [searchQuery, searchPage, searchIDs];

function searchPageValid(): bool {
  if (searchQuery.len == 0 || searchQuery.len > 256) return text("query must be 1-256 bytes");
  if (searchPage.num < 1 || searchPage.num > 9999) return text("page must be 1-9999");
  for (let i = 0; i < searchIDs.count; i++) {
    const n = searchIDs.itemLen(i);
    if (n == 0 || n > 64) return text("ids must be 1-64 bytes each");
  }
  return true;
}

function readSearchPage(p: usize, n: i32, out: Buf): i32 {
  if (!readCanonical(p, n, SEARCH_PAGE)) return READ_FAILED;
  if (!searchPageValid()) return READ_FAILED;
  return isCanon() ? READ_SAME : writeMembers(out, SEARCH_PAGE);
}

// writeMembers writes the canonical payload of ms's values: every member
// in order, an optional array only when it holds strings (Marshal's
// omitempty).
function writeMembers(out: Buf, ms: StaticArray<Member>): i32 {
  let first = true;
  for (let i = 0; i < ms.length; i++) {
    const m = unchecked(ms[i]);
    if (m.optional && m.count == 0) continue;
    appendName(out, first, m.name);
    appendValue(out, m);
    first = false;
  }
  out.byte(0x7d);
  return READ_WRITTEN;
}

// read reads the n bytes at p as schema i's stored version (1 to its write
// version; encode reads the interchange value as the write version). A
// payload written goes to out, a refusal's text to the scanner.
export function read(i: i32, version: u32, p: usize, n: i32, out: Buf): i32 {
  if (i == 0) return readProfile(version, p, n, out);
  if (i == 1) return readProduct(version, p, n, out);
  return readSearchPage(p, n, out);
}

// Package trust owns the integrity and authenticity checks for guest
// modules: sha256 pins, ed25519 key files and detached signature files. It
// needs no Wasm engine — it imports the standard library and the plugins'
// strict JSON decoder (plugins/strictjson) only — so the
// configuration loader, the CLI and the engine share one implementation.
//
// # Scheme (caphost-guest-signature-v1)
//
// The signed message is domain-separated so a signature can never be
// replayed as a signature over anything else:
//
//	"caphost-guest-signature-v1" || 0x00 || sha256(module bytes)
//
// and is signed with ed25519 (RFC 8032, pure). A signature travels as a
// detached file next to the module, `<module>.wasm.sig`, holding exactly one
// JSON object with exactly these string fields:
//
//	{"format":"caphost-guest-signature-v1","key":"<key id>","sha256":"<hex>","signature":"<base64>"}
//
// Decoding is strict: at most MaxSignatureFileBytes; exact, case-sensitive
// member names, no unknown, duplicate, missing, empty or null member, valid
// UTF-8 without lone surrogates, nothing after the object (the rules of
// plugins/strictjson); lower-case hex, standard base64 of exactly
// 64 bytes.
//
// Keys are PEM files: a public key is a `PUBLIC KEY` block (PKIX), a private
// key a `PRIVATE KEY` block (PKCS#8), both holding an ed25519 key. The key id
// is the first 16 hex digits of sha256 over the raw 32-byte public key. A
// private key file is refused when it has any group or other permission
// bit (0600 and 0400 are accepted).
//
// Verification order: the module's sha256 must equal the pin from
// configuration (ErrDigestMismatch); an absent signature is accepted only
// when signatures are not required (ErrUnsigned); the signature file must
// name the same digest (ErrDigestMismatch), a trusted key (ErrUnknownKey),
// and verify (ErrBadSignature). Error messages name key ids and digests,
// which are public, and never key material.
//
// Change here: the signature format (only by adding a new version next to
// v1), key-file handling and the error vocabulary. Where modules and keys
// are configured lives in package policy and host/config.
package trust

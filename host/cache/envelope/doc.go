// Package envelope owns the bytes of one stored cache value: the envelope
// v2 binary layout, its N-1 reader (v1), the bounds every decode obeys, the
// opt-in payload compression and the freshness judge. It is pure Go with no
// Redis in it; host/cache reads and writes these bytes, codec guests own
// what is inside Payload.
//
// # Layout (big-endian, no padding)
//
//	field             size   v2  v1   notes
//	magic             4      ✓   ✓    0xC5 'C' 'A' 'P'; 0xC5 'C' is never valid UTF-8,
//	                                  so no text or JSON value is mistaken for an envelope
//	envelope version  1      ✓   ✓    2 (written); 1 (read only, the migration format)
//	codec id length   1      ✓   ✓    1..Limits.MaxCodecIDBytes (≤ 255)
//	codec id          n      ✓   ✓    schema id, [A-Za-z0-9._:/@+-]
//	payload version   4      ✓   ✓    uint32, the codec's stored schema version
//	flags             1      ✓   ✓    bit0 negative, bit1 compressed,
//	                                  bit2 source revision present, bit3 soft expiry present
//	                                  (v2); v1 knows bit0 and bit1 only; other bits must be 0
//	source revision   8      ?   -    uint64, when bit2
//	written-at        8      ✓   ✓    epoch millis, < 2^53
//	soft-expires-at   8      ?   -    epoch millis, when bit3
//	hard-expires-at   8      ✓   ✓    epoch millis
//	payload length    4      ✓   ✓    bytes stored after the digest
//	decoded length    4      ?   ?    when compressed: the inflated size, declared up front
//	digest            16     ✓   ✓    SHA-256(every byte before the digest ‖ stored payload)[:16]
//	payload           len    ✓   ✓    raw, or raw DEFLATE (RFC 1951) when compressed
//
// Rules a decoder enforces (anything else is CORRUPT): written-at ≤
// soft-expires-at ≤ hard-expires-at; a negative entry has no payload and is
// not compressed; a compressed entry declares a non-zero decoded length; the
// payload length is exactly what follows the digest (no truncation, no
// trailing bytes).
//
// # Choices
//
// Source revision is an ordered uint64, not free bytes: the conditional put
// ONLY_IF_SOURCE_REVISION_NEWER needs an order, and a fixed 8-byte big-endian
// value compares correctly byte by byte inside a Redis Lua program (no
// 53-bit doubles, no locale-dependent string comparison). Sources with a row
// version, an LSN or a commit timestamp map onto it directly; an opaque ETag
// has no order and cannot use the newer-only intent anyway. Presence is a
// flag, so revision 0 and "no revision" stay distinct.
//
// The digest is SHA-256 truncated to 128 bits and covers the header as well
// as the payload, so a flipped expiry bit is caught, not only a flipped
// payload bit. It is integrity, not authenticity: anyone who can write the
// key can recompute it (authenticity would need a keyed MAC and a key in
// every reader; that would be a new envelope version). 128 bits make an
// undetected random corruption a 2^-128 event, at half the bytes of the full
// sum; a non-cryptographic hash such as xxhash would also catch random
// corruption but makes crafted collisions trivial.
//
// A Memo (what a host's lookups decode with) skips recomputing the digest
// of bytes whose digest it verified before, recognised by two 64-bit
// maphash sums of all of them under seeds drawn at random per Memo. The
// seeds never leave the process, so no collision can be aimed at them, and
// a random one is a 2^-128 event like the digest's; any changed byte is
// checked against the digest again.
//
// Compression is stdlib compress/flate (raw DEFLATE, level 6): no new
// dependency, no container header or checksum (the envelope has its own
// digest), and decoders that read into a buffer of the declared size. It is
// opt-in per write (Envelope.Compressed, see ShouldCompress); Encode keeps it
// only when it saves bytes and its ratio is within the limit, otherwise it
// stores the payload raw, so Encode never writes what Decode with the same
// Limits would refuse. Decode checks the declared decoded size against
// MaxPayloadBytes and against payload length × MaxCompressionRatio before it
// inflates a byte, allocates exactly the declared size, and stops inflating
// one byte past it. Never compress secrets together with attacker-controlled
// data in one payload (compression leaks their relation through the size).
//
// Byte identity: Decode → Encode reproduces the input exactly for every
// uncompressed v2 envelope and for every compressed one Encode wrote. DEFLATE
// has many encodings of one stream, so a compressed envelope written by
// another encoder re-encodes to the canonical form, which decodes to the
// same envelope. A v1 envelope re-encodes as v2 (the opportunistic
// migration rewrite).
//
// # Errors
//
// Every failure is an *Error with a Category from a closed set. CORRUPT
// (bad length, truncation, trailing bytes, digest mismatch, invalid flags or
// times, a broken DEFLATE stream), SCHEMA_MISMATCH (FutureVersion,
// RetiredVersion, UnknownEnvelope) and REJECTED_TOO_LARGE are never a miss:
// the cache layer maps them to CORRUPT, IncompatibleSchema and
// NOT_RECORDED_PROVIDER_POLICY. Match them with errors.Is against the code
// sentinels (ErrCorrupt, ErrSchemaMismatch, ErrTooLarge, ErrInvalid) or a
// Category, or errors.As to *Error. Error text carries the category and a
// fixed reason, never a byte of the value.
//
// # What may change here
//
// New categories' reasons, stricter limits, a faster compressor behind a new
// flag bit or envelope version. What must not: the v2 and v1 layouts above
// (stored entries outlive deploys), the digest definition, and the names of
// the categories and codes (metrics and alerts switch on them). A v3 writer
// ships only after every reader decodes v3 (readers read N and N-1).
package envelope

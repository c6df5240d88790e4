package envelope

// A tombstone is the other value a cache entry key may hold: the marker a
// per-key invalidation writes in place of the entry, for a short while, so
// that a load which began before the invalidation cannot store its (older)
// result afterwards: that load observed "absent" or the old entry, and its
// conditional write requires the entry to be still what it observed.
//
// Layout: 0xC5 'T' 'M' 'B', version 1, then a 16-byte random id that makes
// every invalidation's tombstone distinct. The magic differs from the
// envelope's, so Decode never mistakes a tombstone for an entry (it is
// UnknownEnvelope there); check IsTombstone before Decode.

// TombstoneLen is the length of a tombstone.
const TombstoneLen = 4 + 1 + 16

const tombstoneVersion = 1

var tombstoneMagic = [4]byte{0xC5, 'T', 'M', 'B'}

// NewTombstone returns the stored form of a tombstone with id (random per
// invalidation).
func NewTombstone(id [16]byte) []byte {
	out := make([]byte, 0, TombstoneLen)
	out = append(out, tombstoneMagic[:]...)
	out = append(out, tombstoneVersion)
	return append(out, id[:]...)
}

// IsTombstone reports whether b is exactly a tombstone.
func IsTombstone(b []byte) bool {
	return len(b) == TombstoneLen && [4]byte(b[:4]) == tombstoneMagic && b[4] == tombstoneVersion
}

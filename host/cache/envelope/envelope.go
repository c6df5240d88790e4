package envelope

import "time"

// Version is the envelope version Encode writes; Decode also reads
// PreviousVersion.
const (
	Version         = 2
	PreviousVersion = 1
)

// Envelope is one stored cache value. Times have millisecond precision on
// the wire: Encode truncates, Decode returns UTC.
type Envelope struct {
	// EnvelopeVersion is what Decode read (1 or 2). Encode ignores it and
	// always writes Version.
	EnvelopeVersion uint8
	// CodecID is the codec's schema id.
	CodecID string
	// PayloadVersion is the codec's stored schema version of Payload.
	PayloadVersion uint32
	// Negative marks an authoritative absence; it has no payload.
	Negative bool
	// Compressed: on Decode, whether the payload was stored compressed; on
	// Encode, a request to compress (kept only when it pays, see the package
	// documentation).
	Compressed bool
	// HasSourceRevision tells whether SourceRevision is set (0 is a valid
	// revision).
	HasSourceRevision bool
	// SourceRevision is the source's ordered revision of the value.
	SourceRevision uint64
	// WrittenAt is when the host wrote the entry, by the host's clock.
	WrittenAt time.Time
	// SoftExpiresAt starts the stale window; the zero time means none (the
	// entry is fresh until hard expiry).
	SoftExpiresAt time.Time
	// HardExpiresAt ends the entry's life regardless of the Redis key's TTL.
	HardExpiresAt time.Time
	// Payload is the decoded payload. For an uncompressed envelope Decode
	// returns a sub-slice of its input (no copy): do not modify it while the
	// input is in use.
	Payload []byte
}

// Freshness is the closed set of States an envelope can be in at an instant.
type Freshness uint8

const (
	_ Freshness = iota
	// Fresh: before the soft expiry (or before hard expiry when there is no
	// soft expiry).
	Fresh
	// Stale: at or after the soft expiry and before the hard expiry: usable
	// for stale-while-revalidate and stale-if-error.
	Stale
	// Expired: at or after the hard expiry: a miss, whatever the Redis TTL
	// of the key says.
	Expired
)

// String returns FRESH, STALE or EXPIRED.
func (f Freshness) String() string {
	switch f {
	case Fresh:
		return "FRESH"
	case Stale:
		return "STALE"
	case Expired:
		return "EXPIRED"
	}
	return "INVALID_FRESHNESS"
}

// State judges e at now, an instant from the host's injected clock, at the
// wire's millisecond precision. The envelope's own hard expiry is the judge:
// a key that Redis has not yet removed (clock or TTL drift, a late PX) is
// still Expired here.
func (e Envelope) State(now time.Time) Freshness {
	n := now.UnixMilli()
	if n >= e.HardExpiresAt.UnixMilli() {
		return Expired
	}
	if !e.SoftExpiresAt.IsZero() && n >= e.SoftExpiresAt.UnixMilli() {
		return Stale
	}
	return Fresh
}

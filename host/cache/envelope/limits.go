package envelope

// Hard caps on Limits: a Redis string holds at most 512 MiB, the codec id
// length is one byte, and DEFLATE cannot exceed a ratio of about 1032:1.
const (
	CapEncodedBytes     = 512 << 20
	CapPayloadBytes     = 512 << 20
	CapCodecIDBytes     = 255
	CapCompressionRatio = 1024
)

// Limits bound every Encode and Decode of one region. All fields are
// mandatory: the zero value is invalid, so a region cannot forget a bound.
type Limits struct {
	// MaxEncodedBytes bounds the whole envelope: Encode's output and
	// Decode's input. The bounded Redis read asks for MaxEncodedBytes+1
	// bytes, so a longer stored value is seen as oversized, not truncated.
	MaxEncodedBytes int
	// MaxCodecIDBytes bounds the codec (schema) id, at most 255.
	MaxCodecIDBytes int
	// MaxPayloadBytes bounds the decoded payload: what the codec sees after
	// any inflation.
	MaxPayloadBytes int
	// MaxCompressionRatio bounds decoded length ÷ stored length of a
	// compressed payload (1..1024), checked before inflating.
	MaxCompressionRatio int
}

// Validate reports the first violated bound as an Invalid *Error.
func (l Limits) Validate() error {
	switch {
	case l.MaxEncodedBytes < minHeaderV2+1 || l.MaxEncodedBytes > CapEncodedBytes:
		return fail(Invalid, "limits: max encoded bytes out of range")
	case l.MaxCodecIDBytes < 1 || l.MaxCodecIDBytes > CapCodecIDBytes:
		return fail(Invalid, "limits: max codec id bytes out of range")
	case l.MaxPayloadBytes < 1 || l.MaxPayloadBytes > CapPayloadBytes:
		return fail(Invalid, "limits: max payload bytes out of range")
	case l.MaxCompressionRatio < 1 || l.MaxCompressionRatio > CapCompressionRatio:
		return fail(Invalid, "limits: max compression ratio out of range")
	}
	return nil
}

// ShouldCompress is the opt-in rule: a payload is offered for compression
// only when a region set a threshold (> 0) and the payload is longer than
// it. Encode still stores it raw when compression does not pay.
func ShouldCompress(payloadLen, threshold int) bool {
	return threshold > 0 && payloadLen > threshold
}

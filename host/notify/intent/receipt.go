package intent

import (
	"errors"
	"fmt"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins/transport"
)

// Receipt bounds (transport.Receipt's own bounds).
const (
	maxCodeBytes        = 64
	maxProviderRefBytes = 256
	receiptMagic        = 'R'
	receiptVersion      = 1
)

// ErrCorruptReceipts is matched by a receipt log that does not decode.
var ErrCorruptReceipts = errors.New("intent: corrupt receipt log")

// Receipt is what one delivery attempt learned, as stored in the intent's
// receipt log: no content, no address.
type Receipt struct {
	Attempt     int
	Transport   string
	Outcome     transport.Outcome
	Code        string // bounded machine code ([a-z0-9.-], ≤ 64 bytes)
	ProviderRef string // ≤ 256 bytes
	At          time.Time
}

func validCode(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

func validRef(s string) bool {
	if len(s) > maxProviderRefBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (r *Receipt) check() error {
	switch {
	case r.Attempt < 1 || r.Attempt > maxAttempts:
		return fmt.Errorf("%w: attempt %d", ErrInvalidPlan, r.Attempt)
	case !ValidTransportName(r.Transport):
		return fmt.Errorf("%w: receipt transport name", ErrInvalidPlan)
	case !r.Outcome.Valid():
		return fmt.Errorf("%w: receipt outcome", ErrInvalidPlan)
	case !validCode(r.Code, maxCodeBytes) || !validRef(r.ProviderRef):
		return fmt.Errorf("%w: receipt code or provider reference", ErrInvalidPlan)
	case r.At.UnixMilli() < 0:
		return fmt.Errorf("%w: receipt time", ErrInvalidPlan)
	}
	return nil
}

// appendReceipt encodes r: 'R' 0x01, uvarint attempt, string transport,
// uvarint outcome, string code, string provider ref, varint at (Unix ms).
// The encoding is at most 512 bytes by the bounds above.
func appendReceipt(b []byte, r *Receipt) ([]byte, error) {
	if err := r.check(); err != nil {
		return b, err
	}
	b = append(b, receiptMagic, receiptVersion)
	b = abi.AppendUvarint(b, uint64(r.Attempt))
	b = abi.AppendString(b, r.Transport)
	b = abi.AppendUvarint(b, uint64(r.Outcome))
	b = abi.AppendString(b, r.Code)
	b = abi.AppendString(b, r.ProviderRef)
	b = abi.AppendVarint(b, r.At.UnixMilli())
	return b, nil
}

func decodeReceipt(b []byte) (Receipt, error) {
	bad := func(why string) (Receipt, error) { return Receipt{}, fmt.Errorf("%w: %s", ErrCorruptReceipts, why) }
	if len(b) < 3 || b[0] != receiptMagic || b[1] != receiptVersion {
		return bad("not a receipt")
	}
	d := abi.NewDecoder(b[2:])
	att := d.Uvarint("attempt")
	name := d.String("transport", MaxTransportNameBytes)
	o := d.Uvarint("outcome")
	code := d.String("code", maxCodeBytes)
	ref := d.String("provider_ref", maxProviderRefBytes)
	at := d.Varint("at")
	if err := d.Finish(); err != nil {
		return bad(err.Error())
	}
	if att > maxAttempts || o > 255 {
		return bad("attempt or outcome out of range")
	}
	r := Receipt{Attempt: int(att), Transport: name, Outcome: transport.Outcome(o), Code: code, ProviderRef: ref, At: time.UnixMilli(at).UTC()}
	if err := r.check(); err != nil {
		return bad("receipt out of bounds")
	}
	return r, nil
}

// decodeReceiptLog decodes the record's log: two-byte big-endian length,
// then the receipt, repeated. Identical receipts (a finalize repeated
// after a lost reply) appear once.
func decodeReceiptLog(b []byte) ([]Receipt, error) {
	var out []Receipt
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, fmt.Errorf("%w: truncated length", ErrCorruptReceipts)
		}
		n := int(b[0])<<8 | int(b[1])
		if n == 0 || n > maxReceiptBytes || len(b) < 2+n {
			return nil, fmt.Errorf("%w: receipt length", ErrCorruptReceipts)
		}
		r, err := decodeReceipt(b[2 : 2+n])
		if err != nil {
			return nil, err
		}
		dup := false
		for _, o := range out {
			if o == r {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, r)
		}
		b = b[2+n:]
	}
	return out, nil
}

// ValidReceiptCode reports whether s can be stored as a receipt code
// ([a-z0-9.-], at most 64 bytes).
func ValidReceiptCode(s string) bool { return validCode(s, maxCodeBytes) }

// ValidProviderRef reports whether s can be stored as a provider
// reference (printable ASCII without spaces, at most 256 bytes).
func ValidProviderRef(s string) bool { return validRef(s) }

package intent

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/plugins/transport"
)

// Plan bounds.
const (
	// MaxTransports bounds a plan's transports (primary plus fallbacks).
	MaxTransports = 4
	// MaxTransportNameBytes bounds a transport name ([a-z0-9-]).
	MaxTransportNameBytes = 64
	// MaxPlanBytes bounds an encoded plan.
	MaxPlanBytes = render.MaxEncodedBytes + 2<<10
)

// planMagic starts every encoded plan; the byte after it is the version.
const (
	planMagic   = "CNIP"
	planVersion = 1
)

var (
	// ErrInvalidPlan is matched by errors of a plan that cannot be stored.
	ErrInvalidPlan = errors.New("intent: invalid plan")
	// ErrCorruptPlan is matched by errors of a stored plan that does not
	// decode: such an entry is quarantined, never sent.
	ErrCorruptPlan = errors.New("intent: corrupt plan")
)

// Plan is a frozen notification: everything a delivery attempt sends,
// decided once at submit. Message holds the rendered parts exactly as the
// renderer guest produced them: a retry, even after the guest was
// hot-swapped, sends the same bytes.
//
// Plan holds a recipient and rendered content: it must never be logged.
// Its String and LogValue print only names and sizes.
type Plan struct {
	Recipient transport.Recipient
	// Transports are transport names, primary first, then fallbacks.
	Transports []string
	Message    render.Result
	CreatedAt  time.Time // millisecond precision
}

// Channel is the message's channel.
func (p *Plan) Channel() render.Channel { return p.Message.Channel }

// String describes p without recipient or content.
func (p *Plan) String() string {
	return fmt.Sprintf("intent.Plan{channel %s transports %v parts %d bytes %d}", p.Message.Channel, p.Transports, len(p.Message.Parts), p.Message.Bytes())
}

// LogValue describes p without recipient or content.
func (p *Plan) LogValue() slog.Value {
	return slog.GroupValue(slog.String("channel", string(p.Message.Channel)), slog.Int("transports", len(p.Transports)),
		slog.Int("parts", len(p.Message.Parts)), slog.Int("bytes", p.Message.Bytes()))
}

// Parts returns the message parts in transport form.
func (p *Plan) Parts() []transport.Part {
	out := make([]transport.Part, len(p.Message.Parts))
	for i, mp := range p.Message.Parts {
		out[i] = transport.Part{Name: mp.Name, ContentType: mp.ContentType, Body: mp.Body}
	}
	return out
}

// ValidTransportName reports whether s can name a transport in a plan.
func ValidTransportName(s string) bool {
	if s == "" || len(s) > MaxTransportNameBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func (p *Plan) check() error {
	bad := func(why string) error { return fmt.Errorf("%w: %s", ErrInvalidPlan, why) }
	switch {
	case p.Recipient.IsZero():
		return bad("no recipient")
	case len(p.Transports) == 0 || len(p.Transports) > MaxTransports:
		return bad(fmt.Sprintf("%d transports, want 1..%d", len(p.Transports), MaxTransports))
	case p.CreatedAt.UnixMilli() < 0 || !p.CreatedAt.Equal(time.UnixMilli(p.CreatedAt.UnixMilli())):
		return bad("created-at is before 1970 or finer than a millisecond")
	}
	seen := map[string]bool{}
	for _, t := range p.Transports {
		if !ValidTransportName(t) {
			return bad("a transport name is not [a-z0-9-]{1,64}")
		}
		if seen[t] {
			return bad("a transport is listed twice")
		}
		seen[t] = true
	}
	return nil
}

// MarshalBinary encodes p canonically:
//
//	"CNIP" 0x01, string recipient, uvarint transport count, per transport
//	a string name, varint created-at (Unix milliseconds), bytes the
//	render.Result encoding (which ends in its own SHA-256).
//
// Decoding and re-encoding gives the same bytes.
func (p *Plan) MarshalBinary() ([]byte, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	msg, err := p.Message.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidPlan, err)
	}
	b := make([]byte, 0, len(msg)+len(p.Recipient.Value())+64)
	b = append(b, planMagic...)
	b = append(b, planVersion)
	b = abi.AppendString(b, p.Recipient.Value())
	b = abi.AppendUvarint(b, uint64(len(p.Transports)))
	for _, t := range p.Transports {
		b = abi.AppendString(b, t)
	}
	b = abi.AppendVarint(b, p.CreatedAt.UnixMilli())
	b = abi.AppendBytes(b, msg)
	if len(b) > MaxPlanBytes {
		return nil, fmt.Errorf("%w: %d bytes exceeds %d", ErrInvalidPlan, len(b), MaxPlanBytes)
	}
	return b, nil
}

// UnmarshalBinary strictly decodes a stored plan: magic, version, every
// bound, minimal varints, no trailing bytes, a valid recipient and
// transport names, and the render.Result with its digest. Errors match
// ErrCorruptPlan and never quote the bytes.
func (p *Plan) UnmarshalBinary(b []byte) error {
	corrupt := func(why string) error { return fmt.Errorf("%w: %s", ErrCorruptPlan, why) }
	head := len(planMagic) + 1
	switch {
	case len(b) > MaxPlanBytes:
		return corrupt("too large")
	case len(b) < head || string(b[:len(planMagic)]) != planMagic:
		return corrupt("not an encoded plan")
	case b[len(planMagic)] != planVersion:
		return corrupt(fmt.Sprintf("format version %d", b[len(planMagic)]))
	}
	d := abi.NewDecoder(b[head:])
	rcpt := d.String("recipient", transport.MaxRecipientBytes)
	n := d.Count("transports", MaxTransports)
	names := make([]string, 0, n)
	for range n {
		names = append(names, d.String("transport", MaxTransportNameBytes))
	}
	created := d.Varint("created_at")
	msg := d.Bytes("message", render.MaxEncodedBytes)
	if err := d.Finish(); err != nil {
		return corrupt(err.Error())
	}
	r, err := transport.NewRecipient(rcpt)
	if err != nil {
		return corrupt("recipient")
	}
	out := Plan{Recipient: r, Transports: names, CreatedAt: time.UnixMilli(created).UTC()}
	if err := out.Message.UnmarshalBinary(msg); err != nil {
		return corrupt("message")
	}
	if err := out.check(); err != nil {
		return corrupt("plan")
	}
	*p = out
	return nil
}

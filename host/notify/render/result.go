package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/caphost/caphost/abi"
)

// Part is one rendered part: its name and content type are the channel's
// (see Channel), its body what the guest wrote, verified.
type Part struct {
	Name        string
	ContentType string
	Body        []byte
}

// Result is a rendered message, frozen: what a durable notification plan
// stores so that every delivery attempt, including one after the renderer
// was hot-swapped, sends the same bytes. It names what produced it (module
// and the sha256 of the module's wasm, template and version, the locale
// asked for and the locale rendered, the channel and the now the guest
// was given) and holds the parts. Its binary encoding (AppendBinary,
// UnmarshalBinary) is canonical: decoding and re-encoding gives the same
// bytes.
//
// Result holds rendered content: it must never be logged. Its String and
// LogValue print only the identifying fields and sizes.
type Result struct {
	Module          string
	ModuleSHA256    [sha256.Size]byte
	Template        string
	Version         uint32
	RequestedLocale string
	Locale          string
	Channel         Channel
	Now             time.Time // millisecond precision, UTC
	Parts           []Part
}

// Part returns the part named name.
func (r *Result) Part(name string) (Part, bool) {
	for _, p := range r.Parts {
		if p.Name == name {
			return p, true
		}
	}
	return Part{}, false
}

// Bytes is the size of all part bodies.
func (r *Result) Bytes() int {
	n := 0
	for _, p := range r.Parts {
		n += len(p.Body)
	}
	return n
}

// String describes r without its content.
func (r *Result) String() string {
	return fmt.Sprintf("render.Result{module %s sha256 %s template %s v%d locale %s channel %s parts %d bytes %d}",
		r.Module, hex.EncodeToString(r.ModuleSHA256[:8]), r.Template, r.Version, r.Locale, r.Channel, len(r.Parts), r.Bytes())
}

// resultMagic starts every encoded Result; the byte after it is the
// format version.
const (
	resultMagic   = "CNRR"
	resultVersion = 1
	// maxModuleNameBytes bounds the module name in an encoding.
	maxModuleNameBytes = abi.MaxNameBytes
	// MaxEncodedBytes bounds an encoded Result: the hard caps on parts
	// plus the fixed fields.
	MaxEncodedBytes = HardMaxTotalBytes + 4<<10
)

// Encoding of a Result (ABI.md's primitives: uvarint lengths, minimal
// varints, zig-zag for signed):
//
//	"CNRR" 0x01
//	string module, bytes module sha256 (exactly 32), string template,
//	uvarint version, string requested locale, string locale,
//	string channel, varint now (Unix milliseconds), uvarint part count,
//	per part: string name, string content type, bytes body,
//	then 32 bytes: sha256 of everything before them.
//
// The trailing digest catches a plan damaged in storage; it is not a
// signature (whoever can write the plan can recompute it).

// AppendBinary appends the encoding of r to b. It refuses a Result that
// UnmarshalBinary would refuse, so what is stored can be read back.
func (r *Result) AppendBinary(b []byte) ([]byte, error) {
	if err := r.check(); err != nil {
		return b, err
	}
	start := len(b)
	b = append(b, resultMagic...)
	b = append(b, resultVersion)
	b = abi.AppendString(b, r.Module)
	b = abi.AppendBytes(b, r.ModuleSHA256[:])
	b = abi.AppendString(b, r.Template)
	b = abi.AppendUvarint(b, uint64(r.Version))
	b = abi.AppendString(b, r.RequestedLocale)
	b = abi.AppendString(b, r.Locale)
	b = abi.AppendString(b, string(r.Channel))
	b = abi.AppendVarint(b, r.Now.UnixMilli())
	b = abi.AppendUvarint(b, uint64(len(r.Parts)))
	for _, p := range r.Parts {
		b = abi.AppendString(b, p.Name)
		b = abi.AppendString(b, p.ContentType)
		b = abi.AppendBytes(b, p.Body)
	}
	sum := sha256.Sum256(b[start:])
	return append(b, sum[:]...), nil
}

// MarshalBinary implements encoding.BinaryMarshaler.
func (r *Result) MarshalBinary() ([]byte, error) { return r.AppendBinary(nil) }

// UnmarshalBinary decodes b (which it does not retain) into r: the
// format, every bound, the digest, and then the checks AppendBinary makes
// (the channel's parts and character rules at the hard caps; the
// parameters are not stored, so the escaping checks ran when the Result
// was rendered, not here). Errors match ErrCorruptResult; r is changed
// only on success.
func (r *Result) UnmarshalBinary(b []byte) error {
	corrupt := func(why string) error { return fmt.Errorf("%w: %s", ErrCorruptResult, why) }
	head := len(resultMagic) + 1
	switch {
	case len(b) > MaxEncodedBytes:
		return corrupt("too large")
	case len(b) < head+sha256.Size || !bytes.HasPrefix(b, []byte(resultMagic)):
		return corrupt("not an encoded result")
	case b[len(resultMagic)] != resultVersion:
		return corrupt(fmt.Sprintf("format version %d", b[len(resultMagic)]))
	}
	body, sum := b[:len(b)-sha256.Size], b[len(b)-sha256.Size:]
	if want := sha256.Sum256(body); !bytes.Equal(want[:], sum) {
		return corrupt("digest mismatch")
	}
	d := abi.NewDecoder(body[head:])
	var out Result
	out.Module = d.String("module", maxModuleNameBytes)
	sha := d.Bytes("module_sha256", sha256.Size)
	out.Template = d.String("template", abi.MaxIDBytes)
	out.Version = d.Uint32("version")
	out.RequestedLocale = d.String("requested_locale", maxLocaleBytes)
	out.Locale = d.String("locale", maxLocaleBytes)
	out.Channel = Channel(d.String("channel", abi.MaxIDBytes))
	out.Now = time.UnixMilli(d.Varint("now")).UTC()
	n := d.Count("parts", abi.MaxMessageParts)
	if n > 0 {
		out.Parts = make([]Part, n)
	}
	for i := range out.Parts {
		p := &out.Parts[i]
		p.Name = d.String("part.name", abi.MaxNameBytes)
		p.ContentType = d.String("part.content_type", abi.MaxNameBytes)
		p.Body = d.Bytes("part.body", HardMaxPartBytes)
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptResult, err)
	}
	if len(sha) != sha256.Size {
		return corrupt("module sha256 is not 32 bytes")
	}
	copy(out.ModuleSHA256[:], sha)
	if err := out.check(); err != nil {
		return fmt.Errorf("%w: %w", ErrCorruptResult, err)
	}
	*r = out
	return nil
}

// check is what every Result satisfies: ids, locales, a verifiable
// channel, and parts that pass the channel's rules at the hard caps.
func (r *Result) check() error {
	bad := func(why string) error { return fmt.Errorf("render: result: %s", why) }
	switch {
	case r.Module == "" || len(r.Module) > maxModuleNameBytes || !utf8.ValidString(r.Module):
		return bad("module name")
	case !abi.ValidID(r.Template):
		return bad("template is not an id")
	case r.Version == 0:
		return bad("version 0")
	case !ValidLocale(r.RequestedLocale) || !ValidLocale(r.Locale):
		return bad("locale is not a language tag")
	case !r.Channel.Valid():
		return bad("channel is not one the host verifies")
	case r.Now.UnixMilli() < 0 || !r.Now.Equal(time.UnixMilli(r.Now.UnixMilli())):
		return bad("now is before 1970 or finer than a millisecond")
	}
	parts := make([]abi.MessagePart, len(r.Parts))
	for i, p := range r.Parts {
		parts[i] = abi.MessagePart{Name: p.Name, ContentType: p.ContentType, Body: p.Body}
	}
	return Verify(r.Channel, nil, parts, HardLimits())
}

// cloneParts returns a deep copy of parts.
func cloneParts(ps []abi.MessagePart) []Part {
	out := make([]Part, len(ps))
	for i, p := range ps {
		out[i] = Part{Name: p.Name, ContentType: p.ContentType, Body: slices.Clone(p.Body)}
	}
	return out
}

package keys

import (
	"strconv"
	"strings"

	"github.com/caphost/caphost/runtime/internal/hashslot"
)

// Prepared is a Spec without its parts, validated and partly rendered once,
// for a caller that builds many keys of one shape: the rate limiter builds
// the keys of one policy revision on every decision. Everything but the
// parts is checked by Prepare, and the part-independent half of the
// canonical digest encoding and of the key text is kept, so a build only
// digests the parts and renders the keys. The keys are exactly those of
// Builder.Group (Builder.Build for one kind). Immutable and safe for
// concurrent use.
type Prepared struct {
	b     *Builder
	vm    *versionMaterial
	kinds []string
	// head is the canonical encoding up to the part count.
	head []byte
	// prefix is "ca:<app>:<env>:<cap>:<region>:hv<n>:kv<n>:{".
	prefix string
	// size is the length of all keys together.
	size int
}

// Prepare validates s (its Kind and Parts are ignored) and kinds under the
// write version (hv0 when s.Opaque), as Group would, and returns the
// prepared shape. At least one kind is required; several kinds must share a
// co-location group, and then every build renders one key per kind, in
// order, sharing one slot.
func (b *Builder) Prepare(s Spec, kinds ...string) (*Prepared, error) {
	hv := b.hashVersionFor(s)
	// Parts are checked per build; one empty part stands in for them here.
	s.Parts = [][]byte{nil}
	group, err := b.validate(s, hv, kinds)
	if err != nil {
		return nil, err
	}
	p := &Prepared{b: b, vm: b.opaque, kinds: append([]string(nil), kinds...)}
	if !s.Opaque {
		p.vm = b.material[hv]
	}
	p.head = b.appendHead(nil, s, group)
	p.prefix = b.namespace + string(s.Capability) + ":" + s.Region + ":hv" + strconv.Itoa(hv) + ":kv" + strconv.Itoa(s.KeyVersion) + ":{"
	for _, k := range kinds {
		n := len(p.prefix) + SlotTagLen + 2 + len(digestHex{}) + 1 + len(k)
		if n > b.maxBytes {
			return nil, specErr("Key", "rendered key is "+strconv.Itoa(n)+" bytes, at most "+strconv.Itoa(b.maxBytes)+" allowed")
		}
		p.size += n
	}
	return p, nil
}

// Kinds returns the prepared kinds, in build order.
func (p *Prepared) Kinds() []string { return append([]string(nil), p.kinds...) }

// AppendKeys renders one key per prepared kind for parts and appends them to
// dst. The parts are bounded as in Spec.Parts (1..16 parts of at most 1 KiB
// each). One allocation holds the text of every key, and with a dst of
// enough capacity nothing else is allocated.
func (p *Prepared) AppendKeys(dst []Key, parts [][]byte) ([]Key, error) {
	switch {
	case len(parts) == 0:
		return dst, specErr("Parts", "at least one identifying part is required")
	case len(parts) > MaxParts:
		return dst, specErr("Parts", strconv.Itoa(len(parts))+" parts, at most "+strconv.Itoa(MaxParts)+" allowed")
	}
	for i, part := range parts {
		if len(part) > MaxPartBytes {
			return dst, specErr("Parts["+strconv.Itoa(i)+"]", strconv.Itoa(len(part))+" bytes, at most "+strconv.Itoa(MaxPartBytes)+" allowed")
		}
	}
	st := p.vm.pool.Get().(*digestState)
	digest := st.sum(p.vm, appendParts(append(st.buf[:0], p.head...), parts))

	var sb strings.Builder
	sb.Grow(p.size)
	for _, k := range p.kinds {
		sb.WriteString(p.prefix)
		sb.Write(digest[:SlotTagLen])
		sb.WriteString("}:")
		sb.Write(digest[:])
		sb.WriteByte(':')
		sb.WriteString(k)
	}
	all := sb.String()
	// Every key carries the same tag, hence the same slot.
	slot := hashslot.Of(all[:len(p.prefix)+SlotTagLen+1])
	off := 0
	for _, k := range p.kinds {
		n := len(p.prefix) + SlotTagLen + 2 + len(digest) + 1 + len(k)
		dst = append(dst, Key{s: all[off : off+n], slot: slot, kind: k})
		off += n
	}
	return dst, nil
}

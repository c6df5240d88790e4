package keys

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
)

// Sharding bounds. Like the other bounds they are part of the key contract.
const (
	// MaxShards bounds ShardSpec.Shards.
	MaxShards = 256
	// MaxScopeBytes bounds the scope of a member build.
	MaxScopeBytes = 128
)

// memberDomain separates member digests from every other digest; bump it
// only together with a key schema change.
const memberDomain = "caphost/keys/sharded-member/v1"

// ShardSpec describes a family of keys spread over a fixed number of shards.
// Each shard has one anchor key; every member key lives in the Cluster slot
// of its shard's anchor, so one atomic program can touch an anchor and its
// members, while the family as a whole spreads over Shards slots instead of
// one hot slot.
//
// The cache uses it for regions: the anchor of a shard holds the shard's
// generation, members are the entries and refresh leases of that shard, and
// a member is scoped by the generation it was built under, so a generation
// swap makes every older member unreachable.
type ShardSpec struct {
	// Capability, Region and KeyVersion are as in Spec.
	Capability Capability
	Region     string
	KeyVersion int
	// Shards is the number of shards, 1..MaxShards. It is part of the
	// layout: changing it moves every member to another key.
	Shards int
	// AnchorKind is the kind of the shard anchors. Anchors carry no
	// identifying material (their only part is the shard index), so they
	// are rendered under the opaque profile (hv0): an HMAC rotation does
	// not move them.
	AnchorKind string
	// MemberKinds are the member kinds, one co-location group other than
	// the anchor's; every member build renders one key per kind, in order.
	MemberKinds []string
}

// Sharded is a prepared ShardSpec. It is immutable and safe for concurrent
// use.
type Sharded struct {
	b       *Builder
	vm      *versionMaterial // the write version's material
	kinds   []string
	anchors []Key
	// head is the canonical encoding of the member group up to the part
	// count, exactly as Build encodes a Spec of a member kind.
	head []byte
	// prefix is "ca:<app>:<env>:<cap>:<region>:hv<write>:kv<n>:{".
	prefix string
}

// Location is where a member family lives: its shard and the keyed digest
// of its identifying parts. It is opaque: Sharded.Locate creates it and
// Sharded.Members renders keys from it; Digest and LocationOf carry it
// between host instances (the digest is derived from secret material but is
// no secret: every member key is a hash of it).
type Location struct {
	p      *Sharded
	shard  uint16
	digest [sha256.Size]byte
}

// Shard returns the location's shard index.
func (l Location) Shard() int { return int(l.shard) }

// Digest returns the keyed digest of the location's identifying parts.
func (l Location) Digest() [sha256.Size]byte { return l.digest }

// IsZero reports whether l was never located.
func (l Location) IsZero() bool { return l.p == nil }

// PrepareSharded validates s and renders its anchors. The members are
// rendered under the write HMAC version.
func (b *Builder) PrepareSharded(s ShardSpec) (*Sharded, error) {
	if s.Shards < 1 || s.Shards > MaxShards {
		return nil, specErr("Shards", "must be within 1.."+strconv.Itoa(MaxShards))
	}
	if len(s.MemberKinds) == 0 {
		return nil, specErr("MemberKinds", "at least one member kind is required")
	}
	base := Spec{Capability: s.Capability, Region: s.Region, KeyVersion: s.KeyVersion, Parts: [][]byte{nil}}
	group, err := b.validate(base, b.write, s.MemberKinds)
	if err != nil {
		return nil, err
	}
	if s.Capability.groupOf(s.AnchorKind) == group {
		return nil, specErr("AnchorKind", "anchor kind "+s.AnchorKind+" is in the members' co-location group")
	}
	p := &Sharded{b: b, vm: b.material[b.write], kinds: slices.Clone(s.MemberKinds)}
	p.anchors = make([]Key, s.Shards)
	for i := range p.anchors {
		a, err := b.Build(Spec{Capability: s.Capability, Region: s.Region, KeyVersion: s.KeyVersion,
			Kind: s.AnchorKind, Parts: [][]byte{shardPart(i)}, Opaque: true})
		if err != nil {
			return nil, err
		}
		p.anchors[i] = a
	}
	p.head = b.appendHead(nil, base, group)
	p.prefix = b.namespace + string(s.Capability) + ":" + s.Region + ":hv" + strconv.Itoa(b.write) + ":kv" + strconv.Itoa(s.KeyVersion) + ":{"
	for _, k := range p.kinds {
		if n := p.keyLen(k); n > b.maxBytes {
			return nil, specErr("Key", "rendered member key is "+strconv.Itoa(n)+" bytes, at most "+strconv.Itoa(b.maxBytes)+" allowed")
		}
	}
	return p, nil
}

// shardPart is the anchor's one identifying part: the shard index, two
// bytes big-endian.
func shardPart(i int) []byte { return []byte{byte(i >> 8), byte(i)} }

func (p *Sharded) keyLen(kind string) int {
	return len(p.prefix) + SlotTagLen + 2 + len(digestHex{}) + 1 + len(kind)
}

// Shards returns the number of shards.
func (p *Sharded) Shards() int { return len(p.anchors) }

// Anchor returns the anchor key of shard i (0 ≤ i < Shards). It panics
// on an index out of range, like a slice.
func (p *Sharded) Anchor(i int) Key { return p.anchors[i] }

// MemberKinds returns the member kinds, in build order.
func (p *Sharded) MemberKinds() []string { return slices.Clone(p.kinds) }

// Locate digests parts (bounded as Spec.Parts) with the write version's
// HMAC material, exactly as Build digests a member kind's Spec, and picks
// the shard from the digest.
func (p *Sharded) Locate(parts [][]byte) (Location, error) {
	if err := checkParts(parts); err != nil {
		return Location{}, err
	}
	st := p.vm.pool.Get().(*digestState)
	var d [sha256.Size]byte
	st.sumRaw(p.vm, appendParts(append(st.buf[:0], p.head...), parts), &d)
	return p.at(d), nil
}

// LocationOf rebuilds the location whose Digest is d (for a location
// received from another host instance). The shard follows from d.
func (p *Sharded) LocationOf(d [sha256.Size]byte) Location { return p.at(d) }

func (p *Sharded) at(d [sha256.Size]byte) Location {
	return Location{p: p, shard: uint16(binary.BigEndian.Uint64(d[:8]) % uint64(len(p.anchors))), digest: d}
}

// AnchorOf returns the anchor of loc's shard.
func (p *Sharded) AnchorOf(loc Location) Key { return p.anchors[loc.shard] }

// AppendMembers renders one key per member kind of loc under scope (1..
// MaxScopeBytes bytes, for example a generation) and appends them to dst.
// Every member carries the hash tag of its shard's anchor. The member
// digest is SHA-256 over a domain tag, the location digest and the scope,
// each length-prefixed, so members of one location in two scopes, or of
// two locations, never share a key. loc must come from p.
func (p *Sharded) AppendMembers(dst []Key, loc Location, scope []byte) ([]Key, error) {
	if loc.p != p {
		return dst, specErr("Location", "not located by this layout")
	}
	if len(scope) == 0 || len(scope) > MaxScopeBytes {
		return dst, specErr("Scope", strconv.Itoa(len(scope))+" bytes, want 1.."+strconv.Itoa(MaxScopeBytes))
	}
	var buf [4 + len(memberDomain) + 4 + sha256.Size + 4 + MaxScopeBytes]byte
	in := appendField(buf[:0], memberDomain)
	in = binary.BigEndian.AppendUint32(in, sha256.Size)
	in = append(in, loc.digest[:]...)
	in = binary.BigEndian.AppendUint32(in, uint32(len(scope)))
	in = append(in, scope...)
	sum := sha256.Sum256(in)
	var digest digestHex
	hex.Encode(digest[:], sum[:])

	anchor := p.anchors[loc.shard]
	tag := anchorTag(anchor)
	size := 0
	for _, k := range p.kinds {
		size += p.keyLen(k)
	}
	var sb strings.Builder
	sb.Grow(size)
	for _, k := range p.kinds {
		sb.WriteString(p.prefix)
		sb.WriteString(tag)
		sb.WriteString("}:")
		sb.Write(digest[:])
		sb.WriteByte(':')
		sb.WriteString(k)
	}
	all := sb.String()
	off := 0
	for _, k := range p.kinds {
		n := p.keyLen(k)
		// The tag is the anchor's, so is the slot.
		dst = append(dst, Key{s: all[off : off+n], slot: anchor.slot, kind: k})
		off += n
	}
	return dst, nil
}

// anchorTag returns the slot tag of a key rendered by render: the
// SlotTagLen characters after its one '{'.
func anchorTag(k Key) string {
	i := strings.IndexByte(k.s, '{')
	return k.s[i+1 : i+1+SlotTagLen]
}

// checkParts bounds parts as Spec.Parts are bounded.
func checkParts(parts [][]byte) error {
	switch {
	case len(parts) == 0:
		return specErr("Parts", "at least one identifying part is required")
	case len(parts) > MaxParts:
		return specErr("Parts", strconv.Itoa(len(parts))+" parts, at most "+strconv.Itoa(MaxParts)+" allowed")
	}
	for i, part := range parts {
		if len(part) > MaxPartBytes {
			return specErr("Parts["+strconv.Itoa(i)+"]", strconv.Itoa(len(part))+" bytes, at most "+strconv.Itoa(MaxPartBytes)+" allowed")
		}
	}
	return nil
}

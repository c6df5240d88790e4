package keys

import (
	"encoding/binary"
	"hash/maphash"
	"strconv"
	"strings"

	"github.com/caphost/caphost/runtime/internal/hashslot"
	"github.com/caphost/caphost/runtime/keys/memo"
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
	memo *buildMemo
}

// memoBits sizes the builds a Prepared remembers, 1<<memoBits = 512: at
// most that many entries of one key text each, about 150 KiB for a rate
// policy's two keys.
const memoBits = 9

// memoMaxInput bounds the encoded parts a build may be remembered for:
// larger encodings (long or many parts, rare for subjects) are digested
// every time.
const memoMaxInput = 256

// buildMemo is a small cache from the parts of a build to its key text. It
// holds no part bytes — parts may be personal data — only two independent
// seeded 64-bit hashes of their canonical encoding: a hit needs all 128
// bits to match (the seeds are random per Prepared, so inputs cannot be
// chosen to collide). Each build has two candidate slots, one per hash
// ("two choices"), so a few recurring subjects that share one slot do not
// evict each other; a miss fills an empty candidate or overwrites one at
// random. It needs no lock and no eviction bookkeeping, and never grows.
type buildMemo struct {
	seed1, seed2 maphash.Seed
	builds       *memo.Table[memoEntry]
}

// memoEntry is one remembered build.
type memoEntry struct {
	all  string // every key's text, in kind order
	slot uint16
}

func newBuildMemo() *buildMemo {
	return &buildMemo{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), builds: memo.New[memoEntry](memoBits)}
}

// hash returns the memo hashes of parts and whether they may be memoized.
// The encoding (part count, then each part length-prefixed: injective) only
// lives in a stack buffer for the hashing, which is cleared afterwards.
func (m *buildMemo) hash(parts [][]byte) (h1, h2 uint64, ok bool) {
	var buf [memoMaxInput]byte
	n := 4 + 4*len(parts)
	for _, part := range parts {
		n += len(part)
	}
	if n > len(buf) {
		return 0, 0, false
	}
	enc := binary.BigEndian.AppendUint32(buf[:0], uint32(len(parts)))
	for _, part := range parts {
		enc = binary.BigEndian.AppendUint32(enc, uint32(len(part)))
		enc = append(enc, part...)
	}
	h1, h2 = maphash.Bytes(m.seed1, enc), maphash.Bytes(m.seed2, enc)
	clear(enc)
	return h1, h2, true
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
	p := &Prepared{b: b, vm: b.opaque, kinds: append([]string(nil), kinds...), memo: newBuildMemo()}
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
// each). A remembered build allocates nothing (with a dst of enough
// capacity); a new one allocates the text of every key (one allocation)
// and its memo entry.
func (p *Prepared) AppendKeys(dst []Key, parts [][]byte) ([]Key, error) {
	if err := checkParts(parts); err != nil {
		return dst, err
	}
	h1, h2, memoize := p.memo.hash(parts)
	if memoize {
		if e, ok := p.memo.builds.Lookup(h1, h2); ok {
			return p.appendFrom(dst, e.all, e.slot), nil
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
	hs := hashslot.Of(all[:len(p.prefix)+SlotTagLen+1])
	if memoize {
		p.memo.builds.Store(h1, h2, memoEntry{all: all, slot: hs})
	}
	return p.appendFrom(dst, all, hs), nil
}

// appendFrom appends the keys whose text, in kind order, is all.
func (p *Prepared) appendFrom(dst []Key, all string, slot uint16) []Key {
	off := 0
	for _, k := range p.kinds {
		n := len(p.prefix) + SlotTagLen + 2 + len(digestHex{}) + 1 + len(k)
		dst = append(dst, Key{s: all[off : off+n], slot: slot, kind: k})
		off += n
	}
	return dst
}

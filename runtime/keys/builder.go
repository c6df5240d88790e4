package keys

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/internal/hashslot"
)

// Bounds. They are part of the key contract: changing one changes which
// inputs are accepted, so it needs a design change, not a config knob.
const (
	// DefaultMaxKeyBytes is the total key length bound when Config.MaxKeyBytes is 0.
	DefaultMaxKeyBytes = 256
	// MinMaxKeyBytes and MaxMaxKeyBytes bound Config.MaxKeyBytes.
	MinMaxKeyBytes = 128
	MaxMaxKeyBytes = 512
	// MaxNamespaceSlug bounds App and Env; MaxRegionSlug bounds Spec.Region.
	MaxNamespaceSlug = 32
	MaxRegionSlug    = 64
	// MaxParts and MaxPartBytes bound Spec.Parts.
	MaxParts     = 16
	MaxPartBytes = 1024
	// MaxKeyVersion and MaxHashVersion bound the kv<n> and hv<n> segments.
	MaxKeyVersion  = 999
	MaxHashVersion = 999
	// MaxReadableVersions bounds how many HMAC versions may be readable at
	// once (dual-read probes newest-first, so this bounds read fan-out).
	MaxReadableVersions = 4
	// MinSecretBytes and MaxSecretBytes bound each HMAC version's material.
	MinSecretBytes = 32
	MaxSecretBytes = 1024
	// OpaqueHashVersion is the hv segment of the "fixed" profile: an unkeyed
	// SHA-256 for random opaque identifiers, with no secret to rotate.
	OpaqueHashVersion = 0
	// SlotTagLen is the number of digest hex characters in the {slotTag}.
	SlotTagLen = 8
)

// digestDomain separates this digest from any other use of the same HMAC
// material; bump it only together with a key schema change.
const digestDomain = "caphost/keys/digest/v1"

// Config configures a Builder.
type Config struct {
	// App and Env are bounded slugs ([a-z0-9][a-z0-9-]{0,31}) forming the
	// namespace "ca:<app>:<env>:".
	App, Env string
	// Material is the versioned HMAC material; the write version must be one
	// of at most MaxReadableVersions versions, each at least MinSecretBytes.
	Material policy.KeyMaterial
	// MaxKeyBytes bounds every rendered key; 0 means DefaultMaxKeyBytes.
	MaxKeyBytes int
}

// Spec identifies one logical key.
type Spec struct {
	// Capability is the owning capability (closed set).
	Capability Capability
	// Region is a bounded slug ([a-z0-9][a-z0-9-]{0,63}): the cache region,
	// the rate policy id with its revision, the lease name, ...
	Region string
	// KeyVersion is the key schema version, rendered as kv<n>, 1..999.
	KeyVersion int
	// Kind must be in the capability's allowlist (see Capability.Kinds).
	Kind string
	// Parts are the logical identifying parts (1..16, each at most 1 KiB).
	// They are only ever digested, so they may hold any bytes, including
	// separators and braces; an empty part is a distinct value.
	Parts [][]byte
	// Opaque selects the "fixed" profile (unkeyed SHA-256, hv0) for random
	// opaque identifiers that are not dictionary-attackable.
	Opaque bool
}

// Builder renders Keys. It is immutable after NewBuilder and safe for
// concurrent use. It never prints its material: every fmt verb, %v of the
// struct included, and slog render only the namespace and versions.
type Builder struct {
	app, env  string
	namespace string
	maxBytes  int
	write     int
	readable  []int // descending: newest first
	material  map[int]*versionMaterial
	opaque    *versionMaterial // unkeyed SHA-256 scratch buffers
}

// versionMaterial holds one HMAC version. The pool reuses keyed HMAC states
// (hmac.New precomputes the pads) and canonical-encoding buffers because
// Build sits on every cache lookup and rate decision.
type versionMaterial struct {
	pool sync.Pool // of *digestState
}

// digestState is one pooled HMAC state plus its scratch buffer.
type digestState struct {
	mac    hash.Hash // nil for the unkeyed (opaque) profile
	buf    []byte
	sum256 [sha256.Size]byte
}

func (v *versionMaterial) String() string { return "***" }

// NewBuilder validates cfg and returns a Builder. Every problem is reported
// (joined; each matches ErrInvalidConfig and is a *Error); no problem ever
// quotes secret material.
func NewBuilder(cfg Config) (*Builder, error) {
	var errs []error
	if r := slugProblem(cfg.App, MaxNamespaceSlug); r != "" {
		errs = append(errs, configErr("App", r))
	}
	if r := slugProblem(cfg.Env, MaxNamespaceSlug); r != "" {
		errs = append(errs, configErr("Env", r))
	}
	maxBytes := cfg.MaxKeyBytes
	if maxBytes == 0 {
		maxBytes = DefaultMaxKeyBytes
	}
	if maxBytes < MinMaxKeyBytes || maxBytes > MaxMaxKeyBytes {
		errs = append(errs, configErr("MaxKeyBytes",
			fmt.Sprintf("must be 0 (default %d) or within %d..%d", DefaultMaxKeyBytes, MinMaxKeyBytes, MaxMaxKeyBytes)))
	}

	m := cfg.Material
	switch {
	case len(m.Versions) == 0:
		errs = append(errs, configErr("Material.Versions", "no HMAC versions configured"))
	case len(m.Versions) > MaxReadableVersions:
		errs = append(errs, configErr("Material.Versions",
			fmt.Sprintf("%d readable versions, at most %d allowed", len(m.Versions), MaxReadableVersions)))
	}
	if m.WriteVersion < 1 || m.WriteVersion > MaxHashVersion {
		errs = append(errs, configErr("Material.WriteVersion", fmt.Sprintf("must be within 1..%d", MaxHashVersion)))
	} else if _, ok := m.Versions[m.WriteVersion]; !ok && len(m.Versions) > 0 {
		errs = append(errs, configErr("Material.WriteVersion", "has no material in Material.Versions"))
	}
	versions := make([]int, 0, len(m.Versions))
	for v := range m.Versions {
		versions = append(versions, v)
	}
	slices.Sort(versions) // deterministic problem order
	for _, v := range versions {
		field := "Material.Versions[" + strconv.Itoa(v) + "]"
		if v < 1 || v > MaxHashVersion {
			errs = append(errs, configErr(field, fmt.Sprintf("version must be within 1..%d (hv0 is the unkeyed profile)", MaxHashVersion)))
		}
		if n := m.Versions[v].Len(); n < MinSecretBytes || n > MaxSecretBytes {
			// Only the length is reported, never the bytes.
			errs = append(errs, configErr(field, fmt.Sprintf("material is %d bytes, want %d..%d", n, MinSecretBytes, MaxSecretBytes)))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	b := &Builder{
		app:       cfg.App,
		env:       cfg.Env,
		namespace: "ca:" + cfg.App + ":" + cfg.Env + ":",
		maxBytes:  maxBytes,
		write:     m.WriteVersion,
		material:  make(map[int]*versionMaterial, len(versions)),
	}
	for _, v := range versions {
		// Copy: the builder must not change if the caller's slice does.
		secret := append([]byte(nil), m.Versions[v].Reveal()...)
		vm := &versionMaterial{}
		vm.pool.New = func() any { return &digestState{mac: hmac.New(sha256.New, secret), buf: make([]byte, 0, 256)} }
		b.material[v] = vm
	}
	b.opaque = &versionMaterial{}
	b.opaque.pool.New = func() any { return &digestState{buf: make([]byte, 0, 256)} }
	b.readable = slices.Clone(versions)
	slices.Reverse(b.readable)
	return b, nil
}

// Namespace returns "ca:<app>:<env>:", the prefix every key from this
// builder carries and the guard requires on every key it lets through.
func (b *Builder) Namespace() string { return b.namespace }

// WriteVersion returns the HMAC version new keys are written under.
func (b *Builder) WriteVersion() int { return b.write }

// ReadableVersions returns every HMAC version that may be read, newest
// first (the order dual-read probes in).
func (b *Builder) ReadableVersions() []int { return slices.Clone(b.readable) }

// MaxKeyBytes returns the effective total key length bound.
func (b *Builder) MaxKeyBytes() int { return b.maxBytes }

// Build renders s under the write version (or hv0 when s.Opaque).
func (b *Builder) Build(s Spec) (Key, error) {
	return b.BuildWith(s, b.hashVersionFor(s))
}

// BuildWith renders s under a specific readable HMAC version, for dual-read
// of regenerable data during rotation. An opaque spec accepts only
// OpaqueHashVersion; a keyed spec only a configured version.
func (b *Builder) BuildWith(s Spec, hashVersion int) (Key, error) {
	group, err := b.validate(s, hashVersion, []string{s.Kind})
	if err != nil {
		return Key{}, err
	}
	digest := b.digest(s, group, hashVersion)
	return b.render(s, hashVersion, &digest, s.Kind)
}

// Group renders one key per kind for the same resource under the write
// version: the same digest and slot tag, so the keys share one Cluster slot
// by construction. All kinds must belong to one co-location group of the
// capability (for example idem record+marker, fence owner+counter) and be
// distinct. s.Kind is ignored.
func (b *Builder) Group(s Spec, kinds ...string) ([]Key, error) {
	return b.GroupWith(s, b.hashVersionFor(s), kinds...)
}

// GroupWith is Group under a specific readable HMAC version.
func (b *Builder) GroupWith(s Spec, hashVersion int, kinds ...string) ([]Key, error) {
	group, err := b.validate(s, hashVersion, kinds)
	if err != nil {
		return nil, err
	}
	digest := b.digest(s, group, hashVersion)
	out := make([]Key, 0, len(kinds))
	for _, k := range kinds {
		key, err := b.render(s, hashVersion, &digest, k)
		if err != nil {
			return nil, err
		}
		out = append(out, key)
	}
	return out, nil
}

func (b *Builder) hashVersionFor(s Spec) int {
	if s.Opaque {
		return OpaqueHashVersion
	}
	return b.write
}

// validate checks everything about a request and returns the kind group
// name. All problems are reported together; none quotes part bytes.
func (b *Builder) validate(s Spec, hashVersion int, kinds []string) (string, error) {
	var errs []error
	if !s.Capability.Valid() {
		// The capability is a program constant, but it is still bounded
		// before being echoed.
		errs = append(errs, specErr("Capability", "unknown capability "+strconv.Quote(truncate(string(s.Capability), 16))))
	}
	if r := slugProblem(s.Region, MaxRegionSlug); r != "" {
		errs = append(errs, specErr("Region", r))
	}
	if s.KeyVersion < 1 || s.KeyVersion > MaxKeyVersion {
		errs = append(errs, specErr("KeyVersion", fmt.Sprintf("must be within 1..%d", MaxKeyVersion)))
	}
	switch {
	case s.Opaque && hashVersion != OpaqueHashVersion:
		errs = append(errs, specErr("HashVersion", "an opaque spec uses only hv0"))
	case !s.Opaque && hashVersion == OpaqueHashVersion:
		errs = append(errs, specErr("HashVersion", "hv0 is reserved for opaque specs"))
	case !s.Opaque && b.material[hashVersion] == nil:
		errs = append(errs, specErr("HashVersion", "hv"+strconv.Itoa(hashVersion)+" is not a readable version"))
	}
	switch {
	case len(s.Parts) == 0:
		errs = append(errs, specErr("Parts", "at least one identifying part is required"))
	case len(s.Parts) > MaxParts:
		errs = append(errs, specErr("Parts", fmt.Sprintf("%d parts, at most %d allowed", len(s.Parts), MaxParts)))
	default:
		for i, p := range s.Parts {
			if len(p) > MaxPartBytes {
				errs = append(errs, specErr("Parts["+strconv.Itoa(i)+"]",
					fmt.Sprintf("%d bytes, at most %d allowed", len(p), MaxPartBytes)))
			}
		}
	}

	group, groupKind := "", ""
	if len(kinds) == 0 {
		errs = append(errs, specErr("Kind", "no kind requested"))
	}
	if s.Capability.Valid() {
		for i, k := range kinds {
			g := s.Capability.groupOf(k)
			switch {
			case g == "":
				errs = append(errs, specErr(kindField(i, len(kinds)), "kind "+strconv.Quote(truncate(k, 16))+" is not allowed for capability "+string(s.Capability)))
			case slices.Contains(kinds[:i], k):
				errs = append(errs, specErr(kindField(i, len(kinds)), "duplicate kind "+k))
			case group == "":
				group, groupKind = g, k
			case g != group:
				errs = append(errs, specErr(kindField(i, len(kinds)), "kind "+k+" is not in the same co-location group as "+groupKind))
			}
		}
	}
	if len(errs) > 0 {
		return "", errors.Join(errs...)
	}
	return group, nil
}

// kindField names kind i of n in an error. It is only built on the error
// path: formatting it eagerly cost every multi-kind build an allocation.
func kindField(i, n int) string {
	if n == 1 {
		return "Kind"
	}
	return "Kinds[" + strconv.Itoa(i) + "]"
}

// digestHex is a hex-encoded SHA-256 / HMAC-SHA-256.
type digestHex [2 * sha256.Size]byte

// digest returns the hex digest of the canonical encoding of s. The encoding
// is a sequence of fields, each a fixed-width big-endian u32 length followed
// by its bytes: domain, app, env, capability, region, kind group, key
// version (4-byte big-endian), part count (4-byte big-endian), then every
// part. Distinct inputs can never collide by shifting bytes between fields:
// ["ab","c"] and ["a","bc"] encode differently, whatever bytes parts hold.
func (b *Builder) digest(s Spec, group string, hashVersion int) digestHex {
	vm := b.opaque
	if !s.Opaque {
		vm = b.material[hashVersion]
	}
	st := vm.pool.Get().(*digestState)
	buf := b.appendHead(st.buf[:0], s, group)
	return st.sum(vm, appendParts(buf, s.Parts))
}

// appendHead appends the canonical encoding up to (not including) the part
// count: everything that does not depend on the parts.
func (b *Builder) appendHead(buf []byte, s Spec, group string) []byte {
	buf = appendField(buf, digestDomain)
	buf = appendField(buf, b.app)
	buf = appendField(buf, b.env)
	buf = appendField(buf, string(s.Capability))
	buf = appendField(buf, s.Region)
	buf = appendField(buf, group)
	return appendU32Field(buf, uint32(s.KeyVersion))
}

// appendParts appends the part count and every part.
func appendParts(buf []byte, parts [][]byte) []byte {
	buf = appendU32Field(buf, uint32(len(parts)))
	for _, p := range parts {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(p)))
		buf = append(buf, p...)
	}
	return buf
}

// sum digests buf (st's scratch buffer, possibly grown), wipes it and
// returns st to vm's pool.
func (st *digestState) sum(vm *versionMaterial, buf []byte) digestHex {
	var raw [sha256.Size]byte
	st.sumRaw(vm, buf, &raw)
	var out digestHex
	hex.Encode(out[:], raw[:])
	return out
}

// sumRaw is sum without the hex encoding.
func (st *digestState) sumRaw(vm *versionMaterial, buf []byte, out *[sha256.Size]byte) {
	if st.mac == nil {
		st.sum256 = sha256.Sum256(buf)
	} else {
		st.mac.Reset()
		st.mac.Write(buf)
		st.mac.Sum(st.sum256[:0])
	}
	*out = st.sum256
	// Parts may be personal data: do not leave them in pooled memory, and
	// do not keep a buffer grown by a 16 KiB request alive in the pool.
	clear(buf)
	if cap(buf) <= 4096 {
		st.buf = buf
	} else {
		st.buf = make([]byte, 0, 256)
	}
	vm.pool.Put(st)
}

func appendField(buf []byte, v string) []byte {
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(v)))
	return append(buf, v...)
}

func appendU32Field(buf []byte, v uint32) []byte {
	buf = binary.BigEndian.AppendUint32(buf, 4)
	return binary.BigEndian.AppendUint32(buf, v)
}

// render assembles the key and enforces the total length bound.
func (b *Builder) render(s Spec, hashVersion int, digest *digestHex, kind string) (Key, error) {
	hv := strconv.Itoa(hashVersion)
	kv := strconv.Itoa(s.KeyVersion)
	n := len(b.namespace) + len(s.Capability) + 1 + len(s.Region) + 3 + len(hv) + 3 + len(kv) +
		2 + SlotTagLen + 2 + len(digest) + 1 + len(kind)
	if n > b.maxBytes {
		return Key{}, specErr("Key", fmt.Sprintf("rendered key is %d bytes, at most %d allowed", n, b.maxBytes))
	}
	var sb strings.Builder
	sb.Grow(n)
	sb.WriteString(b.namespace)
	sb.WriteString(string(s.Capability))
	sb.WriteByte(':')
	sb.WriteString(s.Region)
	sb.WriteString(":hv")
	sb.WriteString(hv)
	sb.WriteString(":kv")
	sb.WriteString(kv)
	sb.WriteString(":{")
	sb.Write(digest[:SlotTagLen])
	sb.WriteString("}:")
	sb.Write(digest[:])
	sb.WriteByte(':')
	sb.WriteString(kind)
	str := sb.String()
	return Key{s: str, slot: hashslot.Of(str), kind: kind}, nil
}

// String describes the builder without its material.
func (b *Builder) String() string {
	if b == nil {
		return "keys.Builder(nil)"
	}
	return fmt.Sprintf("keys.Builder(namespace=%s write=hv%d readable=%v material=***)", b.namespace, b.write, b.readable)
}

// GoString implements fmt.GoStringer (%#v) without the material.
func (b *Builder) GoString() string { return b.String() }

// Format implements fmt.Formatter so every verb (%v %+v %x %q ...) prints
// only String: the default struct printer would otherwise walk the fields.
func (b *Builder) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(b.String())) }

// LogValue implements slog.LogValuer without the material.
func (b *Builder) LogValue() slog.Value {
	if b == nil {
		return slog.StringValue("keys.Builder(nil)")
	}
	return slog.GroupValue(
		slog.String("namespace", b.namespace),
		slog.Int("write_version", b.write),
		slog.Any("readable_versions", b.readable),
	)
}

// slugProblem returns why s is not a bounded slug [a-z0-9][a-z0-9-]{0,max-1},
// or "" when it is. It never echoes s: a bad slug may be caller data.
func slugProblem(s string, max int) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > max {
		return fmt.Sprintf("%d bytes, at most %d allowed", len(s), max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0:
		default:
			return fmt.Sprintf("byte %d is not allowed (want [a-z0-9][a-z0-9-]*)", i)
		}
	}
	return ""
}

// truncate bounds a program-supplied string before it enters an error.
func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// Package seal owns the at-rest encryption of durable notification plans:
// the key ring (versions of secret material, one of them written), the
// sealed format, and the check that a sealed plan is opened only where it
// was stored.
//
// A durable intent holds a recipient address and rendered content, and it
// lives in a Redis Stream that RDB snapshots, AOF files, replicas and
// backups copy in plain text. With a Ring configured, the intent store
// seals each plan before it leaves the process and opens it after the
// read; Redis, and whatever copies Redis, holds only ciphertext. Sealing
// is also authentication: a plan written by anything without the key (a
// hand-made XADD) or moved from another entry does not open, and an entry
// that does not open is quarantined, never sent.
//
// Format (byte-exact, versioned by its first five bytes):
//
//	"CNIE" 0x01, key version (uint16 big-endian), nonce (12 bytes),
//	AES-256-GCM ciphertext and tag of the plan (16 bytes more)
//
// The additional data is the 7-byte header followed by the caller's
// binding (the intent id). Each version's AES key is HKDF-SHA256 of its
// material with the info string "caphost notify plan seal v1": material
// may be any length from 32 bytes, and material shared with another use
// never gives the same key. A random 96-bit nonce per plan keeps the
// chance of a repeat below 2^-32 for 2^32 plans under one version; rotate
// versions long before that.
//
// What may change here: new formats (a new version byte, read beside the
// old one); the format byte 0x01 and the key derivation are frozen once a
// plan was stored with them.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/caphost/caphost/policy"
)

// Format bounds.
const (
	// MinMaterialBytes is the least secret material per version.
	MinMaterialBytes = 32
	// MaxMaterialBytes bounds one version's material.
	MaxMaterialBytes = 1024
	// MaxVersions bounds the versions of one ring (the write version and
	// those still read during a rotation).
	MaxVersions = 4
	// MaxVersion is the largest version number.
	MaxVersion = 9999
	// Overhead is what sealing adds to a plan.
	Overhead = headerSize + nonceSize + tagSize
)

const (
	magic      = "CNIE"
	format     = 1
	headerSize = len(magic) + 1 + 2
	nonceSize  = 12
	tagSize    = 16
	info       = "caphost notify plan seal v1"
)

var (
	// ErrInvalidConfig is matched by errors of a ring that cannot be built.
	ErrInvalidConfig = errors.New("seal: invalid key ring")
	// ErrNotSealed is matched when Open is given bytes that do not start
	// with the sealed format's header (a plan stored in plain text).
	ErrNotSealed = errors.New("seal: not a sealed plan")
	// ErrUnknownVersion is matched when a plan was sealed with a version
	// this ring does not hold (retired, or not yet rolled out here).
	ErrUnknownVersion = errors.New("seal: sealed with an unknown key version")
	// ErrCorrupt is matched when a sealed plan does not open: truncated,
	// altered, moved from another binding, or sealed with other material
	// under the same version number.
	ErrCorrupt = errors.New("seal: sealed plan does not open")
)

// Config is the key ring's material. The zero value is not a ring.
type Config struct {
	// WriteVersion is the version new plans are sealed with; it must be
	// one of Versions.
	WriteVersion int
	// Versions maps version numbers (1..MaxVersion) to secret material
	// (MinMaterialBytes..MaxMaterialBytes); at most MaxVersions.
	Versions map[int]policy.Secret
	// Rand is the nonce source (nil: crypto/rand). Tests inject a fixed
	// one for golden bytes; anything else must not.
	Rand io.Reader
}

// Ring seals with its write version and opens with any of its versions.
// It is immutable and safe for concurrent use. Its String names versions,
// never material.
type Ring struct {
	write    uint16
	versions []uint16 // sorted
	aeads    map[uint16]cipher.AEAD
	rand     io.Reader
}

// New builds a ring from cfg.
func New(cfg Config) (*Ring, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case len(cfg.Versions) == 0:
		return nil, bad("no key versions")
	case len(cfg.Versions) > MaxVersions:
		return nil, bad("%d key versions, at most %d", len(cfg.Versions), MaxVersions)
	}
	if _, ok := cfg.Versions[cfg.WriteVersion]; !ok {
		return nil, bad("write version %d is not one of the key versions", cfg.WriteVersion)
	}
	r := &Ring{write: uint16(cfg.WriteVersion), aeads: make(map[uint16]cipher.AEAD, len(cfg.Versions)), rand: cfg.Rand}
	if r.rand == nil {
		r.rand = rand.Reader
	}
	for v, s := range cfg.Versions {
		if v < 1 || v > MaxVersion {
			return nil, bad("key version %d outside 1..%d", v, MaxVersion)
		}
		if s.Len() < MinMaterialBytes || s.Len() > MaxMaterialBytes {
			return nil, bad("key version %d: material must be %d..%d bytes", v, MinMaterialBytes, MaxMaterialBytes)
		}
		key, err := hkdf.Key(sha256.New, s.Reveal(), nil, info, 32)
		if err != nil {
			return nil, bad("key version %d: %v", v, err)
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, bad("key version %d: %v", v, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, bad("key version %d: %v", v, err)
		}
		r.aeads[uint16(v)] = aead
		r.versions = append(r.versions, uint16(v))
	}
	slices.Sort(r.versions)
	return r, nil
}

// IsSealed reports whether b starts with the sealed format's header.
func IsSealed(b []byte) bool {
	return len(b) >= headerSize && string(b[:len(magic)]) == magic && b[len(magic)] == format
}

// Seal appends the sealed form of plain, bound to binding, to dst.
func (r *Ring) Seal(dst, plain, binding []byte) ([]byte, error) {
	start := len(dst)
	dst = slices.Grow(dst, Overhead+len(plain))
	dst = append(dst, magic...)
	dst = append(dst, format)
	dst = binary.BigEndian.AppendUint16(dst, r.write)
	header := dst[start:]
	var nonce [nonceSize]byte
	if _, err := io.ReadFull(r.rand, nonce[:]); err != nil {
		return dst[:start], fmt.Errorf("seal: nonce: %w", err)
	}
	dst = append(dst, nonce[:]...)
	return r.aeads[r.write].Seal(dst, nonce[:], plain, additional(header, binding)), nil
}

// Open appends the plan sealed in b, bound to binding, to dst. Its errors
// match ErrNotSealed, ErrUnknownVersion or ErrCorrupt and never quote b.
func (r *Ring) Open(dst, b, binding []byte) ([]byte, error) {
	if !IsSealed(b) {
		return dst, ErrNotSealed
	}
	v := binary.BigEndian.Uint16(b[len(magic)+1:])
	aead, ok := r.aeads[v]
	if !ok {
		return dst, fmt.Errorf("%w (version %d)", ErrUnknownVersion, v)
	}
	if len(b) < Overhead {
		return dst, fmt.Errorf("%w: truncated", ErrCorrupt)
	}
	nonce := b[headerSize : headerSize+nonceSize]
	out, err := aead.Open(dst, nonce, b[headerSize+nonceSize:], additional(b[:headerSize], binding))
	if err != nil {
		return dst, fmt.Errorf("%w: authentication failed", ErrCorrupt)
	}
	return out, nil
}

func additional(header, binding []byte) []byte {
	ad := make([]byte, 0, len(header)+len(binding))
	return append(append(ad, header...), binding...)
}

// WriteVersion is the version Seal uses.
func (r *Ring) WriteVersion() int { return int(r.write) }

// String names the ring's versions, never its material.
func (r *Ring) String() string {
	vs := make([]string, len(r.versions))
	for i, v := range r.versions {
		vs[i] = strconv.Itoa(int(v))
	}
	return fmt.Sprintf("seal.Ring(aes-256-gcm write v%d versions [%s])", r.write, strings.Join(vs, " "))
}

package trust

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"sort"
)

// PEM block types of key files.
const (
	PublicKeyPEMType  = "PUBLIC KEY"
	PrivateKeyPEMType = "PRIVATE KEY"
)

// KeyIDLen is the length, in hex digits, of a key id.
const KeyIDLen = 16

// PublicKey is a parsed ed25519 public key with its id.
type PublicKey struct {
	key ed25519.PublicKey
	id  string
}

// ID returns the key id: the first KeyIDLen hex digits of sha256 over the
// raw 32-byte public key.
func (k PublicKey) ID() string { return k.id }

// IsZero reports whether k is the zero value (no key).
func (k PublicKey) IsZero() bool { return len(k.key) == 0 }

func newPublicKey(pub ed25519.PublicKey) PublicKey {
	sum := sha256.Sum256(pub)
	return PublicKey{key: append(ed25519.PublicKey(nil), pub...), id: hex.EncodeToString(sum[:])[:KeyIDLen]}
}

// GenerateKey creates an ed25519 key pair and returns the public key as a
// PEM `PUBLIC KEY` block, the private key as a PEM `PRIVATE KEY` block, and
// the key id. The caller writes the private key with mode 0600.
func GenerateKey() (pubPEM, privPEM []byte, id string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, "", fmt.Errorf("trust: generate key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, nil, "", fmt.Errorf("trust: encode public key: %w", err)
	}
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, "", fmt.Errorf("trust: encode private key: %w", err)
	}
	pubPEM = pem.EncodeToMemory(&pem.Block{Type: PublicKeyPEMType, Bytes: pubDER})
	privPEM = pem.EncodeToMemory(&pem.Block{Type: PrivateKeyPEMType, Bytes: privDER})
	clear(privDER)
	return pubPEM, privPEM, newPublicKey(pub).ID(), nil
}

// singleBlock decodes exactly one PEM block of the wanted type, without
// headers and with nothing but whitespace after it. Messages describe the
// shape only: the bytes may be a private key pasted in the wrong place.
func singleBlock(data []byte, want string) (*pem.Block, error) {
	block, rest := pem.Decode(data)
	switch {
	case block == nil:
		return nil, newErr(ErrMalformedKey, "no PEM block found")
	case block.Type != want:
		return nil, newErr(ErrMalformedKey, fmt.Sprintf("PEM block is %q, want %q", block.Type, want))
	case len(block.Headers) != 0:
		return nil, newErr(ErrMalformedKey, "PEM headers are not allowed")
	case len(bytes.TrimSpace(rest)) != 0:
		return nil, newErr(ErrMalformedKey, "trailing data after the PEM block")
	}
	return block, nil
}

// ParsePublicKey parses a PEM `PUBLIC KEY` (PKIX) block holding an ed25519 key.
func ParsePublicKey(pemBytes []byte) (PublicKey, error) {
	block, err := singleBlock(pemBytes, PublicKeyPEMType)
	if err != nil {
		return PublicKey{}, err
	}
	k, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return PublicKey{}, newErr(ErrMalformedKey, "not a PKIX public key")
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return PublicKey{}, newErr(ErrMalformedKey, fmt.Sprintf("public key is %T, want ed25519", k))
	}
	return newPublicKey(pub), nil
}

// parsePrivateKey parses a PEM `PRIVATE KEY` (PKCS#8) block holding an
// ed25519 key. The x509 error is dropped: it could quote DER bytes.
func parsePrivateKey(pemBytes []byte) (ed25519.PrivateKey, error) {
	block, err := singleBlock(pemBytes, PrivateKeyPEMType)
	if err != nil {
		return nil, err
	}
	defer clear(block.Bytes)
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, newErr(ErrMalformedKey, "not a PKCS#8 private key")
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, newErr(ErrMalformedKey, "private key is not ed25519")
	}
	return priv, nil
}

// TrustedKeys is an immutable set of trusted public keys, each with the
// operator's name for it. The zero value trusts nothing.
type TrustedKeys struct {
	byID map[string]namedKey
}

type namedKey struct {
	name string
	key  PublicKey
}

// NewTrustedKeys builds a set from name → key. Two names for the same key
// are refused (ErrMalformedKey): which name a verification reports would be
// ambiguous.
func NewTrustedKeys(named map[string]PublicKey) (TrustedKeys, error) {
	names := make([]string, 0, len(named))
	for n := range named {
		names = append(names, n)
	}
	sort.Strings(names)
	byID := make(map[string]namedKey, len(named))
	for _, n := range names {
		k := named[n]
		if k.IsZero() {
			return TrustedKeys{}, newErr(ErrMalformedKey, fmt.Sprintf("trusted key %q is empty", n))
		}
		if prev, dup := byID[k.ID()]; dup {
			return TrustedKeys{}, newErr(ErrMalformedKey, fmt.Sprintf("trusted keys %q and %q are the same key %s", prev.name, n, k.ID()))
		}
		byID[k.ID()] = namedKey{name: n, key: k}
	}
	return TrustedKeys{byID: byID}, nil
}

// ParseTrustedKeys builds a set from name → PEM public key bytes.
func ParseTrustedKeys(named map[string][]byte) (TrustedKeys, error) {
	keys := make(map[string]PublicKey, len(named))
	for n, b := range named {
		k, err := ParsePublicKey(b)
		if err != nil {
			return TrustedKeys{}, fmt.Errorf("trusted key %q: %w", n, err)
		}
		keys[n] = k
	}
	return NewTrustedKeys(keys)
}

// Len returns the number of trusted keys.
func (t TrustedKeys) Len() int { return len(t.byID) }

// IDs returns the trusted key ids, sorted.
func (t TrustedKeys) IDs() []string {
	out := make([]string, 0, len(t.byID))
	for id := range t.byID {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Name returns the operator's name for the key with id, if trusted.
func (t TrustedKeys) Name(id string) (string, bool) {
	k, ok := t.byID[id]
	return k.name, ok
}

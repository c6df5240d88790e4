package trust

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/caphost/caphost/plugins/strictjson"
)

// Format is the format field of a v1 signature file and the domain
// separation prefix of the signed message.
const Format = "caphost-guest-signature-v1"

// SignatureSuffix is appended to a module path to name its signature file.
const SignatureSuffix = ".sig"

// MaxSignatureFileBytes bounds a signature file; a v1 document is about
// 200 bytes.
const MaxSignatureFileBytes = 1024

// Pin is a module's expected sha256. The zero Pin pins nothing and never
// matches.
type Pin [sha256.Size]byte

// Digest returns the sha256 of module.
func Digest(module []byte) Pin { return sha256.Sum256(module) }

// ParsePin parses 64 lower-case hex digits.
func ParsePin(s string) (Pin, error) {
	var p Pin
	if len(s) != 2*len(p) || !isLowerHex(s) {
		return Pin{}, newErr(ErrMalformedPin, "a sha256 pin is 64 lower-case hex digits")
	}
	_, _ = hex.Decode(p[:], []byte(s))
	return p, nil
}

// String returns the pin as 64 lower-case hex digits.
func (p Pin) String() string { return hex.EncodeToString(p[:]) }

// IsZero reports whether p is unset.
func (p Pin) IsZero() bool { return p == Pin{} }

// Signature is a decoded v1 detached signature.
type Signature struct {
	// KeyID names the signing key (see PublicKey.ID).
	KeyID string
	// Digest is the sha256 of the module that was signed.
	Digest Pin
	// Sig is the 64-byte ed25519 signature over Message(Digest).
	Sig []byte
}

// Message returns the signed message for a module digest:
// Format || 0x00 || digest.
func Message(digest Pin) []byte {
	m := make([]byte, 0, len(Format)+1+len(digest))
	m = append(m, Format...)
	m = append(m, 0)
	return append(m, digest[:]...)
}

// Sign signs module with a PEM `PRIVATE KEY` (PKCS#8 ed25519).
func Sign(privPEM, module []byte) (Signature, error) {
	priv, err := parsePrivateKey(privPEM)
	if err != nil {
		return Signature{}, err
	}
	defer clear(priv)
	d := Digest(module)
	pub, _ := priv.Public().(ed25519.PublicKey)
	return Signature{KeyID: newPublicKey(pub).ID(), Digest: d, Sig: ed25519.Sign(priv, Message(d))}, nil
}

type sigDoc struct {
	Format    string `json:"format"`
	Key       string `json:"key"`
	SHA256    string `json:"sha256"`
	Signature string `json:"signature"`
}

// Marshal encodes s as a v1 signature file (one JSON object and a newline).
func (s Signature) Marshal() []byte {
	b, _ := json.Marshal(sigDoc{ // cannot fail: four strings
		Format:    Format,
		Key:       s.KeyID,
		SHA256:    s.Digest.String(),
		Signature: base64.StdEncoding.EncodeToString(s.Sig),
	})
	return append(b, '\n')
}

// ParseSignature strictly decodes a v1 signature file: exactly one JSON
// object with exactly the members format, key, sha256 and signature, all
// non-empty strings, by the rules of plugins/strictjson (exact
// names, no unknown or duplicate member, valid UTF-8, no null, nothing after
// the object). Errors wrap ErrMalformedSignature (ErrTooLarge as well when
// over the size bound).
func ParseSignature(data []byte) (*Signature, error) {
	if len(data) > MaxSignatureFileBytes {
		return nil, &Error{Kind: ErrMalformedSignature, Detail: fmt.Sprintf("larger than %d bytes", MaxSignatureFileBytes), Err: ErrTooLarge}
	}
	var doc sigDoc
	if err := strictjson.Unmarshal(data, &doc); err != nil {
		return nil, newErr(ErrMalformedSignature, err.Error())
	}
	for _, f := range []struct{ name, v string }{{"format", doc.Format}, {"key", doc.Key}, {"sha256", doc.SHA256}, {"signature", doc.Signature}} {
		if f.v == "" {
			return nil, newErr(ErrMalformedSignature, fmt.Sprintf("field %q is missing or empty", f.name))
		}
	}
	if doc.Format != Format {
		return nil, newErr(ErrMalformedSignature, fmt.Sprintf("format is not %q", Format))
	}
	if len(doc.Key) != KeyIDLen || !isLowerHex(doc.Key) {
		return nil, newErr(ErrMalformedSignature, fmt.Sprintf("key must be %d lower-case hex digits", KeyIDLen))
	}
	digest, err := ParsePin(doc.SHA256)
	if err != nil {
		return nil, newErr(ErrMalformedSignature, "sha256 must be 64 lower-case hex digits")
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(doc.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return nil, newErr(ErrMalformedSignature, fmt.Sprintf("signature must be standard base64 of %d bytes", ed25519.SignatureSize))
	}
	return &Signature{KeyID: doc.Key, Digest: digest, Sig: sig}, nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

package trust

import (
	"crypto/ed25519"
	"crypto/subtle"
	"fmt"
)

// Verification records what Verify established.
type Verification struct {
	// Digest is the module's sha256 (equal to the pin).
	Digest Pin
	// Signed is true when a signature was checked and verified.
	Signed bool
	// KeyID and KeyName identify the trusted key that signed (when Signed).
	KeyID   string
	KeyName string
}

// Verify checks module against its pin and, when sig is non-nil, its
// signature against keys. A nil sig is accepted only when requireSigned is
// false. See the package documentation for the order of checks and the
// errors returned.
func Verify(module []byte, pin Pin, sig *Signature, keys TrustedKeys, requireSigned bool) (Verification, error) {
	d := Digest(module)
	if pin.IsZero() {
		return Verification{}, newErr(ErrDigestMismatch, "no sha256 pin given")
	}
	if subtle.ConstantTimeCompare(d[:], pin[:]) != 1 {
		return Verification{}, newErr(ErrDigestMismatch, fmt.Sprintf("module sha256 is %s, pinned %s", d, pin))
	}
	v := Verification{Digest: d}
	if sig == nil {
		if requireSigned {
			return Verification{}, newErr(ErrUnsigned, "a signature is required (security.require-signed-guests)")
		}
		return v, nil
	}
	if sig.Digest != d {
		return Verification{}, newErr(ErrDigestMismatch, fmt.Sprintf("signature file is for sha256 %s, module is %s", sig.Digest, d))
	}
	k, ok := keys.byID[sig.KeyID]
	if !ok {
		return Verification{}, newErr(ErrUnknownKey, fmt.Sprintf("key %s is not among the %d trusted key(s)", sig.KeyID, keys.Len()))
	}
	if len(sig.Sig) != ed25519.SignatureSize || !ed25519.Verify(k.key.key, Message(d), sig.Sig) {
		return Verification{}, newErr(ErrBadSignature, fmt.Sprintf("signature by key %s (%s)", sig.KeyID, k.name))
	}
	v.Signed, v.KeyID, v.KeyName = true, sig.KeyID, k.name
	return v, nil
}

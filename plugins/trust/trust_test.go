package trust

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seedKey derives a fixed test key so golden vectors need no private key
// file in the repository.
func seedKey(t testing.TB, seed byte) (pubPEM, privPEM []byte) {
	t.Helper()
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed + byte(i)
	}
	priv := ed25519.NewKeyFromSeed(s)
	pubDER, err := x509.MarshalPKIXPublicKey(priv.Public())
	require.NoError(t, err)
	privDER, err := x509.MarshalPKCS8PrivateKey(priv)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: PublicKeyPEMType, Bytes: pubDER}),
		pem.EncodeToMemory(&pem.Block{Type: PrivateKeyPEMType, Bytes: privDER})
}

func trusted(t testing.TB, named map[string][]byte) TrustedKeys {
	t.Helper()
	k, err := ParseTrustedKeys(named)
	require.NoError(t, err)
	return k
}

var module = []byte("\x00asm\x01\x00\x00\x00 pretend guest module")

func TestRoundTrip(t *testing.T) {
	pub, priv, id, err := GenerateKey()
	require.NoError(t, err)
	assert.Len(t, id, KeyIDLen)
	pk, err := ParsePublicKey(pub)
	require.NoError(t, err)
	assert.Equal(t, id, pk.ID())

	sig, err := Sign(priv, module)
	require.NoError(t, err)
	assert.Equal(t, id, sig.KeyID)
	assert.Equal(t, Digest(module), sig.Digest)

	parsed, err := ParseSignature(sig.Marshal())
	require.NoError(t, err)
	assert.Equal(t, &sig, parsed)

	keys := trusted(t, map[string][]byte{"release": pub})
	v, err := Verify(module, Digest(module), parsed, keys, true)
	require.NoError(t, err)
	assert.Equal(t, Verification{Digest: Digest(module), Signed: true, KeyID: id, KeyName: "release"}, v)

	// Unsigned is fine when not required.
	v, err = Verify(module, Digest(module), nil, keys, false)
	require.NoError(t, err)
	assert.False(t, v.Signed)
}

func TestGoldenVector(t *testing.T) {
	pub, priv := seedKey(t, 1)
	wantPub, err := os.ReadFile("testdata/release.pub")
	require.NoError(t, err)
	assert.Equal(t, string(wantPub), string(pub))
	mod, err := os.ReadFile("testdata/module.wasm")
	require.NoError(t, err)
	sig, err := Sign(priv, mod)
	require.NoError(t, err)
	wantSig, err := os.ReadFile("testdata/module.wasm.sig")
	require.NoError(t, err)
	assert.Equal(t, string(wantSig), string(sig.Marshal()), "ed25519 is deterministic; the encoding is stable")

	pk, err := ReadPublicKeyFile("testdata/release.pub")
	require.NoError(t, err)
	keys, err := NewTrustedKeys(map[string]PublicKey{"release-2026": pk})
	require.NoError(t, err)
	s, err := ReadSignatureFile("testdata/module.wasm.sig")
	require.NoError(t, err)
	pin, err := ParsePin(strings.TrimSpace(readString(t, "testdata/module.wasm.sha256")))
	require.NoError(t, err)
	v, err := Verify(mod, pin, s, keys, true)
	require.NoError(t, err)
	assert.Equal(t, "release-2026", v.KeyName)
	assert.Equal(t, []byte("caphost-guest-signature-v1\x00"), Message(pin)[:len(Format)+1])
}

func readString(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestTamper(t *testing.T) {
	pub, priv := seedKey(t, 1)
	keys := trusted(t, map[string][]byte{"release": pub})
	sig, err := Sign(priv, module)
	require.NoError(t, err)
	pin := Digest(module)

	t.Run("module byte", func(t *testing.T) {
		for i := range module {
			m := append([]byte(nil), module...)
			m[i] ^= 0x01
			_, err := Verify(m, pin, &sig, keys, true)
			require.ErrorIs(t, err, ErrDigestMismatch, "byte %d", i)
			// Re-pinned to the tampered module, the signature still refuses it.
			_, err = Verify(m, Digest(m), &sig, keys, true)
			require.ErrorIs(t, err, ErrDigestMismatch, "byte %d", i)
		}
	})
	t.Run("signature byte", func(t *testing.T) {
		for i := range sig.Sig {
			s := sig
			s.Sig = append([]byte(nil), sig.Sig...)
			s.Sig[i] ^= 0x80
			_, err := Verify(module, pin, &s, keys, true)
			require.ErrorIs(t, err, ErrBadSignature, "byte %d", i)
		}
	})
	t.Run("digest in signature file", func(t *testing.T) {
		s := sig
		s.Digest[0] ^= 0x01
		_, err := Verify(module, pin, &s, keys, true)
		require.ErrorIs(t, err, ErrDigestMismatch)
		// Through the file encoding as well.
		doc := strings.Replace(string(sig.Marshal()), sig.Digest.String()[:2], flipHex(sig.Digest.String()[:2]), 1)
		p, err := ParseSignature([]byte(doc))
		require.NoError(t, err)
		_, err = Verify(module, pin, p, keys, true)
		require.ErrorIs(t, err, ErrDigestMismatch)
	})
	t.Run("pin", func(t *testing.T) {
		p := pin
		p[31] ^= 0x01
		_, err := Verify(module, p, &sig, keys, true)
		require.ErrorIs(t, err, ErrDigestMismatch)
		_, err = Verify(module, Pin{}, &sig, keys, true)
		require.ErrorIs(t, err, ErrDigestMismatch, "the zero pin never matches")
	})
}

func flipHex(s string) string {
	if s[0] == '0' {
		return "1" + s[1:]
	}
	return "0" + s[1:]
}

func TestWrongAndUnknownKey(t *testing.T) {
	pub1, priv1 := seedKey(t, 1)
	pub2, _ := seedKey(t, 2)
	sig, err := Sign(priv1, module)
	require.NoError(t, err)

	_, err = Verify(module, Digest(module), &sig, trusted(t, map[string][]byte{"other": pub2}), true)
	require.ErrorIs(t, err, ErrUnknownKey)
	assert.Contains(t, err.Error(), sig.KeyID)

	// Wrong key claiming the trusted key's id.
	_, priv2 := seedKey(t, 2)
	forged, err := Sign(priv2, module)
	require.NoError(t, err)
	forged.KeyID = sig.KeyID
	_, err = Verify(module, Digest(module), &forged, trusted(t, map[string][]byte{"release": pub1}), true)
	require.ErrorIs(t, err, ErrBadSignature)

	_, err = Verify(module, Digest(module), &sig, TrustedKeys{}, false)
	require.ErrorIs(t, err, ErrUnknownKey, "the zero set trusts nothing")

	// Messages never carry key material.
	for _, k := range [][]byte{pub1, pub2, priv1} {
		block, _ := pem.Decode(k)
		assert.NotContains(t, err.Error(), base64.StdEncoding.EncodeToString(block.Bytes)[:20])
	}
}

func TestUnsignedWhenRequired(t *testing.T) {
	pub, _ := seedKey(t, 1)
	_, err := Verify(module, Digest(module), nil, trusted(t, map[string][]byte{"r": pub}), true)
	require.ErrorIs(t, err, ErrUnsigned)
	var te *Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, ErrUnsigned, te.Kind)
}

func TestTrustedKeys(t *testing.T) {
	pub1, _ := seedKey(t, 1)
	pub2, _ := seedKey(t, 2)
	k := trusted(t, map[string][]byte{"a": pub1, "b": pub2})
	assert.Equal(t, 2, k.Len())
	ids := k.IDs()
	require.Len(t, ids, 2)
	assert.Less(t, ids[0], ids[1])
	pk, _ := ParsePublicKey(pub1)
	name, ok := k.Name(pk.ID())
	assert.True(t, ok)
	assert.Equal(t, "a", name)

	_, err := ParseTrustedKeys(map[string][]byte{"a": pub1, "again": pub1})
	require.ErrorIs(t, err, ErrMalformedKey, "one key under two names is ambiguous")
	_, err = NewTrustedKeys(map[string]PublicKey{"zero": {}})
	require.ErrorIs(t, err, ErrMalformedKey)
}

func TestMalformedKeys(t *testing.T) {
	pub, priv := seedKey(t, 1)
	cases := map[string][]byte{
		"empty":          nil,
		"not pem":        []byte("hello"),
		"private as pub": priv,
		"trailing":       append(append([]byte(nil), pub...), []byte("junk")...),
		"two blocks":     append(append([]byte(nil), pub...), pub...),
		"bad der":        pem.EncodeToMemory(&pem.Block{Type: PublicKeyPEMType, Bytes: []byte{1, 2, 3}}),
		"headers":        pem.EncodeToMemory(&pem.Block{Type: PublicKeyPEMType, Headers: map[string]string{"a": "b"}, Bytes: []byte{1}}),
	}
	for name, b := range cases {
		_, err := ParsePublicKey(b)
		assert.ErrorIs(t, err, ErrMalformedKey, name)
	}
	_, err := Sign(pub, module)
	assert.ErrorIs(t, err, ErrMalformedKey, "public key is not a private key")
	// An error about a private key pasted as a public key does not echo it.
	_, err = ParsePublicKey(priv)
	assert.NotContains(t, err.Error(), strings.Split(string(priv), "\n")[1])
}

func TestPrivateKeyFileMode(t *testing.T) {
	_, priv, _, err := GenerateKey()
	require.NoError(t, err)
	dir := t.TempDir()
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o660} {
		p := filepath.Join(dir, "k.key")
		require.NoError(t, os.WriteFile(p, priv, 0o600))
		require.NoError(t, os.Chmod(p, mode))
		_, err := ReadPrivateKeyFile(p)
		require.ErrorIs(t, err, ErrKeyPermissions, "mode %04o", mode)
		assert.Contains(t, err.Error(), "chmod 600")
		assert.NotContains(t, err.Error(), "PRIVATE KEY")
	}
	for _, mode := range []os.FileMode{0o600, 0o400} {
		p := filepath.Join(dir, "k.key")
		require.NoError(t, os.Chmod(p, mode))
		b, err := ReadPrivateKeyFile(p)
		require.NoError(t, err, "mode %04o", mode)
		assert.Equal(t, priv, b)
		require.NoError(t, os.Chmod(p, 0o600))
	}
	_, err = ReadPrivateKeyFile(filepath.Join(dir, "missing.key"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = ReadPrivateKeyFile(dir)
	require.Error(t, err, "a directory is not a key")
	big := filepath.Join(dir, "big.key")
	require.NoError(t, os.WriteFile(big, make([]byte, MaxKeyFileBytes+1), 0o600))
	_, err = ReadPrivateKeyFile(big)
	require.ErrorIs(t, err, ErrTooLarge)
}

func TestParseSignatureStrict(t *testing.T) {
	_, priv := seedKey(t, 1)
	sig, err := Sign(priv, module)
	require.NoError(t, err)
	good := string(sig.Marshal())
	b64 := base64.StdEncoding.EncodeToString(sig.Sig)
	hexd := sig.Digest.String()
	obj := func(format, key, sha, s string) string {
		return `{"format":"` + format + `","key":"` + key + `","sha256":"` + sha + `","signature":"` + s + `"}`
	}
	bad := map[string]string{
		"empty":            "",
		"array":            "[]",
		"unknown field":    strings.Replace(good, `"format"`, `"extra":"x","format"`, 1),
		"duplicate field":  strings.Replace(good, `"format"`, `"key":"`+sig.KeyID+`","format"`, 1),
		"missing field":    `{"format":"` + Format + `","key":"` + sig.KeyID + `","sha256":"` + hexd + `"}`,
		"wrong format":     obj("caphost-guest-signature-v2", sig.KeyID, hexd, b64),
		"upper hex":        obj(Format, sig.KeyID, strings.ToUpper(hexd), b64),
		"short key":        obj(Format, sig.KeyID[:15], hexd, b64),
		"short sig":        obj(Format, sig.KeyID, hexd, b64[:40]),
		"url base64":       obj(Format, sig.KeyID, hexd, strings.NewReplacer("+", "-", "/", "_").Replace(b64)+"-_"),
		"number value":     `{"format":1}`,
		"trailing":         good + "{}",
		"truncated":        good[:len(good)-3],
		"too large":        good + strings.Repeat(" ", MaxSignatureFileBytes),
		"upper-case field": strings.Replace(good, `"format"`, `"FORMAT"`, 1),
		"mixed-case field": strings.Replace(good, `"signature"`, `"Signature"`, 1),
		"lone surrogate":   strings.Replace(good, `"format":"`, `"format":"\ud800`, 1),
		"invalid utf-8":    strings.Replace(good, `"format":"`, "\"format\":\"\xff", 1),
		"null value":       `{"format":null,"key":"` + sig.KeyID + `","sha256":"` + hexd + `","signature":"` + b64 + `"}`,
		"null document":    "null",
	}
	for name, in := range bad {
		_, err := ParseSignature([]byte(in))
		assert.ErrorIs(t, err, ErrMalformedSignature, name)
	}
	// The refusal names the member, never a value.
	for name, want := range map[string]string{
		"duplicate field":  "duplicate member /key",
		"upper-case field": "unknown member /FORMAT",
		"null value":       "null (omit the member instead) at /format",
		"missing field":    `field "signature" is missing`,
	} {
		_, err := ParseSignature([]byte(bad[name]))
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), want, name)
		assert.NotContains(t, err.Error(), sig.KeyID, name)
	}
	_, err = ParseSignature([]byte(good + strings.Repeat(" ", MaxSignatureFileBytes)))
	assert.ErrorIs(t, err, ErrTooLarge)
	_, err = ParseSignature([]byte(" \n" + good + "\n\n"))
	assert.NoError(t, err, "surrounding whitespace is fine")

	_, err = ParsePin("zz")
	assert.ErrorIs(t, err, ErrMalformedPin)
}

// FuzzParseSignature: arbitrary bytes never panic; anything accepted
// re-encodes to a document that parses to the same value.
func FuzzParseSignature(f *testing.F) {
	if b, err := os.ReadFile("testdata/module.wasm.sig"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"format":"caphost-guest-signature-v1","key":"0123456789abcdef","sha256":"","signature":""}`))
	f.Add([]byte(`{"format":"x","format":"y"}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSignature(data)
		if err != nil {
			if s != nil {
				t.Fatal("value with error")
			}
			return
		}
		again, err := ParseSignature(s.Marshal())
		if err != nil {
			t.Fatalf("re-encoding does not parse: %v", err)
		}
		if again.KeyID != s.KeyID || again.Digest != s.Digest || string(again.Sig) != string(s.Sig) {
			t.Fatal("round trip changed the value")
		}
	})
}

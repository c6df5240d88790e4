package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caphost/caphost/plugins/trust"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// guestSetup creates a key pair and a module in a temp dir.
func guestSetup(t *testing.T, name string) (dir, id string) {
	t.Helper()
	dir = t.TempDir()
	code, out, errOut := cli(t, "guest", "keygen", "--out", dir, "--name", name)
	require.Equal(t, 0, code, errOut)
	m := regexp.MustCompile(`key id: ([0-9a-f]{16})`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "m.wasm"), []byte("\x00asm\x01\x00\x00\x00 cli test module"), 0o644))
	return dir, m[1]
}

func TestGuestKeygen(t *testing.T) {
	dir, id := guestSetup(t, "release")
	pub, err := os.Stat(filepath.Join(dir, "release.pub"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), pub.Mode().Perm())
	key, err := os.Stat(filepath.Join(dir, "release.key"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), key.Mode().Perm())
	k, err := trust.ReadPublicKeyFile(filepath.Join(dir, "release.pub"))
	require.NoError(t, err)
	assert.Equal(t, id, k.ID(), "printed id is the public key's id")

	code, _, errOut := cli(t, "guest", "keygen", "--out", dir, "--name", "release")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "already exists")

	code, _, _ = cli(t, "guest", "keygen", "--out", dir)
	assert.Equal(t, 2, code)
	code, _, _ = cli(t, "guest", "keygen", "--out", dir, "--name", "../escape")
	assert.Equal(t, 2, code)
}

func TestGuestSignVerify(t *testing.T) {
	dir, id := guestSetup(t, "release")
	mod := filepath.Join(dir, "m.wasm")
	code, out, errOut := cli(t, "guest", "sign", "--key", filepath.Join(dir, "release.key"), mod)
	require.Equal(t, 0, code, errOut)
	b, err := os.ReadFile(mod)
	require.NoError(t, err)
	digest := trust.Digest(b).String()
	assert.Contains(t, out, "sha256: "+digest)
	assert.Contains(t, out, "key id: "+id)
	assert.NotContains(t, out+errOut, "PRIVATE KEY")
	sig, err := trust.ReadSignatureFile(mod + ".sig")
	require.NoError(t, err)
	assert.Equal(t, id, sig.KeyID)

	pub := filepath.Join(dir, "release.pub")
	code, out, errOut = cli(t, "guest", "verify", "--pub", pub, mod, "--sha256", digest)
	assert.Equal(t, 0, code, out+errOut)
	assert.Contains(t, out, "pin: "+digest)
	assert.Contains(t, out, "OK: signed by key "+id)

	code, out, _ = cli(t, "guest", "verify", "--pub", pub, mod, "--sig", mod+".sig")
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "pin: none given")

	// A second, unrelated trusted key does not hurt.
	other, _ := guestSetup(t, "other")
	code, out, _ = cli(t, "guest", "verify", "--pub", filepath.Join(other, "other.pub"), "--pub", pub, mod)
	assert.Equal(t, 0, code, out)
}

func TestGuestVerifyFailures(t *testing.T) {
	dir, _ := guestSetup(t, "release")
	mod := filepath.Join(dir, "m.wasm")
	pub := filepath.Join(dir, "release.pub")
	code, _, errOut := cli(t, "guest", "sign", "--key", filepath.Join(dir, "release.key"), mod)
	require.Equal(t, 0, code, errOut)
	orig, err := os.ReadFile(mod)
	require.NoError(t, err)

	// Tampered module: one byte flipped after signing.
	tampered := append([]byte(nil), orig...)
	tampered[len(tampered)-1] ^= 1
	require.NoError(t, os.WriteFile(mod, tampered, 0o644))
	code, out, _ := cli(t, "guest", "verify", "--pub", pub, mod)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "FAILED: ")
	assert.Contains(t, out, "digest mismatch")
	require.NoError(t, os.WriteFile(mod, orig, 0o644))

	// Wrong pin.
	code, out, _ = cli(t, "guest", "verify", "--pub", pub, mod, "--sha256", strings.Repeat("ab", 32))
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "digest mismatch")

	// Signed by a key that is not trusted.
	other, _ := guestSetup(t, "other")
	code, out, _ = cli(t, "guest", "verify", "--pub", filepath.Join(other, "other.pub"), mod)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "not trusted")

	// Missing signature file.
	code, out, _ = cli(t, "guest", "verify", "--pub", pub, mod, "--sig", filepath.Join(dir, "nope.sig"))
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "FAILED: ")

	// Corrupted signature bytes.
	sig, err := trust.ReadSignatureFile(mod + ".sig")
	require.NoError(t, err)
	sig.Sig[0] ^= 1
	require.NoError(t, os.WriteFile(mod+".sig", sig.Marshal(), 0o644))
	code, out, _ = cli(t, "guest", "verify", "--pub", pub, mod)
	assert.Equal(t, 1, code)
	assert.Contains(t, out, "does not verify")

	// Usage errors.
	code, _, _ = cli(t, "guest", "verify", mod)
	assert.Equal(t, 2, code, "--pub is required")
	code, _, _ = cli(t, "guest", "verify", "--pub", pub)
	assert.Equal(t, 2, code, "the module is required")
	code, _, _ = cli(t, "guest", "verify", "--pub", pub, mod, "--sha256", "xyz")
	assert.Equal(t, 2, code)
	code, _, _ = cli(t, "guest", "sign", mod)
	assert.Equal(t, 2, code, "--key is required")
}

func TestGuestSignRefusesOpenKey(t *testing.T) {
	dir, _ := guestSetup(t, "release")
	key := filepath.Join(dir, "release.key")
	require.NoError(t, os.Chmod(key, 0o644))
	code, _, errOut := cli(t, "guest", "sign", "--key", key, filepath.Join(dir, "m.wasm"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "chmod 600")
	assert.NotContains(t, errOut, "PRIVATE KEY")
	_, err := os.Stat(filepath.Join(dir, "m.wasm.sig"))
	assert.ErrorIs(t, err, os.ErrNotExist, "nothing signed")
}

package rlsconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLoadFiles: files are read bounded and every problem of every file
// is reported at once, located; good files combine into one Config.
func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(good, []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o600))
	require.NoError(t, os.WriteFile(bad, []byte("domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: eon, requests_per_unit: 1}\n"), 0o600))
	require.NoError(t, os.WriteFile(big, []byte("domain: c\n#"+strings.Repeat("x", MaxFileBytes)), 0o600))

	c, err := LoadFiles([]string{good})
	require.NoError(t, err)
	assert.True(t, c.HasDomain("a"))

	_, err = LoadFiles([]string{good, bad, big, filepath.Join(dir, "missing.yaml")})
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Len(t, e.Problems, 3)
	assert.Contains(t, err.Error(), "bad.yaml:4: descriptors[0].rate_limit.unit: invalid unit")
	assert.Contains(t, err.Error(), "big.yaml: more than 1048576 bytes")
	assert.Contains(t, err.Error(), "missing.yaml: cannot read: no such file or directory")

	_, err = LoadFiles([]string{good, good})
	assert.ErrorContains(t, err, "duplicate domain")
	_, err = LoadFiles(nil)
	assert.ErrorIs(t, err, ErrInvalid)
}

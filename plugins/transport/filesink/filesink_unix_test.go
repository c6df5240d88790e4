//go:build unix

package filesink

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/plugins/transport"
)

// TestTakenNamesAreNotRewritten: a name already taken in the directory —
// a document, a symlink (dangling or not), a FIFO — is Accepted as
// "file-exists" without writing, following or blocking; the check opens
// rather than stats (the sandbox refuses stat).
func TestTakenNamesAreNotRewritten(t *testing.T) {
	dir := t.TempDir()
	s, err := New(map[string]string{"dir": dir}, transport.Env{})
	require.NoError(t, err)
	final := filepath.Join(dir, "intent-7.json")
	other := filepath.Join(t.TempDir(), "target")
	for name, take := range map[string]func() error{
		"document": func() error { return os.WriteFile(final, []byte("first"), 0o600) },
		"symlink":  func() error { return os.Symlink(other, final) },
		"fifo":     func() error { return syscall.Mkfifo(final, 0o600) },
	} {
		require.NoError(t, take(), name)
		r := s.Deliver(context.Background(), message(t, "second"))
		assert.Equal(t, transport.Receipt{Outcome: transport.Accepted, Code: "file-exists", ProviderRef: "intent-7.json"}, r, name)
		_, err := os.Stat(other)
		assert.ErrorIs(t, err, os.ErrNotExist, "%s: the link was not followed", name)
		require.NoError(t, os.Remove(final))
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "no temp file left")
}

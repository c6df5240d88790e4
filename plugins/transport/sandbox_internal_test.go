package transport

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSandboxCheckRefusesTheRoot: a grant of "/" (in any spelling) is
// refused before anything is applied; a path below it is not.
func TestSandboxCheckRefusesTheRoot(t *testing.T) {
	for _, sb := range []Sandbox{{WriteDirs: []string{"/"}}, {ReadDirs: []string{"//"}}, {ReadFiles: []string{"/./"}},
		{ReadDirs: []string{"/tmp/.."}}} {
		require.ErrorIs(t, sb.check(), errSandbox, "%+v", sb)
	}
	require.NoError(t, Sandbox{WriteDirs: []string{"/tmp"}, ReadDirs: []string{"/etc/ssl/certs"}}.check())
	require.ErrorIs(t, Sandbox{ReadDirs: []string{"tmp"}}.check(), errSandbox)
}

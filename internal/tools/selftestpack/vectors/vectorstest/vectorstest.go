// Package vectorstest is the shared first step of a reference guest's
// self-test test: read the guest's vectors file, check it names the
// guest, and require the guest (run natively through the SDK dispatcher)
// to answer every vector byte for byte. What each answer must mean is
// asserted by hand in the guest's own test.
package vectorstest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/abi/guest"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors"
)

// Load reads path, requires it to be the vectors of module and m to answer
// every vector exactly, and returns the file.
func Load(tb testing.TB, path, module string, m *guest.Module) *vectors.File {
	tb.Helper()
	f, err := vectors.ReadFile(path)
	require.NoError(tb, err)
	require.Equal(tb, module, f.Module)
	require.NotEmpty(tb, f.Vectors)
	d, err := guest.NewDispatcher(m)
	require.NoError(tb, err)
	require.Empty(tb, f.Mismatches(func(e abi.Export, req []byte) []byte { return d.Handle(e, req, nil) }))
	return f
}

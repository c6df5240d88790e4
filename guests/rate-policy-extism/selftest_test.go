package main

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/internal/tools/selftestpack/vectors"
)

// TestSelfTestVectors: this guest has no vectors file of its own; `make
// guests` bundles its native twin's (guests/rate-policy/selftest.json, whose
// answers that guest's test asserts by hand), because the two share one
// policy table and must answer every request alike. Every vector is
// answered byte for byte by Handle, the whole guest minus the Extism glue.
func TestSelfTestVectors(t *testing.T) {
	f, err := vectors.ReadFile(filepath.Join("..", "rate-policy", "selftest.json"))
	require.NoError(t, err)
	require.Equal(t, Description().Module, f.Module)
	require.NotEmpty(t, f.Vectors)
	var st State
	require.Empty(t, f.Mismatches(func(e abi.Export, req []byte) []byte { return Handle(e, req, nil, &st) }))
}

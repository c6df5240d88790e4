//go:build !race

// Allocation counts hold only without the race detector, whose runtime
// allocates on its own. make test runs every test of a *_norace_test.go
// file in a pass without it.

package plugins

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
)

// TestManagerUseAllocs: pinning a module for a call allocates nothing, and
// neither does a native call of a pre-encoded request into a warm pool
// (wazero registers the instance's watch function once, patch 0007).
func TestManagerUseAllocs(t *testing.T) {
	ctx := context.Background()
	mgr := NewManager(newEngine(t, Config{}), ManagerOptions{Verify: AcceptAnyModule, SkipSelfTest: true})
	t.Cleanup(func() { _ = mgr.Close(ctx) })
	require.NoError(t, mgr.Load(ctx, "echo", wasmOf(t, "echo"), Limits{PoolSize: 1}))
	in := (&abi.CodecEncodeRequest{Schema: "echo", Value: make([]byte, 256)}).AppendTo(nil)
	out := make([]byte, 0, 512)
	call := func(g Guest) (err error) {
		out, err = g.Call(ctx, abi.ExportCodecEncode, in, out[:0])
		return err
	}
	require.NoError(t, mgr.Use(ctx, "echo", call)) // warm: the instance exists
	allocs := testing.AllocsPerRun(100, func() {
		if err := mgr.Use(ctx, "echo", call); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs)
}

package plugins

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
)

func init() { testGuests = append(testGuests, "testdata/guests/deeprecurse") }

// TestGoRecursionWithinTheStackLimit: the default MaxStackBytes leaves Go
// guests room. A Go guest's frames sit both on its goroutine stack in linear
// memory and, some tens of bytes each, on the engine's call stack: measured,
// a recursion 30,000 deep fits 1 MiB and one 100,000 deep needs 4 MiB (at 16
// MiB, 256 pages of memory run out first). A recursion without end fails
// closed at the stack limit.
func TestGoRecursionWithinTheStackLimit(t *testing.T) {
	m := load(t, newEngine(t, Config{}), "deeprecurse", Limits{MemoryPages: 256, CallTimeout: 10 * time.Second})
	require.Equal(t, DefaultLimits().MaxStackBytes, m.Limits().MaxStackBytes)
	down := func(n int) (*abi.CodecEncodeResponse, error) {
		return m.CodecEncode(context.Background(), &abi.CodecEncodeRequest{Schema: "x", Value: []byte(strconv.Itoa(n))})
	}
	for _, n := range []int{1000, 30_000} {
		out, err := down(n)
		require.NoError(t, err, "depth %d", n)
		assert.Equal(t, strconv.Itoa(n), string(out.Payload))
	}
	_, err := down(-1) // never reaches 0
	ge := requireClass(t, err, ClassTrap)
	assert.Contains(t, ge.Detail, "stack overflow")
}

// TestStackOverflowIsATrap: a guest recursing without end fails with a trap
// naming the overflow at its module's stack limit, and serves again.
func TestStackOverflowIsATrap(t *testing.T) {
	m := load(t, newEngine(t, Config{}), "recursion", Limits{MaxStackBytes: 64 << 10, PoolSize: 1})
	recurse := func(n byte) (*abi.CodecEncodeResponse, error) {
		return m.CodecEncode(context.Background(), &abi.CodecEncodeRequest{Schema: "x", Value: []byte{n}})
	}
	_, err := recurse(0xff) // n = -1: never reaches 0
	ge := requireClass(t, err, ClassTrap)
	assert.Contains(t, ge.Detail, "stack overflow")
	out, err := recurse(100)
	require.NoError(t, err)
	assert.Equal(t, "recursion", string(out.Payload))
}

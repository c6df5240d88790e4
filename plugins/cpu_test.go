package plugins

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins/internal/threadcpu"
)

// TestMeasuredCalls: a measured call answers what Exchange answers and
// reports the thread's CPU time over the guest call and the budget it ran
// under. Only bounds that hold on any machine are checked: the budget is
// at most the call timeout, and the CPU never more than the wall time of
// the whole call (a loaded machine may give the guest much less).
func TestMeasuredCalls(t *testing.T) {
	if !threadcpu.Supported() {
		t.Fatal("this test needs Linux's per-thread CPU clock (CLOCK_THREAD_CPUTIME_ID): run it on Linux")
	}
	e := newEngine(t, Config{})
	ctx := context.Background()

	echo := load(t, e, "echo", Limits{CallTimeout: time.Second})
	var cpu CallCPU
	resp, err := CodecDecodeMeasured(ctx, echo, &abi.CodecDecodeRequest{Schema: "echo", StoredVersion: 1, Payload: []byte("hi")}, &cpu)
	require.NoError(t, err)
	assert.Equal(t, []byte("hi"), resp.Value)
	assert.True(t, cpu.Measured)
	assert.True(t, cpu.Budget > 0 && cpu.Budget <= time.Second, "budget %v", cpu.Budget)

	const limit = 50 * time.Millisecond
	loop := load(t, e, "loop", Limits{CallTimeout: limit})
	warmPool(t, loop)
	t0 := time.Now()
	var enc abi.CodecEncodeResponse
	err = loop.ExchangeMeasured(ctx, abi.ExportCodecEncode, &abi.CodecEncodeRequest{Schema: "x", Value: []byte("a")}, &enc, &cpu)
	wall := time.Since(t0)
	require.ErrorIs(t, err, ClassDeadline)
	assert.True(t, cpu.Measured)
	assert.True(t, cpu.Budget > 0 && cpu.Budget <= limit, "budget %v", cpu.Budget)
	assert.Equal(t, limit, cpu.Limit)
	assert.True(t, cpu.CPU > 0 && cpu.CPU <= wall, "a spinning guest charged %v of %v wall", cpu.CPU, wall)

	// A caller's earlier deadline is the budget.
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	err = loop.ExchangeMeasured(short, abi.ExportCodecEncode, &abi.CodecEncodeRequest{Schema: "x", Value: []byte("a")}, &enc, &cpu)
	require.ErrorIs(t, err, ClassDeadline)
	assert.True(t, cpu.Budget <= 10*time.Millisecond, "budget %v", cpu.Budget)
	assert.Equal(t, limit, cpu.Limit, "the module's limit, whatever the caller's deadline")

	// A call that never enters the guest is not measured.
	err = loop.ExchangeMeasured(ctx, abi.ExportCacheAdmit, &abi.AdmitRequest{}, &abi.AdmitResponse{}, &cpu)
	require.ErrorIs(t, err, ClassNotDeclared)
	assert.False(t, cpu.Measured)
}

package extism

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

// TestExtismMeasuredCalls: the Extism flavour measures a call as the
// native one does (plugins.TestMeasuredCalls): the thread's CPU time over
// the guest call, the budget and the module's call timeout. Only bounds
// that hold on any machine are checked.
func TestExtismMeasuredCalls(t *testing.T) {
	if !plugins.CallCPUSupported() {
		t.Fatal("this test needs Linux's per-thread CPU clock (CLOCK_THREAD_CPUTIME_ID): run it on Linux")
	}
	ctx := context.Background()
	e := newExtism(t, plugins.Config{})
	const limit = 200 * time.Millisecond
	m := loadExt(t, e, "testguest", plugins.Limits{CallTimeout: limit, PoolSize: 1})

	var cpu plugins.CallCPU
	_, err := plugins.CodecDecodeMeasured(ctx, m, &abi.CodecDecodeRequest{Schema: "echo", StoredVersion: 1}, &cpu)
	require.ErrorIs(t, err, abi.CodeUnsupported, "a status is the guest's answer")
	assert.True(t, cpu.Measured)
	assert.Equal(t, limit, cpu.Limit)
	assert.True(t, cpu.Budget > 0 && cpu.Budget <= limit, "budget %v", cpu.Budget)

	t0 := time.Now()
	var sel abi.RateSelectResponse
	err = m.ExchangeMeasured(ctx, abi.ExportRateSelect, &abi.RateSelectRequest{Route: "/loop", Method: "GET"}, &sel, &cpu)
	wall := time.Since(t0)
	requireClass(t, err, plugins.ClassDeadline)
	assert.True(t, cpu.Measured)
	assert.True(t, cpu.CPU > 0 && cpu.CPU <= wall, "a looping guest charged %v of %v wall", cpu.CPU, wall)

	// An instance to replace the one the deadline discarded, started
	// outside the short context below.
	_, err = plugins.CodecDecode(ctx, m, &abi.CodecDecodeRequest{Schema: "echo", StoredVersion: 1})
	require.ErrorIs(t, err, abi.CodeUnsupported)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err = m.ExchangeMeasured(short, abi.ExportRateSelect, &abi.RateSelectRequest{Route: "/loop", Method: "GET"}, &sel, &cpu)
	requireClass(t, err, plugins.ClassDeadline)
	assert.True(t, cpu.Budget <= 50*time.Millisecond, "budget %v", cpu.Budget)
	assert.Equal(t, limit, cpu.Limit)
}

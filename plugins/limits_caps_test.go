package plugins

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/caphost/caphost/policy"
)

// TestConfigCapsWithinEngineCaps: every limit the configuration accepts
// (policy's caps) is one the engine loads; a value `caphost check` accepts
// must never fail at load with ErrLimitExceedsCap.
func TestConfigCapsWithinEngineCaps(t *testing.T) {
	h := HardCaps()
	assert.LessOrEqual(t, uint32(policy.GuestMaxMemoryPages), h.MemoryPages)
	assert.LessOrEqual(t, policy.GuestMaxCallTimeout, h.CallTimeout)
	assert.LessOrEqual(t, policy.GuestMaxIOBytes, h.MaxInputBytes)
	assert.LessOrEqual(t, policy.GuestMaxIOBytes, h.MaxOutputBytes)
	assert.LessOrEqual(t, policy.GuestMaxHostCalls, h.MaxHostCalls)
	assert.LessOrEqual(t, policy.GuestMaxPoolSize, h.PoolSize)
	assert.LessOrEqual(t, uint64(policy.GuestMaxRecycleAfter), h.RecycleAfter)
	assert.LessOrEqual(t, policy.GuestMaxStackBytes, h.MaxStackBytes)
	max := Limits{
		MemoryPages: uint32(policy.GuestMaxMemoryPages), CallTimeout: policy.GuestMaxCallTimeout,
		MaxInputBytes: policy.GuestMaxIOBytes, MaxOutputBytes: policy.GuestMaxIOBytes,
		MaxHostCalls: policy.GuestMaxHostCalls, PoolSize: policy.GuestMaxPoolSize, RecycleAfter: uint64(policy.GuestMaxRecycleAfter),
		MaxStackBytes: policy.GuestMaxStackBytes,
	}
	assert.NoError(t, max.withDefaults(DefaultLimits()).check(h))
}

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
)

// TestFenceProvision: `caphost fence provision` creates a resource's fence
// counter at the registration's high watermark, repeats safely, and never
// lowers or replaces one (conflict and regression exit 1, changing nothing).
func TestFenceProvision(t *testing.T) {
	srv := redistest.StartStandalone(t)
	path := capFile(t, srv.Addr(), "  fenced-lease: {provider: redis, redis-role: coordination, purposes: [ledger]}\n")
	digest, other := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	provision := func(args ...string) (int, string) {
		t.Helper()
		code, out, errOut := cli(t, append([]string{"fence", "provision", "--config", path}, args...)...)
		return code, out + errOut
	}
	reg := []string{"--purpose", "ledger", "--resource", "acct-9", "--epoch", "3", "--digest", digest}

	code, out := provision(append(reg, "--high-watermark", "7")...)
	require.Equal(t, 0, code, out)
	assert.Equal(t, "PROVISIONED: counter at epoch 3, 7\n", out)
	code, out = provision(append(reg, "--high-watermark", "7")...)
	require.Equal(t, 0, code, out)
	assert.Equal(t, "ALREADY_SAME: counter at epoch 3, 7\n", out, "a repeat is safe")

	code, out = provision(append(reg, "--high-watermark", "9")...)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "REGRESSION: counter at epoch 3, 7")
	conflict := []string{"--purpose", "ledger", "--resource", "acct-9", "--epoch", "4", "--digest", other}
	code, out = provision(conflict...)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "REGISTRATION_CONFLICT")
	code, out = provision(append(reg, "--high-watermark", "7")...)
	require.Equal(t, 0, code, out)
	assert.Equal(t, "ALREADY_SAME: counter at epoch 3, 7\n", out, "neither refusal changed the counter")

	for _, bad := range [][]string{
		{"--purpose", "payroll", "--resource", "acct-9", "--epoch", "3", "--digest", digest},
		{"--purpose", "ledger", "--resource", "acct-9", "--epoch", "0", "--digest", digest},
		{"--purpose", "ledger", "--resource", "acct-9", "--epoch", "3", "--digest", "ABAB"},
		{"--purpose", "ledger", "--epoch", "3", "--digest", digest},
		append(reg, "--high-watermark", "-1"),
	} {
		code, out = provision(bad...)
		assert.Equal(t, 2, code, "%v: %s", bad, out)
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
)

// capFile writes a configuration with one coordination deployment at addr
// and the given capabilities block.
func capFile(t *testing.T, addr, caps string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "caphost.yaml")
	body := fmt.Sprintf(`redis:
  deployments:
    main:
      standalone: {endpoint: %q}
      auth: {admin-shared: true}
      timeouts: {connect: 500ms, command: 500ms, acquire: 100ms, shutdown: 2s}
  roles:
    coordination: {deployment: main, required: true, expected-eviction: noeviction}
  programs: {mode: evalsha-managed}
  keys:
    app: demo
    env: test
    hmac:
      write-version: 1
      versions: {1: "secret://env/CAPHOST_KEY_V1"}
capabilities:
%s`, addr, caps)
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// TestCheckRunsTheCapabilityDecoder: check runs the rate-limit capability's
// own strict decoder — the reported case printed "ok" for a negative limit
// and a misspelt key that serve then refused.
func TestCheckRunsTheCapabilityDecoder(t *testing.T) {
	path := capFile(t, "127.0.0.1:1", `  rate-limit:
    provider: redis
    redis-role: coordination
    policies:
      login:
        revision: r1
        algoritm: fixed-window
        limit: -5
        window: 1m
        failure-mode: fail-closed
        subject: [client-ip]
`)
	code, out, _ := cli(t, "check", "--config", path)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "capabilities.rate-limit.policies.login.algoritm: unknown key")
	assert.Contains(t, out, "[config.unknown-key]")
	assert.Contains(t, out, "capabilities.rate-limit.policies.login.algorithm: unknown algorithm")
	assert.Contains(t, out, "2 problem(s)")
	assert.NotContains(t, out, "ok: ")

	path = capFile(t, "127.0.0.1:1", "  rate-limit:\n    provider: redis\n    redis-role: coordination\n    policies:\n"+
		"      login: {revision: r1, algorithm: fixed-window, limit: -5, window: 1m, failure-mode: fail-closed, subject: [client-ip]}\n")
	code, out, _ = cli(t, "check", "--config", path)
	assert.Equal(t, 1, code, out)
	assert.Regexp(t, `capabilities\.rate-limit\.policies\.login\.limit: .*\[rate\.[a-z-]+\]`, out)
}

func TestCheckRejectsUnimplementedCapability(t *testing.T) {
	path := capFile(t, "127.0.0.1:1", "  session: {provider: redis, redis-role: coordination, no-such-key: 1, idle-ttl: \"not-a-duration\"}\n")
	code, out, _ := cli(t, "check", "--config", path)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "capabilities.session: capability session is not implemented by this host yet (implemented: rate-limit, cache, lease, idempotency, fenced-lease, notify) [capability.unimplemented]")
	assert.Contains(t, out, "1 problem(s)")
}

// TestCapabilitiesCommand prints the actual state of every capability of a
// host assembled from the file, against a real Redis.
func TestCapabilitiesCommand(t *testing.T) {
	srv := redistest.StartStandalone(t)
	path := capFile(t, srv.Addr(), `  rate-limit:
    provider: redis
    redis-role: coordination
    policies:
      login: {revision: r1, algorithm: fixed-window, limit: 10, window: 1m, failure-mode: fail-closed, subject: [client-ip]}
`)
	code, out, errOut := cli(t, "capabilities", "--config", path)
	require.Equal(t, 0, code, out+errOut)
	assert.Regexp(t, `rate-limit\s+active\s+readiness R2 \(claimed R2\)\s+provider redis\s+role coordination \(required\)`, out)
	assert.Contains(t, out, "non-guarantees: exact-across-failover")
	assert.Contains(t, out, "failure mode:   fail-closed (overrides: local-emergency, fail-open)")
	assert.Regexp(t, `rate-policy\s+R\d\s+consumed by rate-limit`, out)
	assert.Regexp(t, `codec\s+R\d\s+nothing consumes it`, out)

	code, out, errOut = cli(t, "capabilities", "--config", path, "--json")
	require.Equal(t, 0, code, out+errOut)
	var doc struct {
		Capabilities []struct {
			Capability string
			State      string
			Readiness  string
			Descriptor *struct {
				Role          string
				Guarantees    []string
				NonGuarantees []string `json:"non-guarantees"`
			}
		}
		GuestKinds []struct{ Kind, Readiness string } `json:"guest-kinds"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Len(t, doc.Capabilities, 6, "every capability this host implements, in registration order")
	assert.Equal(t, "cache", doc.Capabilities[1].Capability)
	assert.Equal(t, "disabled", doc.Capabilities[1].State, "no cache block: nothing built")
	c := doc.Capabilities[0]
	assert.Equal(t, "rate-limit", c.Capability)
	assert.Equal(t, "active", c.State)
	assert.Equal(t, "R2", c.Readiness)
	require.NotNil(t, c.Descriptor)
	assert.Equal(t, "coordination", c.Descriptor.Role)
	assert.NotEmpty(t, c.Descriptor.NonGuarantees)
	assert.Len(t, doc.GuestKinds, 4)

	// Redis down: the required role makes the capability down, not active.
	srv.Kill()
	code, out, _ = cli(t, "capabilities", "--config", path)
	require.Equal(t, 0, code, out)
	assert.Regexp(t, `rate-limit\s+down \(role-`, out)

	// Disabled: nothing built, the state says so.
	off := capFile(t, srv.Addr(), "  rate-limit: {provider: disabled}\n")
	code, out, _ = cli(t, "capabilities", "--config", off)
	require.Equal(t, 0, code, out)
	assert.True(t, strings.Contains(out, "rate-limit   disabled"), out)
}

// TestCapabilitiesShowsTheCache: an active cache capability reports its
// descriptor: readiness, provider, role, guarantees and failure mode, and
// the guest kinds it consumes.
func TestCapabilitiesShowsTheCache(t *testing.T) {
	srv := redistest.StartStandalone(t)
	path := capFile(t, srv.Addr(), "  cache:\n    provider: redis\n    redis-role: coordination\n    regions:\n      products: {ttl: {soft: 30s, hard: 5m}}\n")
	code, out, errOut := cli(t, "capabilities", "--config", path)
	require.Equal(t, 0, code, out+errOut)
	assert.Regexp(t, `cache\s+active\s+readiness R2 \(claimed R2\)\s+provider redis\s+role coordination \(required\)`, out)
	assert.Contains(t, out, "failure mode:   fail-open-to-source")
	assert.Contains(t, out, "invalidation-wins-over-refill")
	assert.Regexp(t, `codec\s+R\d\s+consumed by cache`, out)
	assert.Regexp(t, `cache-region\s+R\d\s+consumed by cache`, out)
}

// TestCapabilitiesShowsTheLease: an active lease capability reports its
// descriptor: the R1 it claims, the coordination role, EFFICIENCY_ONLY and
// what it does not promise; `caphost check` refuses it on the cache role.
func TestCapabilitiesShowsTheLease(t *testing.T) {
	srv := redistest.StartStandalone(t)
	path := capFile(t, srv.Addr(), "  lease:\n    provider: redis\n    redis-role: coordination\n    purposes: [nightly-cleanup]\n")
	code, out, errOut := cli(t, "capabilities", "--config", path)
	require.Equal(t, 0, code, out+errOut)
	assert.Regexp(t, `lease\s+active\s+readiness R1 \(claimed R1\)\s+provider redis\s+role coordination \(required\)`, out)
	assert.Contains(t, out, "failure mode:   fail-closed")
	assert.Contains(t, out, "efficiency-only")
	assert.Contains(t, out, "strict-coordination")

	bad := capFile(t, srv.Addr(), "  lease:\n    provider: redis\n    redis-role: cache\n    max-ttl: 1s\n    drift-budget: 2s\n")
	code, out, _ = cli(t, "check", "--config", bad)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "capabilities.lease.redis-role: a lease needs a correctness role")
	assert.Contains(t, out, "capabilities.lease.max-ttl: must exceed drift-budget (2s)")
	assert.Contains(t, out, "[lease.bounds]")
	assert.Contains(t, out, "3 problem(s)", "with the unbound cache role: every problem at once")
}

// TestCapabilitiesShowsIdempotency: an active idempotency capability
// reports its descriptor: the R1 it claims, the coordination role,
// request-replay and what it does not promise; `caphost check` refuses it
// on the cache role and reports every bad value at once.
func TestCapabilitiesShowsIdempotency(t *testing.T) {
	srv := redistest.StartStandalone(t)
	path := capFile(t, srv.Addr(), "  idempotency:\n    provider: redis\n    redis-role: coordination\n    routes: [create-payment]\n")
	code, out, errOut := cli(t, "capabilities", "--config", path)
	require.Equal(t, 0, code, out+errOut)
	assert.Regexp(t, `idempotency\s+active\s+readiness R1 \(claimed R1\)\s+provider redis\s+role coordination \(required\)`, out)
	assert.Contains(t, out, "failure mode:   fail-closed")
	assert.Contains(t, out, "request-replay")
	assert.Contains(t, out, "at-most-once-per-attempt")
	assert.Contains(t, out, "exactly-once-side-effects")

	bad := capFile(t, srv.Addr(), "  idempotency:\n    provider: redis\n    redis-role: cache\n    max-response-bytes: 0\n    routes: [Payments]\n")
	code, out, _ = cli(t, "check", "--config", bad)
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "capabilities.idempotency.redis-role: idempotency records need a correctness role")
	assert.Contains(t, out, "capabilities.idempotency.max-response-bytes: must be within 1..1048576")
	assert.Contains(t, out, "[idempotency.bounds]")
	assert.Contains(t, out, "[idempotency.routes]")
}

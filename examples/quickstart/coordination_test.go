package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
)

// TestCoordinationScene runs the embedded scene against a Redis configured
// with the README's users, from the redis block of the demo's caphost.yaml
// (the guests are the other scenes'): every invariant holds, as user
// demo-app only, and the scene leaves no connection open.
func TestCoordinationScene(t *testing.T) {
	s := redistest.StartStandalone(t, redistest.WithACL())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pass := readmeUsers(ctx, t, s)

	tmpl, err := os.ReadFile("caphost.yaml")
	require.NoError(t, err)
	block, _, found := strings.Cut(string(tmpl), "\ncapabilities:")
	require.True(t, found, "caphost.yaml has no capabilities block after redis")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "caphost.yaml")
	yaml := strings.NewReplacer("@ADDR@", s.Addr(), "@MODE@", "evalsha-managed").Replace(block) + "\n"
	require.NoError(t, os.WriteFile(cfg, []byte(yaml), 0o600))

	var out strings.Builder
	d := &demo{out: &out, work: dir, env: []string{
		envAppPass + "=" + pass[envAppPass], envAdminPass + "=" + pass[envAdminPass],
		"CAPHOST_DEMO_KEY_V1=" + randomHex(32),
	}}
	require.NoError(t, d.coordinationScene(ctx, cfg), "scene output:\n%s", out.String())
	text := ansi.ReplaceAllString(out.String(), "")
	t.Logf("scene output:\n%s", text)

	assert.Regexp(t, `(?m)^\s+worker A\s+ACQUIRED token (\d+)\.1 \(TTL 200ms\)`, text)
	assert.Regexp(t, `(?m)^\s+worker B\s+ACQUIRED token \d+\.2 .*writes balance 70: committed$`, text)
	assert.Regexp(t, `(?m)^\s+worker A\s+wakes, writes balance 40 with token \d+\.1: REJECTED$`, text)
	assert.Regexp(t, `(?m)^\s+fence: stale token: token \d+\.1 rejected for resource "acct-7" \(STALE, registration ACTIVE at \d+\.2\)$`, text)
	assert.Regexp(t, `(?m)^\s+bank\.db\s+acct-7 balance 70: B's write kept`, text)
	assert.Regexp(t, `(?m)^\s+attempt 1\s+Idempotency-Key "[0-9a-f]{32}", \{"amount_cents":500\}: charged \(charges 1\); the client saw connection reset \(simulated\)$`, text)
	assert.Regexp(t, `(?m)^\s+retry\s+same key, same body -> 201 \{"payment":"pay-1","request":\{"amount_cents":500\}\}, Caphost-Idempotent-Replayed: true; charges still 1$`, text)
	assert.Regexp(t, `(?m)^\s+key reuse\s+same key, \{"amount_cents":900\} -> 422 idempotency-key-reused; charges still 1$`, text)
	assert.LessOrEqual(t, strings.Count(strings.TrimSpace(text), "\n")+1, 15, "the scene is one screen")

	assert.Positive(t, s.CommandCalls(t, "evalsha"), "the fenced and idempotency programs")
	assertLeftClean(ctx, t, s, "the scene")
}

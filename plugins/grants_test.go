package plugins

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/policy"
)

func init() {
	testGuests = append(testGuests, "testdata/guests/hostcalls")
}

// A module links only the caphost_v1 imports it was granted: without a
// grant the load fails naming each ungranted import and the grant it needs;
// with the grants it loads, and its log line and event reach the host.
func TestGrantsDecideWhichImportsLink(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	obs := newRec()
	e := newEngine(t, Config{
		Observer: obs, CountEvents: []string{"test.allowed"},
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	wasm := wasmOf(t, "hostcalls") // imports caphost_v1.log and caphost_v1.count

	_, err := e.Load(ctx, "hostcalls", wasm, Limits{})
	ge := requireClass(t, err, ClassForbiddenImport)
	assert.Contains(t, ge.Detail, "caphost_v1.log (not granted: add log to the module's grants)")
	assert.Contains(t, ge.Detail, "caphost_v1.count (not granted: add count to the module's grants)")

	_, err = e.Load(ctx, "hostcalls", wasm, Limits{Grants: GrantLog})
	ge = requireClass(t, err, ClassForbiddenImport)
	assert.NotContains(t, ge.Detail, "caphost_v1.log")
	assert.Contains(t, ge.Detail, "caphost_v1.count (not granted")
	assert.Empty(t, logs.String(), "a refused module never ran")

	m, err := e.Load(ctx, "hostcalls", wasm, Limits{Grants: GrantLog | GrantCount})
	require.NoError(t, err)
	out, err := m.CodecEncode(ctx, &abi.CodecEncodeRequest{Schema: "imports", Value: []byte("me")})
	require.NoError(t, err)
	assert.Equal(t, "me", string(out.Payload))
	assert.Contains(t, logs.String(), `guest_msg="hello?[31m from me"`)
	assert.Equal(t, []string{"test.allowed"}, obs.events)

	// A module that imports nothing of caphost_v1 needs no grant.
	load(t, e, "rate-policy", Limits{})
}

func TestGrantNames(t *testing.T) {
	assert.Equal(t, GrantLog|GrantCount, GrantsOf("log", "count"))
	assert.Equal(t, AllGrants, GrantsOf(policy.GuestGrants()...), "every grant the configuration accepts is a plugins grant")
	assert.Equal(t, policy.GuestGrants(), AllGrants.Names())
	assert.Equal(t, Grants(0), GrantsOf("exec", "Log", ""), "a name that is not a grant grants nothing")
	assert.Equal(t, "none", Grants(0).String())
	assert.Equal(t, "count,log", AllGrants.String())
	assert.Empty(t, GrantLog.Refusal("caphost_v1.log", abi.ImportLog))
	assert.Equal(t, "x.count (not granted: add count to the module's grants)", GrantLog.Refusal("x.count", abi.ImportCount))
	assert.Contains(t, AllGrants.Refusal("caphost_v1.exec", "exec"), "not a caphost_v1 import")
}

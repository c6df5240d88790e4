package intent

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

var testNow = time.UnixMilli(1_767_225_600_000).UTC()

// testPlan is a small email plan; secret appears in the recipient and the
// body so leak tests can look for it.
func testPlan(t testing.TB, secret string) Plan {
	t.Helper()
	r, err := transport.NewRecipient("alice+" + secret + "@example.com")
	require.NoError(t, err)
	return Plan{Recipient: r, Transports: []string{"primary", "fallback"}, CreatedAt: testNow, Message: render.Result{
		Module: "renderer", ModuleSHA256: sha256.Sum256([]byte("renderer.wasm")), Template: "welcome", Version: 1,
		RequestedLocale: "en", Locale: "en", Channel: render.Email, Now: testNow, Parts: []render.Part{
			{Name: "subject", ContentType: "text/plain; charset=utf-8", Body: []byte("Welcome " + secret)},
			{Name: "text", ContentType: "text/plain; charset=utf-8", Body: []byte("Hello " + secret + "\n")},
		}}}
}

func runtimeConfig(topo policy.Topology) policy.RedisConfig {
	return runtimeConfigTimeout(topo, 2*time.Second)
}

// runtimeConfigTimeout sets the command timeout (acquire and shutdown
// follow it, as the config's ordering rules require).
func runtimeConfigTimeout(topo policy.Topology, cmd time.Duration) policy.RedisConfig {
	cfg := redistest.ExampleConfig("", policy.RoleCoordination)
	dep := cfg.Deployments["main"]
	dep.Topology = topo
	dep.Timeouts.Command, dep.Timeouts.Acquire, dep.Timeouts.Shutdown = cmd, cmd/2, 2*cmd
	cfg.Deployments["main"] = dep
	return cfg
}

func newRuntime(t testing.TB, cfg policy.RedisConfig) *runtime.Runtime {
	t.Helper()
	rt, err := runtime.New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

func standaloneStore(t testing.TB, addr string, cfg Config) *Store {
	t.Helper()
	s, err := New(newRuntime(t, runtimeConfig(&policy.Standalone{Endpoint: addr})), cfg)
	require.NoError(t, err)
	return s
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

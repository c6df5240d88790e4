package guard

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/policy/commands"
	"github.com/caphost/caphost/runtime/certainty"
)

const ns = "ca:demo:dev:"

var testSHA = strings.Repeat("ab", 20)

type allow struct{}

func (allow) AllowSHA(s string) bool      { return s == testSHA }
func (allow) AllowFunction(n string) bool { return n == "caphost_lease_acquire" }

// recorder is a concurrency-safe Observer.
type recorder struct {
	mu       sync.Mutex
	admitted []string
	rejected []string
	reply    []int
}

func (r *recorder) Admitted(_ policy.Lane, c string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.admitted = append(r.admitted, c)
}

func (r *recorder) Rejected(_ policy.Lane, c string, reason Reason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejected = append(r.rejected, c+":"+string(reason))
}

func (r *recorder) ReplyBytes(_ policy.Lane, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reply = append(r.reply, n)
}

func (r *recorder) snapshot() (adm, rej []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.admitted...), append([]string(nil), r.rejected...)
}

func catalog(t testing.TB) *commands.Catalog {
	t.Helper()
	c, err := commands.Default()
	require.NoError(t, err)
	return c
}

func newGuard(t testing.TB, mod func(*Config)) (*Guard, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg := Config{
		Deployment: "main", Lane: policy.LaneRegular, Catalog: catalog(t), Namespace: ns,
		Budgets:  policy.Budgets{MaxRequestBytes: 4096, MaxReplyBytes: 1024},
		Scripts:  allow{},
		Observer: rec,
	}
	if mod != nil {
		mod(&cfg)
	}
	g, err := New(cfg)
	require.NoError(t, err)
	return g, rec
}

// run drives the ProcessHook with a next that only counts: the hook's
// contract is whether next is called, which is what "never sent" means.
func run(g *Guard, cmd redis.Cmder) (sent bool, err error) {
	h := g.ProcessHook(func(context.Context, redis.Cmder) error { sent = true; return nil })
	return sent, h(context.Background(), cmd)
}

func rejection(t *testing.T, err error) *Rejection {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ErrRejected)
	var r *Rejection
	require.ErrorAs(t, err, &r)
	return r
}

func TestNewValidates(t *testing.T) {
	_, err := New(Config{})
	require.ErrorIs(t, err, ErrConfig)
	for _, bad := range []string{"", "ca:demo", "ca:*:", "ca:{x}:"} {
		_, err := New(Config{Deployment: "d", Lane: policy.LaneRegular, Catalog: catalog(t), Namespace: bad,
			Budgets: policy.Budgets{MaxRequestBytes: 1, MaxReplyBytes: 1}})
		require.ErrorIs(t, err, ErrConfig, bad)
	}
	_, err = New(Config{Deployment: "d", Lane: "fast", Catalog: catalog(t), Namespace: ns,
		Budgets: policy.Budgets{MaxRequestBytes: 1, MaxReplyBytes: 1}})
	require.ErrorIs(t, err, ErrConfig)
}

func TestReasonsClosedSet(t *testing.T) {
	assert.Len(t, Reasons(), 10)
	seen := map[Reason]bool{}
	for _, r := range Reasons() {
		assert.False(t, seen[r])
		seen[r] = true
	}
}

func TestAdmissionTable(t *testing.T) {
	g, _ := newGuard(t, func(c *Config) { c.Cluster = true })
	admin, _ := newGuard(t, func(c *Config) { c.Lane = policy.LaneAdmin })
	script, _ := newGuard(t, func(c *Config) { c.Lane = policy.LaneScript })
	noScripts, _ := newGuard(t, func(c *Config) { c.Lane = policy.LaneScript; c.Scripts = nil })
	k := func(s string) string { return ns + s }
	cases := []struct {
		name string
		g    *Guard
		args []any
		want Reason // "" = admitted
	}{
		{"get", g, []any{"get", k("a")}, ""},
		{"set px", g, []any{"set", k("a"), "v", "px", 500}, ""},
		{"set nx ex string", g, []any{"SET", k("a"), "v", "NX", "EX", "10"}, ""},
		{"set xx keepttl", g, []any{"set", k("a"), "v", "xx", "keepttl"}, ""},
		{"set value EX is not an option", g, []any{"set", k("a"), "EX"}, ReasonMissingTTL},
		{"set no ttl", g, []any{"set", k("a"), "v"}, ReasonMissingTTL},
		{"set nx only", g, []any{"set", k("a"), "v", "nx"}, ReasonMissingTTL},
		{"set keepttl alone", g, []any{"set", k("a"), "v", "keepttl"}, ReasonMissingTTL},
		{"set px 0", g, []any{"set", k("a"), "v", "px", 0}, ReasonMissingTTL},
		{"set px negative", g, []any{"set", k("a"), "v", "px", "-5"}, ReasonMissingTTL},
		{"set px missing value", g, []any{"set", k("a"), "v", "px"}, ReasonMissingTTL},
		{"set two expiries", g, []any{"set", k("a"), "v", "px", 1, "ex", 1}, ReasonMissingTTL},
		{"xadd program-only", g, []any{"xadd", k("s"), "*", "f", "v"}, ReasonMissingTTL},
		{"unknown", g, []any{"hgetall", k("h")}, ReasonUnknownCommand},
		{"unknown name", g, []any{"foobar"}, ReasonUnknownCommand},
		{"unknown subcommand", g, []any{"config", "bogus"}, ReasonUnknownCommand},
		{"non-string name", g, []any{42}, ReasonUnknownCommand},
		{"keys", g, []any{"keys", "*"}, ReasonBlocked},
		{"flushall", g, []any{"flushall"}, ReasonBlocked},
		{"config set", admin, []any{"config", "set", "maxmemory", "1"}, ReasonBlocked},
		{"eval", script, []any{"eval", "return 1", 0}, ReasonBlocked},
		{"setex", g, []any{"setex", k("a"), 10, "v"}, ReasonBlocked},
		{"info on regular", g, []any{"info"}, ReasonWrongLane},
		{"get on admin", admin, []any{"get", k("a")}, ReasonWrongLane},
		{"evalsha on regular", g, []any{"evalsha", testSHA, 1, k("a")}, ReasonWrongLane},
		{"info on admin", admin, []any{"info", "server"}, ""},
		{"hello on admin", admin, []any{"hello", 3, "auth", "u", "secret", "setname", "n"}, ""},
		{"too many args", g, []any{"get", k("a"), k("b")}, ReasonMalformed},
		{"get without key", g, []any{"get"}, ReasonMalformed},
		{"foreign key", g, []any{"get", "other:key"}, ReasonNamespace},
		{"prefix only", g, []any{"get", ns}, ReasonNamespace},
		{"sibling namespace", g, []any{"get", "ca:demo:devx:a"}, ReasonNamespace},
		{"byte key", g, []any{"get", []byte(k("a"))}, ""},
		{"int key", g, []any{"get", 42}, ReasonNamespace},
		{"one foreign key of many", g, []any{"del", k("a"), "x", k("b")}, ReasonNamespace},
		{"cross slot", g, []any{"mget", k("a"), k("b")}, ReasonCrossSlot},
		{"same slot", g, []any{"mget", k("{t}a"), k("{t}b")}, ""},
		{"evalsha allowed", script, []any{"evalsha", testSHA, 1, k("a"), "x"}, ""},
		{"evalsha upper-case sha", script, []any{"evalsha", strings.ToUpper(testSHA), 0}, ""},
		{"evalsha unknown sha", script, []any{"evalsha", strings.Repeat("cd", 20), 0}, ReasonScriptNotAllowed},
		{"evalsha nil allowlist", noScripts, []any{"evalsha", testSHA, 0}, ReasonScriptNotAllowed},
		{"evalsha foreign key", script, []any{"evalsha", testSHA, 1, "x"}, ReasonNamespace},
		{"evalsha bad numkeys", script, []any{"evalsha", testSHA, 5, k("a")}, ReasonMalformed},
		{"fcall allowed", script, []any{"fcall", "caphost_lease_acquire", 1, k("a")}, ""},
		{"fcall other", script, []any{"fcall", "evil", 0}, ReasonScriptNotAllowed},
		{"request too large", g, []any{"set", k("a"), strings.Repeat("x", 5000), "px", 1}, ReasonRequestTooLarge},
		{"unsupported arg type", g, []any{"set", k("a"), struct{}{}, "px", 1}, ReasonMalformed},
		{"getrange ok", g, []any{"getrange", k("a"), 0, 1023}, ""},
		{"getrange over reply budget", g, []any{"getrange", k("a"), 0, 1024}, ReasonReplyTooLarge},
		{"getrange negative end", g, []any{"getrange", k("a"), 0, -1}, ""},
		{"getrange bad ints", g, []any{"getrange", k("a"), "x", 1}, ReasonMalformed},
		{"xread", g, []any{"xread", "count", 10, "streams", k("s"), "0"}, ""},
		{"xread foreign stream", g, []any{"xread", "streams", k("s"), "other", "0", "0"}, ReasonNamespace},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sent, err := run(tc.g, redis.NewCmd(context.Background(), tc.args...))
			if tc.want == "" {
				require.NoError(t, err)
				assert.True(t, sent)
				return
			}
			assert.False(t, sent, "a rejected command must never reach next")
			r := rejection(t, err)
			assert.Equal(t, tc.want, r.Reason)
			assert.Equal(t, certainty.Rejected, r.CertaintyOutcome())
			assert.False(t, r.Sent)
			for _, a := range tc.args[1:] {
				if s, ok := a.(string); ok && strings.HasPrefix(s, ns) {
					assert.NotContains(t, r.Error(), s, "rejections never carry key bytes")
				}
			}
			assert.NotContains(t, r.Error(), "secret")
		})
	}
}

func TestPubSubChannels(t *testing.T) {
	g, _ := newGuard(t, func(c *Config) { c.Lane = policy.LanePubSub; c.Cluster = true })
	require.NoError(t, g.Check([]any{"publish", ns + "events", "hi"}))
	require.NoError(t, g.Check([]any{"subscribe", ns + "a", ns + "b"}), "channels do not hash to slots")
	require.NoError(t, g.Check([]any{"psubscribe", ns + "ev*"}))
	require.NoError(t, g.Check([]any{"unsubscribe"}))
	assert.Equal(t, ReasonNamespace, rejection(t, g.Check([]any{"psubscribe", "*"})).Reason)
	assert.Equal(t, ReasonNamespace, rejection(t, g.Check([]any{"publish", "other", "hi"})).Reason)
}

// Sharded Pub/Sub channels carry the namespace like every channel and, on
// Cluster, hash to one slot like the keys of one command: a cross-slot
// SSUBSCRIBE is refused here instead of by the server after sending.
func TestShardedPubSubChannels(t *testing.T) {
	cluster, _ := newGuard(t, func(c *Config) { c.Lane = policy.LanePubSub; c.Cluster = true })
	plain, _ := newGuard(t, func(c *Config) { c.Lane = policy.LanePubSub })
	regular, _ := newGuard(t, func(c *Config) { c.Cluster = true })
	a, b := ns+"{a}:ch", ns+"{b}:ch" // slots 15495 and 3300
	for _, g := range []*Guard{cluster, plain} {
		require.NoError(t, g.Check([]any{"spublish", a, "hi"}))
		require.NoError(t, g.Check([]any{"ssubscribe", a}))
		require.NoError(t, g.Check([]any{"ssubscribe", a, ns + "{a}:other"}), "one slot")
		require.NoError(t, g.Check([]any{"sunsubscribe"}))
		assert.Equal(t, ReasonNamespace, rejection(t, g.Check([]any{"spublish", "other", "hi"})).Reason)
		assert.Equal(t, ReasonNamespace, rejection(t, g.Check([]any{"ssubscribe", a, "other"})).Reason)
		assert.Equal(t, ReasonNamespace, rejection(t, g.Check([]any{"ssubscribe", ns})).Reason, "the bare namespace is no channel")
		assert.Equal(t, ReasonMalformed, rejection(t, g.Check([]any{"ssubscribe"})).Reason)
		assert.Equal(t, ReasonMalformed, rejection(t, g.Check([]any{"spublish", a, "x", "y"})).Reason)
	}
	assert.Equal(t, ReasonCrossSlot, rejection(t, cluster.Check([]any{"ssubscribe", a, b})).Reason)
	require.NoError(t, plain.Check([]any{"ssubscribe", a, b}), "slots mean nothing outside Cluster")
	require.NoError(t, cluster.Check([]any{"subscribe", a, b}), "classic channels do not hash to slots")
	assert.Equal(t, ReasonWrongLane, rejection(t, regular.Check([]any{"spublish", a, "hi"})).Reason)
	assert.Equal(t, ReasonWrongLane, rejection(t, regular.Check([]any{"ssubscribe", a})).Reason)
}

// The order is part of the contract: a command with several defects reports
// the earliest check.
func TestAdmissionOrder(t *testing.T) {
	g, _ := newGuard(t, func(c *Config) { c.Cluster = true; c.Budgets.MaxRequestBytes = 10 })
	cases := []struct {
		args []any
		want Reason
	}{
		{[]any{"keys", "*"}, ReasonBlocked},                                                  // blocked before lane
		{[]any{"config", "set", "x", "y"}, ReasonBlocked},                                    // blocked before wrong lane
		{[]any{"info"}, ReasonWrongLane},                                                     // lane before size
		{[]any{"mget", "x", ns + "a", ns + "b"}, ReasonNamespace},                            // namespace before slot
		{[]any{"mget", ns + "a", ns + "b"}, ReasonCrossSlot},                                 // slot before size
		{[]any{"set", ns + "a", "v"}, ReasonMissingTTL},                                      // ttl before size
		{[]any{"get", ns + "a"}, ReasonRequestTooLarge},                                      // size last
		{[]any{"get", strings.Repeat("k", 64)}, ReasonNamespace},                             // namespace before size
		{[]any{"set", ns + "{t}a", strings.Repeat("v", 64), "px", 1}, ReasonRequestTooLarge}, // all earlier pass
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, rejection(t, g.Check(tc.args)).Reason, "%v", tc.args[0])
	}
	script, _ := newGuard(t, func(c *Config) { c.Lane = policy.LaneScript; c.Cluster = true; c.Budgets.MaxRequestBytes = 10 })
	assert.Equal(t, ReasonCrossSlot, rejection(t, script.Check([]any{"evalsha", "bad", 2, ns + "a", ns + "b"})).Reason)
	assert.Equal(t, ReasonScriptNotAllowed, rejection(t, script.Check([]any{"evalsha", "bad", 1, ns + "a"})).Reason)
	assert.Equal(t, ReasonRequestTooLarge, rejection(t, script.Check([]any{"evalsha", testSHA, 1, ns + "a"})).Reason)
}

func TestObserver(t *testing.T) {
	g, rec := newGuard(t, nil)
	_, _ = run(g, redis.NewCmd(context.Background(), "get", ns+"a"))
	_, _ = run(g, redis.NewCmd(context.Background(), "frobnicate", "x"))
	_, _ = run(g, redis.NewCmd(context.Background(), "keys", "*"))
	adm, rej := rec.snapshot()
	assert.Equal(t, []string{"GET"}, adm)
	assert.Equal(t, []string{"unknown:unknown-command", "KEYS:blocked"}, rej)
	assert.Len(t, rec.reply, 1)
}

func TestReplyBudget(t *testing.T) {
	g, rec := newGuard(t, nil)
	big := strings.Repeat("v", 2000)
	h := g.ProcessHook(func(_ context.Context, cmd redis.Cmder) error {
		switch c := cmd.(type) {
		case *redis.StringCmd:
			c.SetVal(big)
		case *redis.Cmd:
			c.SetVal([]any{"a", []any{big}})
		case *redis.SliceCmd:
			c.SetVal([]any{"x", big})
		case *redis.IntCmd:
			c.SetVal(1)
		}
		return nil
	})
	ctx := context.Background()

	get := redis.NewStringCmd(ctx, "get", ns+"a")
	r := rejection(t, h(ctx, get))
	assert.Equal(t, ReasonReplyTooLarge, r.Reason)
	assert.True(t, r.Sent)
	assert.Equal(t, certainty.Rejected, r.CertaintyOutcome(), "a withheld read changed nothing")
	assert.Empty(t, get.Val(), "the over-budget value is never handed back")
	assert.ErrorIs(t, get.Err(), ErrRejected)

	mget := redis.NewSliceCmd(ctx, "mget", ns+"a", ns+"b")
	require.Error(t, h(ctx, mget))
	assert.Nil(t, mget.Val())

	// A write whose reply is withheld was applied: Indeterminate.
	set := redis.NewCmd(ctx, "set", ns+"a", "v", "px", 1, "get")
	r = rejection(t, h(ctx, set))
	assert.Equal(t, certainty.Indeterminate, r.CertaintyOutcome())
	assert.Nil(t, set.Val())

	del := redis.NewIntCmd(ctx, "del", ns+"a")
	require.NoError(t, h(ctx, del))
	assert.Equal(t, int64(1), del.Val())

	// Any other command type is measured by reflection, never skipped.
	xr := redis.NewXStreamSliceCmd(ctx, "xread", "streams", ns+"s", "0")
	hx := g.ProcessHook(func(context.Context, redis.Cmder) error {
		xr.SetVal([]redis.XStream{{Stream: ns + "s", Messages: []redis.XMessage{{ID: "1-0", Values: map[string]any{"f": big}}}}})
		return nil
	})
	assert.Equal(t, ReasonReplyTooLarge, rejection(t, hx(ctx, xr)).Reason)
	assert.Nil(t, xr.Val())
	assert.NotEmpty(t, rec.reply)
}

func TestReplyErrorPassesThrough(t *testing.T) {
	g, _ := newGuard(t, nil)
	boom := errors.New("boom")
	h := g.ProcessHook(func(_ context.Context, cmd redis.Cmder) error { cmd.SetErr(boom); return boom })
	cmd := redis.NewStringCmd(context.Background(), "get", ns+"a")
	assert.ErrorIs(t, h(context.Background(), cmd), boom)
}

func TestPipelineRejectsWhole(t *testing.T) {
	g, rec := newGuard(t, nil)
	ctx := context.Background()
	sent := false
	h := g.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { sent = true; return nil })
	cmds := []redis.Cmder{
		redis.NewStatusCmd(ctx, "set", ns+"a", "v", "px", 100),
		redis.NewStringCmd(ctx, "get", ns+"b"),
		redis.NewStringSliceCmd(ctx, "keys", "*"),
		redis.NewStringCmd(ctx, "get", ns+"c"),
	}
	err := h(ctx, cmds)
	assert.False(t, sent)
	assert.Equal(t, ReasonBlocked, rejection(t, err).Reason)
	labels := []string{"SET", "GET", "KEYS", "GET"}
	for i, c := range cmds {
		r := rejection(t, c.Err())
		assert.Equal(t, ReasonBlocked, r.Reason, i)
		assert.Equal(t, labels[i], r.Command, i)
	}
	_, rej := rec.snapshot()
	assert.Equal(t, []string{"KEYS:blocked"}, rej)

	ok := []redis.Cmder{redis.NewStringCmd(ctx, "get", ns+"a"), redis.NewIntCmd(ctx, "pttl", ns+"a")}
	require.NoError(t, h(ctx, ok))
	assert.True(t, sent)
}

func TestAdmittedCommandPassesNodeHookOnce(t *testing.T) {
	g, rec := newGuard(t, func(c *Config) { c.Cluster = true })
	ctx := context.Background()
	var inner int
	node := g.ProcessHook(func(context.Context, redis.Cmder) error { inner++; return nil })
	outer := g.ProcessHook(node)
	cmd := redis.NewStringCmd(ctx, "get", ns+"a")
	require.NoError(t, outer(ctx, cmd))
	assert.Equal(t, 1, inner)
	adm, _ := rec.snapshot()
	assert.Equal(t, []string{"GET"}, adm, "checked once, not once per level")

	// Another command on the admitted context is still checked in full.
	sneaky := g.ProcessHook(func(ctx context.Context, _ redis.Cmder) error {
		return node(ctx, redis.NewStringSliceCmd(ctx, "keys", "*"))
	})
	assert.Equal(t, ReasonBlocked, rejection(t, sneaky(ctx, redis.NewStringCmd(ctx, "get", ns+"a"))).Reason)
}

func TestRejectionText(t *testing.T) {
	r := &Rejection{Deployment: "main", Lane: policy.LaneRegular, Command: "KEYS", Reason: ReasonBlocked, Detail: "blocked by the catalog"}
	assert.Equal(t, "caphost guard: KEYS rejected on main/regular: blocked (blocked by the catalog)", r.Error())
	assert.True(t, errors.Is(r, ErrRejected))
}

func TestInstallRejectsUnsupported(t *testing.T) {
	g, _ := newGuard(t, nil)
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	require.ErrorIs(t, g.Install(ring), ErrUnsupportedClient)
}

func BenchmarkGuard(b *testing.B) {
	g, _ := newGuard(b, func(c *Config) { c.Observer = nil })
	h := g.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
	ctx := context.Background()
	cmd := redis.NewStringCmd(ctx, "get", ns+"user:{42}:profile")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := h(ctx, cmd); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzCheck feeds arbitrary argument vectors through the admission path: it
// must never panic, and a rejection never echoes key bytes.
func FuzzCheck(f *testing.F) {
	f.Add("set\x00ca:demo:dev:a\x00v\x00px\x00100")
	f.Add("mget\x00ca:demo:dev:{x}a\x00ca:demo:dev:b")
	f.Add("evalsha\x00" + testSHA + "\x002\x00ca:demo:dev:a")
	f.Add("xreadgroup\x00group\x00g\x00c\x00streams\x00ca:demo:dev:s\x00>")
	f.Add("getrange\x00ca:demo:dev:a\x000\x009999999999999999999")
	f.Add("config\x00get\x00*")
	g, _ := newGuard(f, func(c *Config) { c.Cluster = true; c.Lane = policy.LaneScript })
	r, _ := newGuard(f, func(c *Config) { c.Cluster = true })
	f.Fuzz(func(t *testing.T, line string) {
		parts := strings.Split(line, "\x00")
		args := make([]any, len(parts))
		for i, p := range parts {
			args[i] = p
		}
		for _, gd := range []*Guard{g, r} {
			err := gd.Check(args)
			if err == nil {
				continue
			}
			var rej *Rejection
			require.ErrorAs(t, err, &rej)
			require.Contains(t, Reasons(), rej.Reason)
			for _, p := range parts[1:] {
				if len(p) > 12 && strings.HasPrefix(p, ns) {
					require.NotContains(t, rej.Error(), p)
				}
			}
		}
	})
}

func TestRefusedWhole(t *testing.T) {
	g, _ := newGuard(t, nil)
	h := g.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { return nil })
	pipeline := func(cmds ...redis.Cmder) []redis.Cmder {
		_ = h(context.Background(), cmds)
		return cmds
	}
	ok := func() redis.Cmder { return redis.NewStringCmd(context.Background(), "get", ns+"a") }
	bad := func() redis.Cmder { return redis.NewStringCmd(context.Background(), "get", "outside:a") }
	assert.True(t, RefusedWhole(pipeline(ok(), bad(), ok())), "one refused command refuses the pipeline whole")
	assert.False(t, RefusedWhole(pipeline(ok(), ok())), "admitted")
	assert.False(t, RefusedWhole(nil))
	sent := ok()
	sent.SetErr(&Rejection{Reason: ReasonReplyTooLarge, Sent: true})
	refused := bad()
	refused.SetErr(&Rejection{Reason: ReasonNamespace})
	assert.False(t, RefusedWhole([]redis.Cmder{refused, sent}), "a withheld reply was sent: not a pre-send refusal")
	assert.False(t, RefusedWhole([]redis.Cmder{refused, ok()}), "a command without an error was sent")
}

package programs

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// facadeCall is the facade's view of a call for vector comparison.
type facadeCall func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (status string, outcome certainty.Outcome, values []any, err error)

func ms(d time.Duration) int64 { return d.Milliseconds() }

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// facades maps each program id to its typed facade, so the vectors run
// through exactly the API callers use. A program without an entry here
// fails TestDriftEveryProgramHasFacadeAndVectors.
func facades() map[string]facadeCall {
	ttl := func(v any) (time.Duration, error) {
		n, err := fixtureInt(v)
		return time.Duration(n) * time.Millisecond, err
	}
	m := map[string]facadeCall{
		"set-if-absent-with-ttl-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			k := ks[0]
			v, err1 := fixtureBytes(a[0])
			d, err2 := ttl(a[1])
			op, err3 := fixtureBytes(a[2])
			if err := firstErr(err1, err2, err3); err != nil {
				return "", 0, nil, err
			}
			r, err := e.SetIfAbsentWithTTL(ctx, k, v, d, op)
			return r.Status.String(), r.Outcome(), []any{ms(r.PTTL), b2i(r.SameValue)}, err
		},
		"compare-and-delete-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			k := ks[0]
			o, err := fixtureBytes(a[0])
			if err != nil {
				return "", 0, nil, err
			}
			r, err := e.CompareAndDelete(ctx, k, o)
			return r.Status.String(), r.Outcome(), []any{r.Deleted}, err
		},
		"compare-and-expire-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			k := ks[0]
			o, err1 := fixtureBytes(a[0])
			d, err2 := ttl(a[1])
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.CompareAndExpire(ctx, k, o, d)
			return r.Status.String(), r.Outcome(), []any{ms(r.PTTL)}, err
		},
		"compare-and-set-with-ttl-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			k := ks[0]
			rev, err1 := fixtureBytes(a[0])
			v, err2 := fixtureBytes(a[1])
			d, err3 := ttl(a[2])
			if err := firstErr(err1, err2, err3); err != nil {
				return "", 0, nil, err
			}
			r, err := e.CompareAndSetWithTTL(ctx, k, string(rev), v, d)
			return r.Status.String(), r.Outcome(), []any{ms(r.PTTL), b2i(r.SameValue)}, err
		},
		"increment-with-initial-ttl-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			k := ks[0]
			delta, err1 := fixtureInt(a[0])
			limit, err2 := fixtureInt(a[1])
			d, err3 := ttl(a[2])
			if err := firstErr(err1, err2, err3); err != nil {
				return "", 0, nil, err
			}
			r, err := e.IncrementWithInitialTTL(ctx, k, delta, limit, d)
			return r.Status.String(), r.Outcome(), []any{r.Value, ms(r.PTTL)}, err
		},
		"region-generation-init-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			k := ks[0]
			g, err := fixtureBytes(a[0])
			if err != nil {
				return "", 0, nil, err
			}
			r, err := e.RegionGenerationInit(ctx, k, g)
			return r.Status.String(), r.Outcome(), []any{string(r.Generation)}, err
		},
		"region-generation-bump-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			k := ks[0]
			g, err1 := fixtureBytes(a[0])
			op, err2 := fixtureBytes(a[1])
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.RegionGenerationBump(ctx, k, g, op)
			return r.Status.String(), r.Outcome(), []any{string(r.Generation)}, err
		},
		"cache-refresh-claim-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			k := ks[0]
			o, err1 := fixtureBytes(a[0])
			d, err2 := ttl(a[1])
			op, err3 := fixtureBytes(a[2])
			if err := firstErr(err1, err2, err3); err != nil {
				return "", 0, nil, err
			}
			r, err := e.CacheRefreshClaim(ctx, k, o, d, op)
			return r.Status.String(), r.Outcome(), []any{ms(r.PTTL)}, err
		},
		"cache-refresh-release-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			k := ks[0]
			o, err := fixtureBytes(a[0])
			if err != nil {
				return "", 0, nil, err
			}
			r, err := e.CacheRefreshRelease(ctx, k, o)
			return r.Status.String(), r.Outcome(), []any{r.Deleted}, err
		},
	}
	for id, f := range cacheFacades() {
		m[id] = f
	}
	for id, f := range rateFacades() {
		m[id] = f
	}
	for id, f := range leaseFacades() {
		m[id] = f
	}
	for id, f := range fenceFacades() {
		m[id] = f
	}
	for id, f := range idemFacades() {
		m[id] = f
	}
	for id, f := range notifyFacades() {
		m[id] = f
	}
	return m
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// rawCall runs a program with textual arguments and an explicit key count,
// bypassing the typed facade, to prove the server-side checks the facade
// cannot express (argument counts, non-canonical numbers).
func rawCall(ctx context.Context, e *Executor, id string, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
	args := make([]any, len(a))
	for i, v := range a {
		b, err := fixtureBytes(v)
		if err != nil {
			return "", 0, nil, err
		}
		args[i] = b
	}
	r, err := e.run(ctx, id, ks, args...)
	if err != nil {
		return "", 0, nil, err
	}
	defs := facadeStatuses(id)
	p, _ := e.cat.Program(id)
	vals := make([]any, r.n)
	for i, f := range p.spec.Result {
		if f.Type == ResultBytes {
			vals[i] = string(r.bytes(i))
		} else {
			vals[i] = r.int(i)
		}
	}
	return statusName(defs, uint8(r.status)), statusOutcome(defs, uint8(r.status)), vals, nil
}

// target is one server flavour the vectors run against.
type target struct {
	name   string
	script redis.UniversalClient // the executor's client
	admin  redis.UniversalClient // set-up and state inspection
	// scriptFor, when set, overrides script per mode and program (the ACL
	// test gives every program a user holding only its own allowlist).
	scriptFor func(mode policy.ProgramMode, id string) redis.UniversalClient
}

func runAllVectors(t *testing.T, tg target) {
	cat := mustCatalog(t)
	files := loadVectors(t)
	b := testBuilder(t)
	ctx := context.Background()
	fac := facades()
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		if mode == policy.ProgramsFunctionsProvisioned {
			require.NoError(t, Deploy(ctx, cat, tg.admin))
		} else {
			// Start from an empty script cache so the lazy NOSCRIPT path runs
			// on every primary.
			require.NoError(t, tg.admin.ScriptFlush(ctx).Err())
		}
		for _, f := range files {
			client := tg.script
			if tg.scriptFor != nil {
				client = tg.scriptFor(mode, f.Program)
			}
			e, err := NewExecutor(cat, mode, client)
			require.NoError(t, err)
			for _, v := range f.Vectors {
				name := fmt.Sprintf("%s/%s/%s/%s", tg.name, mode, f.Program, v.Name)
				t.Run(name, func(t *testing.T) {
					ks := programKeys(t, b, f.Program, name)
					anchor := vectorAnchor(ctx, t, tg.admin, v.Clock)
					for _, it := range v.Setup {
						applySetup(ctx, t, tg.admin, ks[it.Key-1], expandItem(it, anchor))
					}
					for i, st := range v.Steps {
						var (
							status  string
							outcome certainty.Outcome
							vals    []any
							err     error
						)
						if st.Raw {
							n := st.Keys
							if n == 0 {
								n = 1
							}
							status, outcome, vals, err = rawCall(ctx, e, f.Program, ks[:n], st.Args)
						} else {
							call, ok := fac[f.Program]
							require.True(t, ok, "no facade for %s", f.Program)
							status, outcome, vals, err = call(ctx, e, ks, st.Args)
						}
						require.NoError(t, err, "step %d", i)
						assert.Equal(t, st.Expect.Status, status, "step %d status", i)
						assert.Equal(t, manifestOutcome(t, cat, f.Program, status), outcome, "step %d outcome", i)
						require.Len(t, vals, len(st.Expect.Values), "step %d values", i)
						for j, want := range st.Expect.Values {
							assertValue(t, expandWant(t, want, anchor), vals[j], fmt.Sprintf("step %d value %d", i, j))
						}
					}
					for _, it := range v.State {
						assertState(ctx, t, tg.admin, ks[it.Key-1], expandItem(it, anchor))
					}
				})
			}
		}
	}
}

func manifestOutcome(t *testing.T, c *Catalog, id, status string) certainty.Outcome {
	p, ok := c.Program(id)
	require.True(t, ok)
	for _, s := range p.spec.Statuses {
		if s.Name == status {
			o, ok := parseOutcome(s.Outcome)
			require.True(t, ok)
			return o
		}
	}
	t.Fatalf("status %s not in manifest of %s", status, id)
	return 0
}

func applySetup(ctx context.Context, t *testing.T, admin redis.UniversalClient, k keys.Key, it stateItem) {
	t.Helper()
	switch {
	case it.String != nil:
		v, err := fixtureBytes(it.String)
		require.NoError(t, err)
		require.NoError(t, admin.Set(ctx, k.Redis(), v, time.Duration(it.TTLMillis)*time.Millisecond).Err())
	case it.Hash != nil:
		for f, v := range it.Hash {
			require.NoError(t, admin.HSet(ctx, k.Redis(), f, v).Err())
		}
		// A minute unless the item names a TTL (or none: noTtl).
		switch {
		case it.NoTTL:
		case it.TTLMillis > 0:
			require.NoError(t, admin.PExpire(ctx, k.Redis(), time.Duration(it.TTLMillis)*time.Millisecond).Err())
		default:
			require.NoError(t, admin.PExpire(ctx, k.Redis(), time.Minute).Err())
		}
	case it.Stream != nil:
		applyStreamSetup(ctx, t, admin, k, it.Stream)
	case it.ZSet != nil:
		for m, sc := range it.ZSet {
			score, err := strconv.ParseFloat(sc, 64)
			require.NoError(t, err)
			require.NoError(t, admin.ZAdd(ctx, k.Redis(), redis.Z{Score: score, Member: m}).Err())
		}
		require.NoError(t, admin.PExpire(ctx, k.Redis(), time.Minute).Err())
	default:
		t.Fatalf("unsupported setup item %+v", it)
	}
}

func assertState(ctx context.Context, t *testing.T, admin redis.UniversalClient, k keys.Key, it stateItem) {
	t.Helper()
	typ, err := admin.Type(ctx, k.Redis()).Result()
	require.NoError(t, err)
	switch {
	case it.Absent:
		assert.Equal(t, "none", typ, "key should be absent")
		return
	case it.Type != "":
		assert.Equal(t, it.Type, typ)
	case it.String != nil:
		want, err := fixtureBytes(it.String)
		require.NoError(t, err)
		got, err := admin.Get(ctx, k.Redis()).Result()
		require.NoError(t, err)
		assert.Equal(t, string(want), got, "stored value")
	}
	if it.Hash != nil {
		got, err := admin.HGetAll(ctx, k.Redis()).Result()
		require.NoError(t, err)
		assert.Equal(t, it.Hash, got, "stored hash")
	}
	if it.ZSet != nil {
		zs, err := admin.ZRangeWithScores(ctx, k.Redis(), 0, -1).Result()
		require.NoError(t, err)
		got := map[string]string{}
		for _, z := range zs {
			got[fmt.Sprint(z.Member)] = strconv.FormatFloat(z.Score, 'f', -1, 64)
		}
		assert.Equal(t, it.ZSet, got, "stored sorted set")
	}
	assertStreamState(ctx, t, admin, k, it)
	if it.HashLen != nil {
		n, err := admin.HLen(ctx, k.Redis()).Result()
		require.NoError(t, err)
		assert.Equal(t, *it.HashLen, n, "hash length")
	}
	if it.ZCard != nil {
		n, err := admin.ZCard(ctx, k.Redis()).Result()
		require.NoError(t, err)
		assert.Equal(t, *it.ZCard, n, "sorted set size")
	}
	pttl, err := admin.PTTL(ctx, k.Redis()).Result()
	require.NoError(t, err)
	if it.NoTTL {
		assert.Equal(t, time.Duration(-1), pttl, "key must have no TTL")
	}
	if it.PTTL != nil {
		got := pttl.Milliseconds()
		assert.True(t, got >= it.PTTL.Min && got <= it.PTTL.Max, "pttl %d not in [%d,%d]", got, it.PTTL.Min, it.PTTL.Max)
	}
}

// assertValue compares one decoded value with a fixture expectation: an
// exact JSON integer or string, {"min","max"} for integers, or a bytes
// fixture ({"fill","len"}).
func assertValue(t *testing.T, want, got any, where string) {
	t.Helper()
	switch w := want.(type) {
	case json.Number:
		n, err := w.Int64()
		require.NoError(t, err)
		assert.Equal(t, n, got, where)
	case string:
		assert.Equal(t, w, got, where)
	case map[string]any:
		if lo, ok := w["min"].(json.Number); ok {
			hi := w["max"].(json.Number)
			l, _ := lo.Int64()
			h, _ := hi.Int64()
			n, ok := got.(int64)
			require.True(t, ok, where)
			assert.True(t, n >= l && n <= h, "value %d not in [%d,%d] %v", n, l, h, fmt.Sprint(where))
			return
		}
		b, err := fixtureBytes(w)
		require.NoError(t, err)
		assert.Equal(t, string(b), got, where)
	default:
		t.Fatalf("unsupported expectation %#v", want)
	}
}

// TestGoldenVectorsStandalone runs every vector in both modes on one
// private standalone server.
func TestGoldenVectorsStandalone(t *testing.T) {
	s := redistest.StartStandalone(t)
	runAllVectors(t, target{name: "standalone", script: standaloneClient(t, s), admin: s.Admin()})
	// The catalog never sends EVAL, whatever happened above.
	assert.Zero(t, s.CommandCalls(t, "eval"))
}

// TestGoldenVectorsCluster runs every vector in both modes on a private
// 3+3 cluster: keys of different vectors spread over the three primaries,
// so lazy NOSCRIPT loading and FCALL routing are exercised on each.
func TestGoldenVectorsCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	cat := mustCatalog(t)
	// Deploy/Verify fan out to exactly the three primaries.
	checkVerifyBeforeDeploy(t, cat, cl.Admin(), 3)
	runAllVectors(t, target{name: "cluster", script: clusterClient(t, cl), admin: cl.Admin()})
	checkVerifyAfterDeploy(t, cat, cl.Admin(), 3)
	assert.Zero(t, cl.CommandCalls(t, "eval"))
	// Every primary served programs in both modes.
	for _, p := range cl.Primaries() {
		assert.Positive(t, p.CommandCalls(t, "evalsha"), "primary %s ran no EVALSHA", p.Addr())
		assert.Positive(t, p.CommandCalls(t, "fcall"), "primary %s ran no FCALL", p.Addr())
	}
}

// TestGoldenVectorsLeastPrivilege runs every vector with one ACL user per
// program and mode holding exactly EVALSHA + SCRIPT LOAD (or FCALL) plus the
// program's manifest aclCommands: Redis checks commands called inside
// scripts and functions against the caller's ACL, so this proves each
// allowlist is sufficient (TestDriftLuaStaticRules proves it is exact).
func TestGoldenVectorsLeastPrivilege(t *testing.T) {
	cat := mustCatalog(t)
	const pass = "program-user-password"
	var users []redistest.ACLUser
	userName := func(mode policy.ProgramMode, id string) string { return "u-" + string(mode) + "-" + id }
	for _, p := range cat.Programs() {
		for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
			rules := []string{"~ca:*", "resetchannels", "-@all", "+hello", "+ping"}
			if mode == policy.ProgramsEvalshaManaged {
				rules = append(rules, "+evalsha", "+script|load")
			} else if *p.spec.ReadOnly {
				rules = append(rules, "+fcall_ro")
			} else {
				rules = append(rules, "+fcall")
			}
			for _, c := range p.spec.ACLCommands {
				rules = append(rules, "+"+strings.ToLower(c))
			}
			users = append(users, redistest.ACLUser{Name: userName(mode, p.ID()), Password: pass, Rules: rules})
		}
	}
	s := redistest.StartStandalone(t, redistest.WithACL(users...))
	clients := map[string]redis.UniversalClient{}
	for _, u := range users {
		c := redis.NewClient(&redis.Options{
			Addr: s.Addr(), Username: u.Name, Password: pass, DisableIdentity: true, MaxRetries: -1,
			DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, PoolSize: 2,
		})
		t.Cleanup(func() { _ = c.Close() })
		clients[u.Name] = c
	}
	runAllVectors(t, target{name: "acl", admin: s.Admin(), scriptFor: func(mode policy.ProgramMode, id string) redis.UniversalClient {
		return clients[userName(mode, id)]
	}})

	// Negative control: without its data commands a program is refused by ACL.
	ctx := context.Background()
	k := vectorKeys(t, testBuilder(t), "acl-negative", 1)[0]
	wrong := clients[userName(policy.ProgramsEvalshaManaged, "compare-and-delete-v1")]
	e, err := NewExecutor(cat, policy.ProgramsEvalshaManaged, wrong)
	require.NoError(t, err)
	_, err = e.IncrementWithInitialTTL(ctx, k, 1, 10, time.Minute) // needs SET/INCRBY, which this user lacks
	require.Error(t, err)
	var rerr redis.Error
	require.ErrorAs(t, err, &rerr, "the server's ACL refusal is visible through *Error")
	assert.Contains(t, err.Error(), "can't run this command")
}

package programs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

const vectorDir = "../../testdata/programs"

// envelopeGoldenDir holds the envelope package's golden stored values.
const envelopeGoldenDir = "../../host/cache/envelope/testdata"

func mustCatalog(t testing.TB) *Catalog {
	t.Helper()
	c, err := Load()
	require.NoError(t, err)
	return c
}

func testBuilder(t testing.TB) *keys.Builder {
	t.Helper()
	b, err := keys.NewBuilder(keys.Config{
		App: "caphost", Env: "test",
		Material: policy.KeyMaterial{WriteVersion: 1, Versions: map[int]policy.Secret{1: policy.NewSecret(bytes.Repeat([]byte{7}, 32))}},
	})
	require.NoError(t, err)
	return b
}

// vectorKeys builds n same-slot keys (cache entry group) for one tag.
func vectorKeys(t testing.TB, b *keys.Builder, tag string, n int) []keys.Key {
	t.Helper()
	kinds := []string{"entry", "refresh-lease"}
	require.LessOrEqual(t, n, len(kinds))
	ks, err := b.Group(keys.Spec{Capability: keys.CapCache, Region: "programs", KeyVersion: 1, Parts: [][]byte{[]byte(tag)}}, kinds[:n]...)
	require.NoError(t, err)
	return ks
}

// programKeys returns the keys a program's vectors run on: cache-put-v2
// takes a shard generation (the anchor) and an entry of that shard, every
// other program two keys of the cache entry group.
func programKeys(t testing.TB, b *keys.Builder, program, tag string) []keys.Key {
	t.Helper()
	switch {
	case program == "cache-put-v2":
		f := shardedEntry(t, b, tag)
		return []keys.Key{f.anchor(), f.entry(t, []byte("vector-scope"))}
	case program == "fenced-counter-provision-v1":
		ks := fenceKeys(t, b, tag)
		return []keys.Key{ks[1], ks[0]}
	case strings.HasPrefix(program, "fenced-"):
		return fenceKeys(t, b, tag)
	case strings.HasPrefix(program, "idempotency-"):
		// One record key; a second key only proves that it is refused.
		k := idemKey(t, b, tag)
		return []keys.Key{k, k}
	case strings.HasPrefix(program, "notify-"):
		return notifyProgramKeys(t, b, program, tag)
	case strings.HasPrefix(program, "lease-"):
		// One lease owner key; it stands again as a second key (the same
		// slot on Cluster) only to prove that a second key is refused.
		k := leaseKey(t, b, tag)
		return []keys.Key{k, k}
	}
	return vectorKeys(t, b, tag, 2)
}

// leaseKey builds the efficiency lease owner key of one resource.
func leaseKey(t testing.TB, b *keys.Builder, resource string) keys.Key {
	t.Helper()
	k, err := b.Build(keys.Spec{Capability: keys.CapLease, Region: "jobs", KeyVersion: 1, Kind: "owner", Parts: [][]byte{[]byte(resource)}})
	require.NoError(t, err)
	return k
}

// idemKey builds the idempotency record key of one scope.
func idemKey(t testing.TB, b *keys.Builder, scope string) keys.Key {
	t.Helper()
	k, err := b.Build(keys.Spec{Capability: keys.CapIdem, Region: "orders", KeyVersion: 1, Kind: "record", Parts: [][]byte{[]byte(scope)}})
	require.NoError(t, err)
	return k
}

// fenceKeys builds a fenced resource's owner record and fence counter with
// one keys.Builder.Group call: one hash tag, one Cluster slot.
func fenceKeys(t testing.TB, b *keys.Builder, resource string) []keys.Key {
	t.Helper()
	ks, err := b.Group(keys.Spec{Capability: keys.CapFence, Region: "ledger", KeyVersion: 1, Parts: [][]byte{[]byte(resource)}}, "owner", "counter")
	require.NoError(t, err)
	return ks
}

// shardFamily is one located resource of a sharded cache region: its
// shard's generation key (the anchor) and its member keys per scope, built
// by keys.Builder.PrepareSharded exactly as the cache builds them, so the
// anchor and every member share a Cluster slot by construction.
type shardFamily struct {
	layout *keys.Sharded
	loc    keys.Location
}

// shardedEntry locates tag in a region of its own (the region name is a
// digest of tag), so two tests never share an anchor and their anchors
// spread over the Cluster's slots.
func shardedEntry(t testing.TB, b *keys.Builder, tag string) shardFamily {
	t.Helper()
	sum := sha256.Sum256([]byte(tag))
	layout, err := b.PrepareSharded(keys.ShardSpec{Capability: keys.CapCache, Region: "r-" + hex.EncodeToString(sum[:8]),
		KeyVersion: 1, Shards: 4, AnchorKind: "generation", MemberKinds: []string{"entry", "refresh-lease"}})
	require.NoError(t, err)
	loc, err := layout.Locate([][]byte{[]byte(tag)})
	require.NoError(t, err)
	return shardFamily{layout: layout, loc: loc}
}

func (f shardFamily) anchor() keys.Key { return f.layout.AnchorOf(f.loc) }

// entry returns the entry key under scope (a generation).
func (f shardFamily) entry(t testing.TB, scope []byte) keys.Key {
	t.Helper()
	ks, err := f.layout.AppendMembers(nil, f.loc, scope)
	require.NoError(t, err)
	return ks[0]
}

// recorder is a go-redis hook recording command names ("evalsha",
// "script load", "fcall", ...) in order. On a ClusterClient the hook is
// inherited by node clients, so both levels record; tests use a standalone
// client for exact traces.
type recorder struct {
	mu    sync.Mutex
	names []string
	after func(name string) // optional, runs after a command completed
}

func cmdName(cmd redis.Cmder) string {
	name := strings.ToLower(cmd.Name())
	if name == "script" || name == "function" {
		if a := cmd.Args(); len(a) > 1 {
			name += " " + strings.ToLower(fmt.Sprint(a[1]))
		}
	}
	return name
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmdName(cmd)
		r.mu.Lock()
		r.names = append(r.names, name)
		r.mu.Unlock()
		err := next(ctx, cmd)
		if r.after != nil {
			r.after(name)
		}
		return err
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.mu.Lock()
		for _, c := range cmds {
			r.names = append(r.names, "pipeline:"+cmdName(c))
		}
		r.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns and clears the recorded names, dropping connection set-up
// commands (hello, client ...) which are not part of the program protocol.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.names {
		if n == "hello" || strings.HasPrefix(n, "client") || n == "auth" || n == "ping" {
			continue
		}
		out = append(out, n)
	}
	r.names = nil
	return out
}

func standaloneClient(t testing.TB, s *redistest.Server) *redis.Client {
	t.Helper()
	user, pass := s.AdminUser()
	c := redis.NewClient(&redis.Options{
		Addr: s.Addr(), Username: user, Password: pass,
		DisableIdentity: true, MaxRetries: -1, PoolSize: 4,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		// No CLIENT MAINT_NOTIFICATIONS on connect, as the runtime's
		// lanes: a test may put a guard, which refuses it, on the client.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// proxiedClient returns a client that reaches s through a fault-injecting
// proxy, with a 200 ms read timeout so that a reply the proxy holds back
// (Stall: the command reached Redis) times out quickly: INDETERMINATE.
func proxiedClient(t testing.TB, s *redistest.Server) (*redis.Client, *redistest.Proxy) {
	t.Helper()
	proxy := redistest.NewProxy(t, s.Addr())
	user, pass := s.AdminUser()
	c := redis.NewClient(&redis.Options{
		Addr: proxy.Addr(), Username: user, Password: pass, DisableIdentity: true, MaxRetries: -1, PoolSize: 2,
		DialTimeout: 2 * time.Second, ReadTimeout: 200 * time.Millisecond, WriteTimeout: time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c, proxy
}

// recordingExecutor returns an evalsha-managed executor on s whose client
// records every command it sends.
func recordingExecutor(t testing.TB, s *redistest.Server) (*Executor, *recorder) {
	t.Helper()
	rec := &recorder{}
	c := standaloneClient(t, s)
	c.AddHook(rec)
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, c)
	require.NoError(t, err)
	return e, rec
}

func clusterClient(t testing.TB, cl *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	user, pass := cl.AdminUser()
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Seeds(), Username: user, Password: pass,
		DisableIdentity: true, MaxRetries: -1, PoolSize: 4,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
		// No CLIENT MAINT_NOTIFICATIONS on connect, as the runtime's
		// lanes: a test may put a guard, which refuses it, on the client.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ---- golden vector fixtures ----

type vectorFile struct {
	Program string   `json:"program"`
	Vectors []vector `json:"vectors"`
}

type vector struct {
	Name   string       `json:"name"`
	Doc    string       `json:"doc"`
	Covers []string     `json:"covers"`
	Clock  *vectorClock `json:"clock"`
	Setup  []stateItem  `json:"setup"`
	Steps  []vstep      `json:"steps"`
	State  []stateItem  `json:"state"`
}

type vstep struct {
	Args   []any `json:"args"`
	Raw    bool  `json:"raw"`
	Keys   int   `json:"keys"`
	Expect struct {
		Status string `json:"status"`
		Values []any  `json:"values"`
	} `json:"expect"`
}

type stateItem struct {
	Key       int               `json:"key"`
	String    any               `json:"string"`
	TTLMillis int64             `json:"ttlMillis"`
	Hash      map[string]string `json:"hash"`
	ZSet      map[string]string `json:"zset"` // member -> integer score`
	Absent    bool              `json:"absent"`
	Type      string            `json:"type"`
	PTTL      *struct {
		Min int64 `json:"min"`
		Max int64 `json:"max"`
	} `json:"pttl"`
	// PTTLAnchored is PTTL with bounds that are anchor expressions of the
	// vector's clock ({T...}, expanded when the vector runs): a TTL that
	// depends on where T falls in a window too long to align T to.
	PTTLAnchored *struct {
		Min string `json:"min"`
		Max string `json:"max"`
	} `json:"pttlAnchored"`
	NoTTL   bool   `json:"noTtl"`
	HashLen *int64 `json:"hashLen"`
	// ZCard is a sorted set's size, for states whose members are not
	// known in advance (an event named after the server's clock).
	ZCard *int64 `json:"zcard"`
	// Stream, StreamLen and Pending are the notify programs' stream
	// fixtures (notify_vectors_test.go).
	Stream    *streamSetup `json:"stream"`
	StreamLen *int64       `json:"streamLen"`
	Pending   *int64       `json:"pending"`
}

func loadVectorFile(t testing.TB, path string) vectorFile {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	dec.UseNumber() // integers up to 2^53 must stay exact
	var f vectorFile
	require.NoError(t, dec.Decode(&f), path)
	return f
}

func loadVectors(t testing.TB) []vectorFile {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(vectorDir, "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	out := make([]vectorFile, 0, len(paths))
	for _, p := range paths {
		f := loadVectorFile(t, p)
		require.Equal(t, strings.TrimSuffix(filepath.Base(p), ".json"), f.Program, p)
		out = append(out, f)
	}
	return out
}

// fixtureBytes turns a fixture value into bytes: a string, {"fill": c,
// "len": n} (with "prefixHex": h, those bytes first, then the fill up to n
// bytes in all), {"sha1Of": text} (the lower-hex revision of text),
// {"hex": h}, {"envelopeGolden": name} (host/cache/envelope/testdata/<name>.hex) or
// {"envelope": {...}} (see fixtureEnvelope).
func fixtureBytes(v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		return []byte(x), nil
	case json.Number:
		return []byte(x.String()), nil
	case map[string]any:
		if s, ok := x["sha1Of"].(string); ok {
			return []byte(Revision([]byte(s))), nil
		}
		if h, ok := x["hex"].(string); ok {
			return hex.DecodeString(h)
		}
		if name, ok := x["envelopeGolden"].(string); ok {
			raw, err := os.ReadFile(filepath.Join(envelopeGoldenDir, name+".hex"))
			if err != nil {
				return nil, err
			}
			return hex.DecodeString(strings.TrimSpace(string(raw)))
		}
		if e, ok := x["envelope"].(map[string]any); ok {
			return fixtureEnvelope(e)
		}
		c, ok1 := x["fill"].(string)
		n, ok2 := x["len"].(json.Number)
		if ok1 && ok2 {
			l, err := n.Int64()
			if err != nil {
				return nil, err
			}
			var prefix []byte
			if h, ok := x["prefixHex"].(string); ok {
				if prefix, err = hex.DecodeString(h); err != nil {
					return nil, err
				}
			}
			if int64(len(prefix)) > l {
				return nil, fmt.Errorf("fill prefix longer than %d bytes", l)
			}
			return append(prefix, bytes.Repeat([]byte(c), int(l)-len(prefix))...), nil
		}
	}
	return nil, fmt.Errorf("unsupported fixture bytes %#v", v)
}

func fixtureInt(v any) (int64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, fmt.Errorf("want a JSON integer, have %#v", v)
	}
	return n.Int64()
}

package programs

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

// programKeys returns the keys a program's vectors run on: cache-put-v1
// takes a region generation and an entry in one slot, every other program
// two keys of the cache entry group.
func programKeys(t testing.TB, b *keys.Builder, program, tag string) []keys.Key {
	t.Helper()
	if program == "cache-put-v1" {
		g, e := regionKeys(t, b, tag)
		return []keys.Key{g, e}
	}
	return vectorKeys(t, b, tag, 2)
}

// regionKeys returns a region generation key and an entry key in the same
// Cluster slot. The key builder keeps the generation and entry kinds in
// separate co-location groups today, so one Group call cannot render them
// together; until the cache's key layout co-locates them (a runtime/keys
// change), the test searches entry parts for one whose slot equals the
// generation's: a real generation key and a real entry key that Cluster
// accepts in one script call (about 16k HMACs, a few milliseconds).
func regionKeys(t testing.TB, b *keys.Builder, tag string) (generation, entry keys.Key) {
	t.Helper()
	spec := keys.Spec{Capability: keys.CapCache, Region: "programs", KeyVersion: 1, Kind: "generation", Parts: [][]byte{[]byte(tag)}}
	g, err := b.Build(spec)
	require.NoError(t, err)
	spec.Kind = "entry"
	for i := 0; i < 1<<20; i++ {
		spec.Parts = [][]byte{[]byte(tag), []byte(strconv.Itoa(i))}
		e, err := b.Build(spec)
		require.NoError(t, err)
		if e.Slot() == g.Slot() {
			return g, e
		}
	}
	t.Fatal("no entry key found in the generation's slot")
	return keys.Key{}, keys.Key{}
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
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func clusterClient(t testing.TB, cl *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	user, pass := cl.AdminUser()
	c := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Seeds(), Username: user, Password: pass,
		DisableIdentity: true, MaxRetries: -1, PoolSize: 4,
		DialTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second,
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
	NoTTL   bool   `json:"noTtl"`
	HashLen *int64 `json:"hashLen"`
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
// "len": n}, {"sha1Of": text} (the lower-hex revision of text), {"hex": h},
// {"envelopeGolden": name} (host/cache/envelope/testdata/<name>.hex) or
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
			return bytes.Repeat([]byte(c), int(l)), nil
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

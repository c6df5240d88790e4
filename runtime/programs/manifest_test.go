package programs

import (
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/runtime/certainty"
)

func embeddedManifest(t testing.TB) []byte {
	t.Helper()
	b, err := fs.ReadFile(embedded, "program-set.json")
	require.NoError(t, err)
	return b
}

// mutate decodes the embedded manifest into generic JSON, applies fn and
// re-encodes it, so each case changes exactly one thing.
func mutate(t *testing.T, fn func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(embeddedManifest(t), &m))
	fn(m)
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

// prog0 returns the program the mutation cases edit:
// cache-refresh-claim-v1 (its second argument is a TTL, its second status
// is not ACQUIRED), wherever it sorts.
func prog0(m map[string]any) map[string]any {
	for _, p := range m["programs"].([]any) {
		if p.(map[string]any)["id"] == "cache-refresh-claim-v1" {
			return p.(map[string]any)
		}
	}
	panic("cache-refresh-claim-v1 not in the manifest")
}

func TestDecodeManifestEmbedded(t *testing.T) {
	m, err := DecodeManifest(embeddedManifest(t))
	require.NoError(t, err)
	assert.Equal(t, "ca-redis-programs-v1", m.ProgramSet)
	assert.Equal(t, "7.0", m.MinimumRedisVersion)
	assert.Equal(t, int64(2592000000), m.MaxTTLMillis)
	assert.Equal(t, 15, m.SetVersion)
	assert.Len(t, m.Programs, 60)
	for _, p := range m.Programs {
		assert.Equal(t, "7.0", p.MinimumRedisVersion)
		// Only the rate programs read Redis TIME (once per call).
		want := "none"
		if strings.HasPrefix(p.ID, "rate-") {
			want = "redis-time"
		}
		assert.Equal(t, want, p.Clock, p.ID)
	}
}

func TestDecodeManifestRejects(t *testing.T) {
	cases := map[string]struct {
		raw  []byte
		want string
	}{
		"unknown top-level field": {mutate(t, func(m map[string]any) { m["extra"] = 1 }), "unknown field"},
		"unknown program field":   {mutate(t, func(m map[string]any) { prog0(m)["shebang"] = "x" }), "unknown field"},
		"missing sha256":          {mutate(t, func(m map[string]any) { delete(prog0(m), "sha256") }), "sha256"},
		"missing readOnly":        {mutate(t, func(m map[string]any) { delete(prog0(m), "readOnly") }), "readOnly is required"},
		"key index gap": {mutate(t, func(m map[string]any) {
			prog0(m)["keys"].([]any)[0].(map[string]any)["index"] = 2
		}), "contiguous"},
		"arg index gap": {mutate(t, func(m map[string]any) {
			prog0(m)["arguments"].([]any)[1].(map[string]any)["index"] = 3
		}), "contiguous"},
		"duplicate status": {mutate(t, func(m map[string]any) {
			prog0(m)["statuses"].([]any)[1].(map[string]any)["name"] = "ACQUIRED"
		}), "duplicated"},
		"status code gap": {mutate(t, func(m map[string]any) {
			prog0(m)["statuses"].([]any)[1].(map[string]any)["code"] = 7
		}), "contiguous"},
		"status outcome indeterminate": {mutate(t, func(m map[string]any) {
			prog0(m)["statuses"].([]any)[0].(map[string]any)["outcome"] = "INDETERMINATE"
		}), "not a server-reported outcome"},
		"bytes bound inverted": {mutate(t, func(m map[string]any) {
			a := prog0(m)["arguments"].([]any)[0].(map[string]any)
			a["minBytes"], a["maxBytes"] = 10, 5
		}), "byte bounds"},
		"bytes bound too large": {mutate(t, func(m map[string]any) {
			prog0(m)["arguments"].([]any)[0].(map[string]any)["maxBytes"] = 1 << 30
		}), "byte bounds"},
		"integer without max": {mutate(t, func(m map[string]any) {
			delete(prog0(m)["arguments"].([]any)[1].(map[string]any), "max")
		}), "min and max are required"},
		"ttl above set max": {mutate(t, func(m map[string]any) {
			prog0(m)["arguments"].([]any)[1].(map[string]any)["max"] = 2592000001
		}), "TTL bounds"},
		"mixed bounds": {mutate(t, func(m map[string]any) {
			prog0(m)["arguments"].([]any)[1].(map[string]any)["maxBytes"] = 4
		}), "must not carry minBytes"},
		"unknown arg type": {mutate(t, func(m map[string]any) {
			prog0(m)["arguments"].([]any)[0].(map[string]any)["type"] = "lua"
		}), "type"},
		"unsorted programs": {mutate(t, func(m map[string]any) {
			ps := m["programs"].([]any)
			ps[0], ps[1] = ps[1], ps[0]
		}), "sorted"},
		"wrong function name": {mutate(t, func(m map[string]any) { prog0(m)["function"] = "ca_other_v1" }), "function"},
		"bad id":              {mutate(t, func(m map[string]any) { prog0(m)["id"] = "NoVersion" }), "id must"},
		"forbidden acl":       {mutate(t, func(m map[string]any) { prog0(m)["aclCommands"] = []any{"GET", "KEYS"} }), "forbidden"},
		"complexity":          {mutate(t, func(m map[string]any) { prog0(m)["complexity"] = "O(N)" }), "O(1)"},
		"clock":               {mutate(t, func(m map[string]any) { prog0(m)["clock"] = "client" }), "clock"},
		"retry safety":        {mutate(t, func(m map[string]any) { prog0(m)["retrySafety"] = "yes" }), "retrySafety"},
		"writer not indeterminate": {mutate(t, func(m map[string]any) {
			prog0(m)["timeoutCertainty"] = "not-applicable"
		}), "must be indeterminate"},
		"schema version": {mutate(t, func(m map[string]any) { m["resultSchemaVersion"] = 2 }), "resultSchemaVersion"},
		"no programs":    {mutate(t, func(m map[string]any) { m["programs"] = []any{} }), "programs"},
		"trailing data":  {append(embeddedManifest(t), []byte(`{}`)...), "trailing"},
		"not json":       {[]byte("nope"), "decode"},
		"too large":      {[]byte(strings.Repeat(" ", maxManifestBytes+1)), "limit"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeManifest(tc.raw)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrManifest))
			var me *ManifestError
			require.ErrorAs(t, err, &me)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// FuzzDecodeManifest: arbitrary input never panics, and anything accepted
// re-validates and survives a JSON round trip unchanged.
func FuzzDecodeManifest(f *testing.F) {
	f.Add(embeddedManifest(f))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"programs":[{"id":"a-v1"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			require.ErrorIs(t, err, ErrManifest)
			return
		}
		require.Empty(t, m.validate())
		again, err := json.Marshal(m)
		require.NoError(t, err)
		m2, err := DecodeManifest(again)
		require.NoError(t, err)
		require.Equal(t, m, m2)
	})
}

func TestDecodeReply(t *testing.T) {
	c := mustCatalog(t)
	p, _ := c.Program("set-if-absent-with-ttl-v1")
	g, _ := c.Program("region-generation-init-v1")
	m := &c.manifest
	ok := func(spec *ProgramSpec, v any) reply {
		r, err := decodeReply(m, spec, v)
		require.NoError(t, err)
		return r
	}
	r := ok(&p.spec, []any{int64(1), int64(2), int64(0), int64(1500), int64(1)})
	assert.Equal(t, int64(2), r.status)
	assert.Equal(t, SetIfAbsentExists, SetIfAbsentStatus(r.status))
	assert.Equal(t, certainty.NotApplied, SetIfAbsentStatus(r.status).Outcome())
	assert.Equal(t, int64(1500), r.int(0))
	rg := ok(&g.spec, []any{int64(1), int64(1), int64(0), "gen"})
	assert.Equal(t, []byte("gen"), rg.bytes(0))

	bad := map[string]any{
		"not array":       "OK",
		"nil":             nil,
		"short":           []any{int64(1), int64(1), int64(0), int64(1)},
		"long":            []any{int64(1), int64(1), int64(0), int64(1), int64(1), int64(1)},
		"schema 2":        []any{int64(2), int64(1), int64(0), int64(1), int64(1)},
		"schema string":   []any{"1", int64(1), int64(0), int64(1), int64(1)},
		"status 0":        []any{int64(1), int64(0), int64(0), int64(1), int64(1)},
		"status unknown":  []any{int64(1), int64(5), int64(0), int64(1), int64(1)},
		"now without clk": []any{int64(1), int64(1), int64(99), int64(1), int64(1)},
		"field type":      []any{int64(1), int64(1), int64(0), "x", int64(1)},
	}
	for name, v := range bad {
		t.Run(name, func(t *testing.T) {
			_, err := decodeReply(m, &p.spec, v)
			require.ErrorIs(t, err, ErrIncompatible)
			var ce *CompatibilityError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, "set-if-absent-with-ttl-v1", ce.Program)
		})
	}
	_, err := decodeReply(m, &g.spec, []any{int64(1), int64(1), int64(0), int64(5)})
	require.ErrorIs(t, err, ErrIncompatible, "bytes field given an integer")
}

// FuzzDecodeReply: any reply shape decodes to a known status or an
// ErrIncompatible, never a panic and never an unknown status.
func FuzzDecodeReply(f *testing.F) {
	f.Add(int64(1), int64(1), int64(0), int64(5), "x", uint8(5), false)
	f.Add(int64(1), int64(9), int64(0), int64(5), "x", uint8(4), true)
	f.Add(int64(0), int64(-1), int64(-3), int64(0), "", uint8(0), false)
	c, err := Load()
	require.NoError(f, err)
	progs := c.Programs()
	f.Fuzz(func(t *testing.T, schema, status, now, n int64, s string, shape uint8, strPrimary bool) {
		p := progs[int(shape)%len(progs)]
		tuple := []any{schema, status, now}
		for i := 0; i < int(shape%7); i++ {
			if strPrimary && i == 0 {
				tuple = append(tuple, s)
			} else {
				tuple = append(tuple, n)
			}
		}
		r, err := decodeReply(&c.manifest, &p.spec, tuple)
		if err != nil {
			require.ErrorIs(t, err, ErrIncompatible)
			return
		}
		require.GreaterOrEqual(t, r.status, int64(1))
		require.LessOrEqual(t, r.status, int64(len(p.spec.Statuses)))
		require.True(t, statusOutcome(facadeStatuses(p.ID()), uint8(r.status)).Valid())
		require.Equal(t, len(p.spec.Result), r.n)
	})
}

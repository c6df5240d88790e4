package commands

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file; run go test -run %s -update", t.Name())
	assert.Equal(t, string(want), got)
}

// describe renders a catalog canonically, one line per entry.
func describe(c *Catalog) string {
	var b strings.Builder
	for _, n := range c.Names() {
		e, _ := c.Entry(n)
		if e.Blocked() {
			fmt.Fprintf(&b, "%s %s blocked\n", e.Name, e.Risk)
			continue
		}
		fmt.Fprintf(&b, "%s %s %s lanes=%v ro=%t rs=%t idem=%t keys=%q chans=%q creates=%s ttl=%v from=%d max=%d reply=%s\n",
			e.Name, e.Risk, e.Support, e.Lanes, e.ReadOnly, e.RetrySafe, e.Idempotent, e.Keys, e.Channels,
			e.CreatesKey, e.TTLOptions, e.OptionsFrom, e.MaxArgs, e.Reply)
	}
	return b.String()
}

func TestDefaultCatalogGolden(t *testing.T) {
	c, err := Default()
	require.NoError(t, err)
	golden(t, "testdata/default.golden", describe(c))
}

func TestValidGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/valid/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			c, err := Parse(data)
			require.NoError(t, err)
			golden(t, strings.TrimSuffix(f, ".yaml")+".golden", describe(c))
		})
	}
}

func TestInvalidGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 15)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			require.NoError(t, err)
			c, err := Parse(data)
			require.Error(t, err)
			assert.Nil(t, c)
			require.ErrorIs(t, err, ErrInvalidCatalog)
			var ce *CatalogError
			require.ErrorAs(t, err, &ce)
			require.NotEmpty(t, ce.Problems)
			var p *Problem
			require.ErrorAs(t, err, &p)
			lines := make([]string, len(ce.Problems))
			for i, p := range ce.Problems {
				lines[i] = p.Error()
			}
			golden(t, strings.TrimSuffix(f, ".yaml")+".golden", strings.Join(lines, "\n")+"\n")
		})
	}
}

// Every problem is reported, not only the first: the enum file has one
// defect per field and each names its command and field.
func TestParseCollectsEveryProblem(t *testing.T) {
	data, err := os.ReadFile("testdata/invalid/bad_enums.yaml")
	require.NoError(t, err)
	_, err = Parse(data)
	var ce *CatalogError
	require.ErrorAs(t, err, &ce)
	fields := map[string]bool{}
	for _, p := range ce.Problems {
		if p.Command == "GET" {
			fields[p.Field] = true
		}
	}
	for _, f := range []string{"lanes", "risk", "support", "read-only", "retry-safe", "creates-key", "max-args", "reply"} {
		assert.True(t, fields[f], "no problem reported for GET.%s", f)
	}
}

func TestDefaultCatalogContents(t *testing.T) {
	c, err := Default()
	require.NoError(t, err)
	blocked := []string{"KEYS", "FLUSHALL", "FLUSHDB", "CONFIG|SET", "CONFIG|REWRITE", "CONFIG|RESETSTAT", "EVAL", "EVAL_RO",
		"SCRIPT|FLUSH", "SCRIPT|KILL", "FUNCTION|FLUSH", "FUNCTION|KILL", "DEBUG", "SHUTDOWN", "MONITOR", "CLIENT|KILL",
		"SETEX", "SETNX", "PSETEX", "GETSET", "SAVE", "BGSAVE", "BGREWRITEAOF", "REPLICAOF", "SLAVEOF", "MIGRATE",
		"SWAPDB", "MOVE", "CLIENT|SETINFO"}
	for _, n := range blocked {
		e, ok := c.Entry(n)
		if assert.True(t, ok, n) {
			assert.True(t, e.Blocked(), n)
			assert.Empty(t, e.Lanes, n)
		}
	}
	present := []string{"GET", "GETRANGE", "SET", "DEL", "UNLINK", "EXISTS", "PTTL", "PEXPIRE", "MGET", "PING", "TIME",
		"EVALSHA", "EVALSHA_RO", "SCRIPT|LOAD", "SCRIPT|EXISTS", "FCALL", "FCALL_RO", "FUNCTION|LOAD", "FUNCTION|LIST",
		"FUNCTION|DELETE", "INFO", "CONFIG|GET", "ACL|GETUSER", "CLUSTER|INFO", "CLUSTER|SLOTS", "CLUSTER|SHARDS", "CLUSTER|NODES", "ROLE",
		"XADD", "XREAD", "XREADGROUP", "XACK", "XAUTOCLAIM", "PUBLISH", "SUBSCRIBE", "UNSUBSCRIBE", "PSUBSCRIBE",
		"SPUBLISH", "SSUBSCRIBE", "SUNSUBSCRIBE",
		"HELLO", "AUTH", "SELECT", "CLIENT|SETNAME", "READONLY", "ASKING",
		"SENTINEL|GET-MASTER-ADDR-BY-NAME", "SENTINEL|SENTINELS", "SENTINEL|REPLICAS"}
	for _, n := range present {
		e, ok := c.Entry(n)
		if assert.True(t, ok, n) {
			assert.False(t, e.Blocked(), n)
			assert.NotEmpty(t, e.Lanes, n)
		}
	}
	// Connection set-up must pass on every lane, or a lane cannot connect.
	for _, n := range []string{"HELLO", "AUTH", "SELECT", "CLIENT|SETNAME", "READONLY", "PING", "CLUSTER|SLOTS", "ASKING"} {
		e, _ := c.Entry(n)
		assert.Equal(t, policy.Lanes(), e.Lanes, n)
	}
	for _, n := range []string{"FUNCTION|LOAD", "INFO", "CONFIG|GET", "ACL|GETUSER", "FUNCTION|DELETE"} {
		e, _ := c.Entry(n)
		assert.Equal(t, []policy.Lane{policy.LaneAdmin}, e.Lanes, n)
	}
	set, _ := c.Entry("SET")
	assert.Equal(t, CreatesWithTTL, set.CreatesKey)
	// WAIT is script-lane only; the guard admits it only under a
	// replica-wait grant (runtime/guard).
	wait, _ := c.Entry("WAIT")
	assert.Equal(t, []policy.Lane{policy.LaneScript}, wait.Lanes)
	assert.Equal(t, SupportAdvancedTyped, wait.Support)
	assert.Equal(t, 3, wait.MaxArgs)
	for _, n := range []string{"HSET", "LPUSH", "SADD"} {
		_, ok := c.Entry(n)
		assert.False(t, ok, "%s must stay out of the regular catalog (default-deny)", n)
	}
	names := c.Names()
	assert.IsNonDecreasing(t, names)
	assert.Len(t, names, c.Len())
}

func TestLookup(t *testing.T) {
	c, err := Default()
	require.NoError(t, err)
	cases := []struct {
		args []any
		want string
	}{
		{[]any{"get", "k"}, "GET"},
		{[]any{"GeT", "k"}, "GET"},
		{[]any{[]byte("set"), "k", "v"}, "SET"},
		{[]any{"config", "get", "maxmemory"}, "CONFIG|GET"},
		{[]any{"CONFIG", "SET", "x", "y"}, "CONFIG|SET"},
		{[]any{"client", "setname", "x"}, "CLIENT|SETNAME"},
		{[]any{"sentinel", "get-master-addr-by-name", "m"}, "SENTINEL|GET-MASTER-ADDR-BY-NAME"},
		{[]any{"script", "load", "return 1"}, "SCRIPT|LOAD"},
	}
	for _, tc := range cases {
		e, ok := c.Lookup(tc.args)
		if assert.True(t, ok, "%v", tc.args) {
			assert.Equal(t, tc.want, e.Name)
		}
	}
	for _, args := range [][]any{
		nil, {}, {"hgetall", "k"}, {"config"}, {"config", "bogus"}, {"config", 42}, {42}, {""},
		{strings.Repeat("g", 100)}, {"get|x"}, {"CONFIG|GET"},
	} {
		_, ok := c.Lookup(args)
		assert.False(t, ok, "%v", args)
	}
	var nilCat *Catalog
	_, ok := nilCat.Lookup([]any{"get"})
	assert.False(t, ok)
}

func TestLookupDoesNotAllocate(t *testing.T) {
	c, err := Default()
	require.NoError(t, err)
	args := []any{"config", "get", "maxmemory"}
	allocs := testing.AllocsPerRun(100, func() { _, _ = c.Lookup(args) })
	assert.Zero(t, allocs)
}

func TestKeyPositions(t *testing.T) {
	c, err := Default()
	require.NoError(t, err)
	pos := func(args ...any) ([]int, error) {
		e, ok := c.Lookup(args)
		require.True(t, ok, "%v", args)
		return e.KeyPositions(args)
	}
	cases := []struct {
		args []any
		want []int
	}{
		{[]any{"get", "k"}, []int{1}},
		{[]any{"mget", "a", "b", "c"}, []int{1, 2, 3}},
		{[]any{"del", "a"}, []int{1}},
		{[]any{"evalsha", "sha", 2, "k1", "k2", "argv"}, []int{3, 4}},
		{[]any{"evalsha", "sha", "0", "argv"}, []int{}},
		{[]any{"fcall", "fn", int64(1), "k1"}, []int{3}},
		{[]any{"xread", "count", 10, "block", 5, "streams", "s1", "s2", "0", "0"}, []int{6, 7}},
		{[]any{"xreadgroup", "group", "streams", "c", "noack", "streams", "s1", ">"}, []int{6}},
		{[]any{"ping"}, nil},
	}
	for _, tc := range cases {
		got, err := pos(tc.args...)
		require.NoError(t, err, "%v", tc.args)
		assert.Equal(t, tc.want, got, "%v", tc.args)
	}
	for _, args := range [][]any{
		{"get"}, {"mget"}, {"evalsha", "sha"}, {"evalsha", "sha", "x"}, {"evalsha", "sha", -1},
		{"evalsha", "sha", 3, "k1"}, {"xread", "streams", "s1"}, {"xread", "count", 1}, {"xread", "bogus", "streams", "s", "0"},
		{"xread", 7, "streams", "s", "0"},
	} {
		_, err := pos(args...)
		require.Error(t, err, "%v", args)
		assert.ErrorIs(t, err, ErrMalformedArgs)
		var ae *ArgsError
		require.ErrorAs(t, err, &ae)
		for _, a := range args[1:] {
			if s, ok := a.(string); ok && len(s) > 2 && s != "streams" && s != "count" && s != "bogus" {
				assert.NotContains(t, err.Error(), s, "error must not echo arguments")
			}
		}
	}
}

func TestParseKeySpecRoundTrip(t *testing.T) {
	for _, s := range []string{"none", "streams", "numkeys 2", "1 1 1", "1 -1 1", "2 -1 2"} {
		ks, err := ParseKeySpec(s)
		require.NoError(t, err, s)
		assert.Equal(t, s, ks.String())
	}
	for _, s := range []string{"", "movable", "0 1 1", "1 1 0", "3 2 1", "1 0 1", "numkeys 0", "numkeys", "1 1", "a b c", "1 1 1 1", "99 99 1"} {
		_, err := ParseKeySpec(s)
		assert.Error(t, err, s)
	}
}

func TestParseBoundsInput(t *testing.T) {
	_, err := Parse(make([]byte, maxCatalogBytes+1))
	require.ErrorIs(t, err, ErrInvalidCatalog)
	var b strings.Builder
	b.WriteString("version: 1\ncommands:\n")
	for i := 0; i < 500; i++ {
		fmt.Fprintf(&b, "  C%d:\n    risk: R9\n    support: blocked\n    note: x\n", i)
	}
	_, err = Parse([]byte(b.String()))
	var ce *CatalogError
	require.ErrorAs(t, err, &ce)
	assert.LessOrEqual(t, len(ce.Problems), maxProblems+1)
}

func TestDefaultReturnsIndependentCatalogs(t *testing.T) {
	a, err := Default()
	require.NoError(t, err)
	b, err := Default()
	require.NoError(t, err)
	names := a.Names()
	names[0] = "MUTATED"
	assert.NotEqual(t, "MUTATED", a.Names()[0])
	assert.Equal(t, a.Names(), b.Names())
	y := DefaultYAML()
	y[0] = 'X'
	assert.NotEqual(t, byte('X'), DefaultYAML()[0])
}

func TestRiskString(t *testing.T) {
	assert.Equal(t, "R1", R1.String())
	assert.Equal(t, "R4", R4.String())
	assert.Equal(t, "R?", Risk(0).String())
	assert.True(t, errors.Is(&ArgsError{}, ErrMalformedArgs))
}

func FuzzParse(f *testing.F) {
	f.Add(DefaultYAML())
	for _, dir := range []string{"testdata/valid", "testdata/invalid"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, file := range files {
			if data, err := os.ReadFile(file); err == nil {
				f.Add(data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			require.Nil(t, c)
			require.ErrorIs(t, err, ErrInvalidCatalog)
			return
		}
		// A catalog that parses satisfies the invariants and looks up its own names.
		for _, n := range c.Names() {
			e, ok := c.Entry(n)
			require.True(t, ok)
			if e.Risk == R4 {
				require.True(t, e.Blocked())
			}
			if e.RetrySafe && !e.ReadOnly {
				require.True(t, e.Idempotent)
			}
			parent, sub, hasSub := strings.Cut(n, "|")
			args := []any{strings.ToLower(parent)}
			if hasSub {
				args = append(args, strings.ToLower(sub))
			}
			got, ok := c.Lookup(args)
			require.True(t, ok, n)
			require.Equal(t, n, got.Name)
		}
	})
}

func FuzzKeySpec(f *testing.F) {
	f.Add("1 -1 1", "mget a b c")
	f.Add("numkeys 2", "evalsha sha 2 k1 k2 a")
	f.Add("streams", "xreadgroup group g c count 5 streams s1 s2 0 0")
	f.Add("2 -2 2", "x a b c d e")
	f.Fuzz(func(t *testing.T, spec, line string) {
		ks, err := ParseKeySpec(spec)
		if err != nil {
			return
		}
		again, err := ParseKeySpec(ks.String())
		require.NoError(t, err)
		require.Equal(t, ks, again)
		var args []any
		for _, f := range strings.Fields(line) {
			args = append(args, f)
		}
		pos, err := ks.Positions("X", args)
		if err != nil {
			require.ErrorIs(t, err, ErrMalformedArgs)
			return
		}
		for _, p := range pos {
			require.True(t, p >= 1 && p < len(args), "position %d out of %d args", p, len(args))
		}
	})
}

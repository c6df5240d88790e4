package keys

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

func TestNewBuilderValid(t *testing.T) {
	b := newTestBuilder(t)
	assert.Equal(t, "ca:worklog-api:prod:", b.Namespace())
	assert.Equal(t, 2, b.WriteVersion())
	assert.Equal(t, []int{2, 1}, b.ReadableVersions(), "newest first")
	assert.Equal(t, DefaultMaxKeyBytes, b.MaxKeyBytes())

	// ReadableVersions hands out a copy.
	rv := b.ReadableVersions()
	rv[0] = 99
	assert.Equal(t, []int{2, 1}, b.ReadableVersions())
}

func TestNewBuilderValidation(t *testing.T) {
	secret := func(n int) policy.Secret { return policy.NewSecret(bytes.Repeat([]byte{'x'}, n)) }
	tests := []struct {
		name   string
		mutate func(*Config)
		fields []string // every field that must be reported
	}{
		{"empty app", func(c *Config) { c.App = "" }, []string{"App"}},
		{"app too long", func(c *Config) { c.App = strings.Repeat("a", 33) }, []string{"App"}},
		{"app 32 ok", func(c *Config) { c.App = strings.Repeat("a", 32) }, nil},
		{"app upper case", func(c *Config) { c.App = "Worklog" }, []string{"App"}},
		{"app leading dash", func(c *Config) { c.App = "-app" }, []string{"App"}},
		{"app colon", func(c *Config) { c.App = "a:b" }, []string{"App"}},
		{"app brace", func(c *Config) { c.App = "a{b}" }, []string{"App"}},
		{"env space", func(c *Config) { c.Env = "pr od" }, []string{"Env"}},
		{"env unicode", func(c *Config) { c.Env = "prød" }, []string{"Env"}},
		{"max key bytes negative", func(c *Config) { c.MaxKeyBytes = -1 }, []string{"MaxKeyBytes"}},
		{"max key bytes too small", func(c *Config) { c.MaxKeyBytes = MinMaxKeyBytes - 1 }, []string{"MaxKeyBytes"}},
		{"max key bytes too large", func(c *Config) { c.MaxKeyBytes = MaxMaxKeyBytes + 1 }, []string{"MaxKeyBytes"}},
		{"max key bytes bounds ok", func(c *Config) { c.MaxKeyBytes = MaxMaxKeyBytes }, nil},
		{"no versions", func(c *Config) { c.Material.Versions = nil }, []string{"Material.Versions"}},
		{"write version zero", func(c *Config) { c.Material.WriteVersion = 0 }, []string{"Material.WriteVersion"}},
		{"write version too large", func(c *Config) { c.Material.WriteVersion = 1000 }, []string{"Material.WriteVersion"}},
		{"write version missing", func(c *Config) { c.Material.WriteVersion = 3 }, []string{"Material.WriteVersion"}},
		{"short secret", func(c *Config) { c.Material.Versions[1] = secret(31) }, []string{"Material.Versions[1]"}},
		{"32-byte secret ok", func(c *Config) { c.Material.Versions[1] = secret(32) }, nil},
		{"huge secret", func(c *Config) { c.Material.Versions[1] = secret(MaxSecretBytes + 1) }, []string{"Material.Versions[1]"}},
		{"empty secret", func(c *Config) { c.Material.Versions[2] = policy.Secret{} }, []string{"Material.Versions[2]"}},
		{"version zero reserved", func(c *Config) { c.Material.Versions[0] = secret(40) }, []string{"Material.Versions[0]"}},
		{"version too large", func(c *Config) { c.Material.Versions[1000] = secret(40) }, []string{"Material.Versions[1000]"}},
		{"four versions ok", func(c *Config) { c.Material.Versions[3], c.Material.Versions[4] = secret(40), secret(40) }, nil},
		{"five versions", func(c *Config) {
			for v := 3; v <= 5; v++ {
				c.Material.Versions[v] = secret(40)
			}
		}, []string{"Material.Versions"}},
		{"everything at once", func(c *Config) {
			c.App, c.Env, c.MaxKeyBytes = "", "UP", 7
			c.Material.WriteVersion = 9
			c.Material.Versions[1] = secret(3)
		}, []string{"App", "Env", "MaxKeyBytes", "Material.WriteVersion", "Material.Versions[1]"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.mutate(&cfg)
			b, err := NewBuilder(cfg)
			if tc.fields == nil {
				require.NoError(t, err)
				require.NotNil(t, b)
				return
			}
			require.Error(t, err)
			require.Nil(t, b)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.NotErrorIs(t, err, ErrInvalidSpec)
			var ke *Error
			require.ErrorAs(t, err, &ke)
			assert.ElementsMatch(t, tc.fields, fieldsOf(err), "every problem is reported, once")
			assertNoLeak(t, err.Error())
		})
	}
}

func fieldsOf(err error) []string {
	var out []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		var ke *Error
		if errors.As(e, &ke) {
			out = append(out, ke.Field)
		}
	}
	walk(err)
	return out
}

func assertNoLeak(t *testing.T, s string) {
	t.Helper()
	for _, secret := range [][]byte{secretV1, secretV2, secretV1[:16], secretV2[:16]} {
		assert.NotContains(t, s, string(secret))
		assert.NotContains(t, s, fmt.Sprintf("%x", secret[:8]))
	}
}

func TestBuildValidation(t *testing.T) {
	b := newTestBuilder(t)
	pii := "alice@example.com"
	tests := []struct {
		name   string
		spec   Spec
		fields []string
	}{
		{"ok", spec(CapCache, "entry", "t1", "item"), nil},
		{"unknown capability", Spec{Capability: "raw", Region: "r", KeyVersion: 1, Kind: "entry", Parts: [][]byte{{1}}}, []string{"Capability"}},
		{"empty capability", Spec{Region: "r", KeyVersion: 1, Kind: "entry", Parts: [][]byte{{1}}}, []string{"Capability"}},
		{"empty region", func() Spec { s := spec(CapCache, "entry", "x"); s.Region = ""; return s }(), []string{"Region"}},
		{"region with brace", func() Spec { s := spec(CapCache, "entry", "x"); s.Region = "a{b"; return s }(), []string{"Region"}},
		{"region with closing brace", func() Spec { s := spec(CapCache, "entry", "x"); s.Region = "ab}"; return s }(), []string{"Region"}},
		{"region with colon", func() Spec { s := spec(CapCache, "entry", "x"); s.Region = "a:b"; return s }(), []string{"Region"}},
		{"region too long", func() Spec { s := spec(CapCache, "entry", "x"); s.Region = strings.Repeat("r", 65); return s }(), []string{"Region"}},
		{"region 64 ok", func() Spec { s := spec(CapCache, "entry", "x"); s.Region = strings.Repeat("r", 64); return s }(), nil},
		{"region PII", func() Spec { s := spec(CapCache, "entry", "x"); s.Region = pii; return s }(), []string{"Region"}},
		{"key version zero", func() Spec { s := spec(CapCache, "entry", "x"); s.KeyVersion = 0; return s }(), []string{"KeyVersion"}},
		{"key version 1000", func() Spec { s := spec(CapCache, "entry", "x"); s.KeyVersion = 1000; return s }(), []string{"KeyVersion"}},
		{"key version 999 ok", func() Spec { s := spec(CapCache, "entry", "x"); s.KeyVersion = 999; return s }(), nil},
		{"kind not allowed for capability", spec(CapCache, "bucket", "x"), []string{"Kind"}},
		{"kind empty", spec(CapRate, "", "x"), []string{"Kind"}},
		{"kind with brace", spec(CapRate, "{bucket}", "x"), []string{"Kind"}},
		{"no parts", spec(CapLease, "owner"), []string{"Parts"}},
		{"17 parts", spec(CapLease, "owner", strings.Split(strings.Repeat("p,", 16)+"p", ",")...), []string{"Parts"}},
		{"16 parts ok", spec(CapLease, "owner", strings.Split(strings.Repeat("p,", 15)+"p", ",")...), nil},
		{"part too big", spec(CapLease, "owner", "a", strings.Repeat(pii, 70)), []string{"Parts[1]"}},
		{"part 1024 ok", spec(CapLease, "owner", strings.Repeat("z", MaxPartBytes)), nil},
		{"empty part ok", spec(CapLease, "owner", ""), nil},
		{"braces and colons in parts ok", spec(CapLease, "owner", "{x}:y", "}{"), nil},
		{"everything at once", Spec{Capability: "nope", Region: "A", KeyVersion: -1, Kind: "?"}, []string{"Capability", "Region", "KeyVersion", "Parts"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k, err := b.Build(tc.spec)
			if tc.fields == nil {
				require.NoError(t, err)
				requireWellFormed(t, b, tc.spec, k)
				return
			}
			require.Error(t, err)
			assert.True(t, k.IsZero())
			assert.ErrorIs(t, err, ErrInvalidSpec)
			assert.NotErrorIs(t, err, ErrInvalidConfig)
			assert.ElementsMatch(t, tc.fields, fieldsOf(err))
			assert.NotContains(t, err.Error(), pii, "part and region bytes never reach errors")
			assertNoLeak(t, err.Error())
		})
	}
}

func TestKindAllowlists(t *testing.T) {
	want := map[Capability][]string{
		CapCache:   {"entry", "refresh-lease", "generation", "channel"},
		CapRate:    {"bucket", "window", "log", "dedup", "concurrency"},
		CapLease:   {"owner"},
		CapFence:   {"owner", "counter"},
		CapIdem:    {"record", "marker"},
		CapSession: {"session", "tombstone"},
		CapProbe:   {"probe"},
		CapGen:     {"generation"},
		CapNotify:  {"stream", "intent", "quarantine"},
	}
	require.Len(t, Capabilities(), len(want))
	b := newTestBuilder(t)
	allKinds := map[string]bool{}
	for _, ks := range want {
		for _, k := range ks {
			allKinds[k] = true
		}
	}
	for _, c := range Capabilities() {
		assert.True(t, c.Valid())
		assert.Equal(t, want[c], c.Kinds(), "capability %s", c)
		for k := range allKinds {
			_, err := b.Build(spec(c, k, "p"))
			if contains(want[c], k) {
				assert.NoError(t, err, "%s/%s", c, k)
			} else {
				assert.ErrorIs(t, err, ErrInvalidSpec, "%s/%s must be rejected", c, k)
			}
		}
	}
	assert.False(t, Capability("CACHE").Valid())
	assert.Nil(t, Capability("x").Kinds())
}

func TestKindGroupsAgree(t *testing.T) {
	for _, c := range Capabilities() {
		for _, g := range c.groups() {
			for _, k := range g.kinds {
				assert.Equal(t, g.name, c.groupOf(k), "%s/%s", c, k)
			}
		}
		assert.Empty(t, c.groupOf("nope"))
	}
	assert.Empty(t, Capability("x").groupOf("entry"))
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func TestBuildWithVersions(t *testing.T) {
	b := newTestBuilder(t)
	s := spec(CapCache, "entry", "tenant", "item")

	w, err := b.Build(s)
	require.NoError(t, err)
	v2, err := b.BuildWith(s, 2)
	require.NoError(t, err)
	v1, err := b.BuildWith(s, 1)
	require.NoError(t, err)
	assert.Equal(t, w, v2, "Build uses the write version")
	assert.NotEqual(t, v1.Redis(), v2.Redis())
	seg1, seg2 := requireWellFormed(t, b, s, v1), requireWellFormed(t, b, s, v2)
	assert.Equal(t, 1, seg1.HashVersion)
	assert.Equal(t, 2, seg2.HashVersion)
	assert.NotEqual(t, seg1.Digest, seg2.Digest, "each version has its own material")

	for _, hv := range []int{0, 3, -1, 1000} {
		_, err := b.BuildWith(s, hv)
		assert.ErrorIs(t, err, ErrInvalidSpec, "hv%d", hv)
	}

	// Opaque: unkeyed, hv0 only, independent of the material.
	o := s
	o.Opaque = true
	ok, err := b.Build(o)
	require.NoError(t, err)
	segO := requireWellFormed(t, b, o, ok)
	assert.Equal(t, 0, segO.HashVersion)
	assert.NotEqual(t, seg2.Digest, segO.Digest)
	_, err = b.BuildWith(o, 2)
	assert.ErrorIs(t, err, ErrInvalidSpec)
	ok0, err := b.BuildWith(o, OpaqueHashVersion)
	require.NoError(t, err)
	assert.Equal(t, ok, ok0)

	other := testConfig()
	other.Material.Versions = map[int]policy.Secret{7: policy.NewSecret(bytes.Repeat([]byte{9}, 32))}
	other.Material.WriteVersion = 7
	b2, err := NewBuilder(other)
	require.NoError(t, err)
	ok2, err := b2.Build(o)
	require.NoError(t, err)
	assert.Equal(t, ok.Redis(), ok2.Redis(), "opaque digests do not depend on HMAC material")
}

func TestBuildKeyLengthBound(t *testing.T) {
	cfg := testConfig()
	cfg.App, cfg.Env = strings.Repeat("a", 32), strings.Repeat("e", 32)
	cfg.MaxKeyBytes = MinMaxKeyBytes
	b, err := NewBuilder(cfg)
	require.NoError(t, err)
	s := spec(CapCache, "refresh-lease", "x")
	s.Region = strings.Repeat("r", 64)
	_, err = b.Build(s)
	require.ErrorIs(t, err, ErrInvalidSpec)
	assert.Equal(t, []string{"Key"}, fieldsOf(err))

	// With the default bound, the longest possible key fits.
	cfg.MaxKeyBytes = 0
	b, err = NewBuilder(cfg)
	require.NoError(t, err)
	s.KeyVersion = MaxKeyVersion
	k, err := b.BuildWith(s, 2)
	require.NoError(t, err)
	requireWellFormed(t, b, s, k)
	assert.LessOrEqual(t, len(k.Redis()), DefaultMaxKeyBytes)
}

func TestGroup(t *testing.T) {
	b := newTestBuilder(t)
	cases := []struct {
		c     Capability
		kinds []string
	}{
		{CapIdem, []string{"record", "marker"}},
		{CapFence, []string{"owner", "counter"}},
		{CapRate, []string{"window", "dedup"}},
		{CapRate, []string{"bucket", "window", "log", "dedup", "concurrency"}},
		{CapCache, []string{"entry", "refresh-lease"}},
		{CapSession, []string{"session", "tombstone"}},
	}
	for _, tc := range cases {
		s := spec(tc.c, "", "tenant-7", "resource-9")
		ks, err := b.Group(s, tc.kinds...)
		require.NoError(t, err, "%s %v", tc.c, tc.kinds)
		require.Len(t, ks, len(tc.kinds))
		first := requireWellFormed(t, b, s, ks[0])
		for i, k := range ks {
			seg := requireWellFormed(t, b, s, k)
			assert.Equal(t, tc.kinds[i], k.Kind())
			assert.Equal(t, first.Digest, seg.Digest)
			assert.Equal(t, ks[0].Slot(), k.Slot())
			// A group member is exactly the key Build renders for that kind.
			s.Kind = tc.kinds[i]
			single, err := b.Build(s)
			require.NoError(t, err)
			assert.Equal(t, single, k)
		}
	}

	s := spec(CapIdem, "", "x")
	_, err := b.Group(s)
	assert.ErrorIs(t, err, ErrInvalidSpec, "no kinds")
	_, err = b.Group(s, "record", "record")
	assert.ErrorIs(t, err, ErrInvalidSpec, "duplicate kind")
	_, err = b.Group(spec(CapCache, "", "x"), "entry", "generation")
	assert.ErrorIs(t, err, ErrInvalidSpec, "different co-location groups")
	_, err = b.Group(s, "record", "bucket")
	assert.ErrorIs(t, err, ErrInvalidSpec, "kind of another capability")

	v1, err := b.GroupWith(s, 1, "record", "marker")
	require.NoError(t, err)
	v2, err := b.Group(s, "record", "marker")
	require.NoError(t, err)
	assert.NotEqual(t, v1[0].Redis(), v2[0].Redis())
	assert.Equal(t, v1[0].Slot(), v1[1].Slot())
}

func TestBuilderNeverPrintsMaterial(t *testing.T) {
	b := newTestBuilder(t)
	var outs []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		outs = append(outs, fmt.Sprintf(verb, b), fmt.Sprintf(verb, *b), fmt.Sprintf(verb, []any{b}), fmt.Sprintf(verb, struct{ B *Builder }{b}))
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("builder", "b", b)
	slog.New(slog.NewTextHandler(&buf, nil)).Info("builder", "b", b)
	outs = append(outs, buf.String(), b.String(), b.GoString())
	for _, o := range outs {
		assertNoLeak(t, o)
	}
	assert.Contains(t, b.String(), "ca:worklog-api:prod:")
	assert.Contains(t, buf.String(), "ca:worklog-api:prod:")
	var nilB *Builder
	assert.Equal(t, "keys.Builder(nil)", nilB.String())

	k, err := b.Build(spec(CapCache, "entry", "alice@example.com"))
	require.NoError(t, err)
	assert.Equal(t, "keys.Key(entry)", fmt.Sprint(k), "keys are redacted when printed")
}

func TestErrorLiteral(t *testing.T) {
	e := &Error{Field: "Region", Reason: "bad"}
	assert.ErrorIs(t, e, ErrInvalidSpec)
	assert.Equal(t, "keys: Region: bad", e.Error())
}

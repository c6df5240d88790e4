package keys

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/internal/hashslot"
)

// Recognisable material so tests can assert it never leaks.
var (
	secretV1 = bytes.Repeat([]byte("S1-secret-material!"), 2) // 38 bytes
	secretV2 = bytes.Repeat([]byte("S2-other-material!!"), 2)
)

func testConfig() Config {
	return Config{
		App: "worklog-api",
		Env: "prod",
		Material: policy.KeyMaterial{
			WriteVersion: 2,
			Versions: map[int]policy.Secret{
				1: policy.NewSecret(secretV1),
				2: policy.NewSecret(secretV2),
			},
		},
	}
}

func newTestBuilder(t testing.TB) *Builder {
	t.Helper()
	b, err := NewBuilder(testConfig())
	require.NoError(t, err)
	return b
}

func spec(c Capability, kind string, parts ...string) Spec {
	ps := make([][]byte, len(parts))
	for i, p := range parts {
		ps[i] = []byte(p)
	}
	return Spec{Capability: c, Region: "region-1", KeyVersion: 1, Kind: kind, Parts: ps}
}

// segments is an independent parse of a rendered key, used to check that
// every output has the documented shape.
type segments struct {
	App, Env, Capability, Region string
	HashVersion, KeyVersion      int
	Tag, Digest, Kind            string
}

var (
	slugRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	digestRe = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

func parseKey(s string) (segments, error) {
	var seg segments
	if strings.Count(s, "{") != 1 || strings.Count(s, "}") != 1 {
		return seg, fmt.Errorf("want exactly one hash tag, got %d '{' and %d '}'", strings.Count(s, "{"), strings.Count(s, "}"))
	}
	f := strings.Split(s, ":")
	if len(f) != 10 {
		return seg, fmt.Errorf("want 10 segments, got %d", len(f))
	}
	if f[0] != "ca" {
		return seg, fmt.Errorf("prefix %q", f[0])
	}
	for i, name := range []string{"app", "env", "capability", "region"} {
		if !slugRe.MatchString(f[i+1]) {
			return seg, fmt.Errorf("%s segment not a slug", name)
		}
	}
	hv, err := versionSegment(f[5], "hv")
	if err != nil {
		return seg, err
	}
	kv, err := versionSegment(f[6], "kv")
	if err != nil {
		return seg, err
	}
	if len(f[7]) != SlotTagLen+2 || f[7][0] != '{' || f[7][len(f[7])-1] != '}' {
		return seg, fmt.Errorf("bad tag segment")
	}
	tag := f[7][1 : len(f[7])-1]
	if !digestRe.MatchString(f[8]) {
		return seg, fmt.Errorf("bad digest segment")
	}
	if tag != f[8][:SlotTagLen] {
		return seg, fmt.Errorf("tag is not the digest prefix")
	}
	if hashslot.Tag(s) != tag {
		return seg, fmt.Errorf("Redis would hash %q, not the tag", hashslot.Tag(s))
	}
	if !slugRe.MatchString(f[9]) {
		return seg, fmt.Errorf("bad kind segment")
	}
	return segments{
		App: f[1], Env: f[2], Capability: f[3], Region: f[4],
		HashVersion: hv, KeyVersion: kv, Tag: tag, Digest: f[8], Kind: f[9],
	}, nil
}

func versionSegment(s, prefix string) (int, error) {
	if !strings.HasPrefix(s, prefix) {
		return 0, fmt.Errorf("segment %q lacks %s", s, prefix)
	}
	n, err := strconv.Atoi(s[len(prefix):])
	if err != nil || strconv.Itoa(n) != s[len(prefix):] {
		return 0, fmt.Errorf("segment %q is not %s<n>", s, prefix)
	}
	return n, nil
}

// requireWellFormed asserts every structural invariant of a key.
func requireWellFormed(t testing.TB, b *Builder, s Spec, k Key) segments {
	t.Helper()
	seg, err := parseKey(k.Redis())
	require.NoError(t, err, "key %q", k.Redis())
	require.True(t, strings.HasPrefix(k.Redis(), b.Namespace()))
	require.Equal(t, string(s.Capability), seg.Capability)
	require.Equal(t, s.Region, seg.Region)
	require.Equal(t, s.KeyVersion, seg.KeyVersion)
	require.Equal(t, k.Kind(), seg.Kind)
	require.Equal(t, hashslot.Of(k.Redis()), k.Slot())
	require.LessOrEqual(t, len(k.Redis()), b.MaxKeyBytes())
	return seg
}

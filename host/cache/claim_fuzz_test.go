package cache

import (
	"crypto/sha1"
	"encoding/base64"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

// tokenFixture is a Cache and a region that can seal and open refresh
// tokens without Redis.
func tokenFixture(t testing.TB) (*Cache, *region) {
	t.Helper()
	kb, err := keys.NewBuilder(keys.Config{App: "demo", Env: "test", Material: policy.KeyMaterial{WriteVersion: 1,
		Versions: map[int]policy.Secret{1: policy.NewSecret([]byte("0123456789abcdef0123456789abcdef"))}}})
	require.NoError(t, err)
	cfg := testConfig(t, nil)
	set, err := policy.CompileCacheRegions(cfg.Regions, cfg.compileOptions(map[string]policy.CacheCodecInfo{
		policy.CacheBuiltinCodec: BuiltinCodecInfo()}))
	require.NoError(t, err)
	p, _ := set.Lookup("items")
	c := &Cache{clock: time.Now}
	copy(c.tokenKey[:], "token-key-for-the-fuzz-target-32")
	m, err := newMetrics(nil)
	require.NoError(t, err)
	r, err := newRegion(kb, p, nil, bytesCodec{}, regionGuest{}, time.Now, m.region("items"))
	require.NoError(t, err)
	t.Cleanup(r.close)
	return c, r
}

// FuzzOpenToken: openToken never panics on any input, and a body it
// accepts re-seals to exactly the same token (one encoding per token, so
// two different strings never name one claim). The fuzzer cannot forge the
// MAC, so each input is tried twice: as sent, and with a valid MAC
// appended, which lets it reach the parser behind the MAC check.
func FuzzOpenToken(f *testing.F) {
	c, r := tokenFixture(f)
	loc, err := r.layout.Locate([][]byte{[]byte("k")})
	require.NoError(f, err)
	ref, err := r.members(loc, []byte("0123456789abcdef"))
	require.NoError(f, err)
	owner := make([]byte, 32)
	for _, obs := range []observation{{mode: obsAbsent, ref: ref}, {mode: obsValue, length: 1000, prefix: []byte("p"), ref: ref},
		{mode: obsTombstone, length: 21, prefix: []byte("t"), ref: ref}} {
		tok := c.sealToken(r, obs, owner, time.UnixMilli(1_700_000_000_000))
		b, _ := base64.RawURLEncoding.DecodeString(tok)
		f.Add(tok, b[:len(b)-tokenMACLen])
	}
	f.Add("", []byte{})
	f.Add("!!", []byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, tok string, body []byte) {
		for _, s := range []string{tok, base64.RawURLEncoding.EncodeToString(append(body[:len(body):len(body)], c.tokenMAC(body)...))} {
			tk, err := c.openToken(r, s)
			if err != nil {
				continue
			}
			lc := r.layout.LocationOf(tk.loc)
			ref, err := r.members(lc, tk.gen)
			if err != nil {
				t.Fatalf("accepted a token whose generation builds no key: %v", err)
			}
			d := tk.digest
			again := c.sealToken(r, observation{mode: tk.mode, length: tk.length, digest: (*[sha1.Size]byte)(&d), ref: ref}, tk.owner[:], tk.expires)
			if again != s {
				t.Fatalf("accepted token re-seals differently:\n in  %q\n out %q", s, again)
			}
		}
	})
}

package cache

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/caphost/caphost/policy"
)

// FuzzDecode feeds the capabilities.cache block arbitrary JSON (what a
// config file or an environment override can hold): Decode never panics,
// every refusal is a *policy.ValidationError, and a block it accepts
// compiles, with every effective bound the host acts on in range: no
// strict region trusts a generation, no trust exceeds its bound, and no
// region uses L1 without a hint secret.
func FuzzDecode(f *testing.F) {
	var m map[string]any
	require.NoError(f, yaml.Unmarshal([]byte(example), &m))
	delete(m, "provider")
	seed, err := json.Marshal(m)
	require.NoError(f, err)
	f.Add(seed, false)
	f.Add([]byte(`{"defaults":{"generation-trust":"250ms","shards":8},"regions":{"p":{"ttl":{"hard":"1m"},"generation-trust":"0s"},`+
		`"s":{"ttl":{"hard":"1m"},"consistency":"read-after-invalidation","generation-trust":"1s"}}}`), true)
	f.Add([]byte(`{"regions":{"p":{"ttl":{"hard":"1m","soft":"2m"},"l1":true,"l1-limits":{"max-age":"-1s"}}}}`), false)
	f.Add([]byte(`{"regions":{"p":{"ttl":{"hard":"1m"},"codec":"product","Generation-Trust":"1s"}}}`), true)
	f.Fuzz(func(t *testing.T, data []byte, guests bool) {
		var raw map[string]any
		if json.Unmarshal(data, &raw) != nil {
			return
		}
		cfg, err := Decode(ProviderRedis, policy.RoleCache, raw, guests)
		if err != nil {
			var verr *policy.ValidationError
			require.ErrorAs(t, err, &verr)
			return
		}
		codecs := map[string]policy.CacheCodecInfo{policy.CacheBuiltinCodec: BuiltinCodecInfo()}
		for _, r := range cfg.Regions {
			if _, ok := codecs[r.Codec]; !ok {
				codecs[r.Codec] = policy.CacheCodecInfo{Source: "guest:fuzz", WriteVersion: 1, Readable: []uint32{1}}
			}
		}
		set, err := policy.CompileCacheRegions(cfg.Regions, cfg.compileOptions(codecs))
		require.NoError(t, err, "a decoded block compiles")
		for _, r := range cfg.Regions {
			p, ok := set.Lookup(r.ID)
			require.True(t, ok, r.ID)
			trust := p.Ops.GenerationTrust
			require.True(t, trust >= 0 && trust <= policy.CacheMaxGenerationTrust, "%s: trust %s", r.ID, trust)
			if p.Consistency.Strict() {
				require.Zero(t, trust, "%s: a strict region never trusts", r.ID)
				require.False(t, p.L1, "%s: a strict region has no L1", r.ID)
			}
			if p.L1 {
				require.False(t, cfg.HintSecret.IsZero(), "%s: L1 without hints", r.ID)
			}
		}
	})
}

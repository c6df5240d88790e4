package expiry_test

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/expiry"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

var (
	pol = expiry.Policy{Revision: "region-items@r7", Spread: 0.2, Min: time.Second}
	t0  = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
)

func key(i int) []byte { return fmt.Appendf(nil, "item:%d", i) }

// TestJitterGolden pins exact values: the draw must not change across
// processes, architectures or releases without a new Strategy. The values
// were cross-checked with an independent implementation:
//
//	d = b'caphost/cache/expiry/jitter/v1\x00' + pack('>I', len(rev)) + rev + pack('>I', len(key)) + key
//	u = int.from_bytes(sha256(d).digest()[:8], 'big')
//	max(ttl - (u * (ttl*ppm//10**6 + 1) >> 64), min)   # in ms
func TestJitterGolden(t *testing.T) {
	want := map[string]time.Duration{
		"item:1": 54731 * time.Millisecond,
		"item:2": 57792 * time.Millisecond,
		"item:3": 49578 * time.Millisecond,
		"":       57292 * time.Millisecond,
	}
	for k, w := range want {
		got, err := pol.JitterBytes([]byte(k), time.Minute)
		require.NoError(t, err)
		assert.Equal(t, w, got, "key %q", k)
	}
	other := pol
	other.Revision = "region-items@r8"
	got, err := other.JitterBytes([]byte("item:1"), time.Minute)
	require.NoError(t, err)
	assert.Equal(t, 50494*time.Millisecond, got, "another revision, another draw")
	assert.Equal(t, "downward-uniform/sha256-revision-key/ppm/v1", expiry.Strategy)
}

func TestJitterDistribution(t *testing.T) {
	const n = 10_000
	ttl := time.Minute
	lo, hi := 48*time.Second, time.Minute // ttl − ⌊ttl×0.2⌋
	var sum float64
	var buckets [10]int
	seenLo, seenHi := hi, lo
	changed := 0
	other := pol
	other.Revision = "region-items@r8"
	for i := 0; i < n; i++ {
		d, err := pol.JitterBytes(key(i), ttl)
		require.NoError(t, err)
		require.True(t, d >= lo && d <= hi, "key %d: %v", i, d)
		require.Zero(t, d%time.Millisecond)
		again, _ := pol.JitterBytes(key(i), ttl)
		require.Equal(t, d, again, "deterministic")
		if o, _ := other.JitterBytes(key(i), ttl); o != d {
			changed++
		}
		sum += d.Seconds()
		b := int((d - lo) * 10 / (hi - lo + time.Millisecond))
		buckets[b]++
		seenLo, seenHi = min(seenLo, d), max(seenHi, d)
	}
	mean := sum / n
	// Uniform over [48 s, 60 s]: mean 54 s, σ of the mean 12/√(12n) ≈ 0.035 s.
	assert.InDelta(t, 54.0, mean, 0.2, "mean")
	for i, c := range buckets {
		assert.InDelta(t, n/10, c, 150, "bucket %d of 10: %d", i, c) // σ ≈ 30
	}
	assert.Less(t, seenLo, lo+50*time.Millisecond, "reaches the lower bound")
	assert.Greater(t, seenHi, hi-50*time.Millisecond, "reaches the upper bound")
	assert.Greater(t, changed, n*99/100, "a new revision reshuffles the keys")
	t.Logf("mean %.3f s, buckets %v, range [%v, %v], %d/%d changed by a new revision", mean, buckets, seenLo, seenHi, changed, n)
}

func TestJitterBounds(t *testing.T) {
	zero := pol
	zero.Spread = 0
	for i := 0; i < 100; i++ {
		d, err := zero.JitterBytes(key(i), time.Minute)
		require.NoError(t, err)
		assert.Equal(t, time.Minute, d, "spread 0 is the configured ttl")
	}
	wide := expiry.Policy{Revision: "r", Spread: 0.9, Min: time.Second}
	atMin := 0
	for i := 0; i < 1000; i++ {
		d, err := wide.JitterBytes(key(i), 2*time.Second)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, d, time.Second, "never below the hard minimum")
		assert.LessOrEqual(t, d, 2*time.Second)
		if d == time.Second {
			atMin++
		}
	}
	assert.Greater(t, atMin, 300, "draws below the minimum are clamped to it")
	d, err := pol.JitterBytes(key(1), time.Second)
	require.NoError(t, err)
	assert.Equal(t, time.Second, d, "ttl = min")
	near := expiry.Policy{Revision: "r", Spread: math.Nextafter(1, 0), Min: time.Millisecond}
	d, err = near.JitterBytes(key(1), time.Hour)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, d, time.Millisecond)
}

func TestValidation(t *testing.T) {
	cases := []struct {
		p    expiry.Policy
		ttl  time.Duration
		want expiry.Reason
	}{
		{expiry.Policy{Spread: 0.1, Min: time.Second}, time.Minute, expiry.EmptyRevision},
		{expiry.Policy{Revision: string(make([]byte, 257)), Min: time.Second}, time.Minute, expiry.RevisionTooLong},
		{expiry.Policy{Revision: "r", Spread: -0.1, Min: time.Second}, time.Minute, expiry.SpreadOutOfRange},
		{expiry.Policy{Revision: "r", Spread: 1, Min: time.Second}, time.Minute, expiry.SpreadOutOfRange},
		{expiry.Policy{Revision: "r", Spread: math.NaN(), Min: time.Second}, time.Minute, expiry.SpreadOutOfRange},
		{expiry.Policy{Revision: "r", Spread: math.Inf(1), Min: time.Second}, time.Minute, expiry.SpreadOutOfRange},
		{expiry.Policy{Revision: "r"}, time.Minute, expiry.MinimumNotPositive},
		{expiry.Policy{Revision: "r", Min: -time.Second}, time.Minute, expiry.MinimumNotPositive},
		{expiry.Policy{Revision: "r", Min: 1500 * time.Microsecond}, time.Minute, expiry.NotWholeMillis},
		{expiry.Policy{Revision: "r", Min: expiry.MaxTTL + time.Millisecond}, time.Minute, expiry.TTLTooLong},
		{pol, time.Second - time.Millisecond, expiry.TTLBelowMinimum},
		{pol, 0, expiry.TTLBelowMinimum},
		{pol, -time.Minute, expiry.TTLBelowMinimum},
		{pol, time.Minute + time.Microsecond, expiry.NotWholeMillis},
		{pol, expiry.MaxTTL + time.Millisecond, expiry.TTLTooLong},
	}
	for _, c := range cases {
		_, err := c.p.JitterBytes(key(1), c.ttl)
		var e *expiry.Error
		require.ErrorAs(t, err, &e, "%+v %v", c.p, c.ttl)
		assert.Equal(t, c.want, e.Reason)
		assert.ErrorIs(t, err, expiry.ErrInvalid)
		assert.ErrorIs(t, err, c.want)
		for _, r := range expiry.Reasons() {
			if r != c.want {
				assert.False(t, errors.Is(err, r))
			}
		}
	}
	_, err := pol.PlanBytes(key(1), t0, 2*time.Minute, time.Minute)
	assert.ErrorIs(t, err, expiry.SoftAfterHard)
	_, err = pol.PlanBytes(key(1), t0, 500*time.Millisecond, time.Minute)
	assert.ErrorIs(t, err, expiry.TTLBelowMinimum, "a soft TTL obeys the minimum too")
	_, err = pol.PlanBytes(key(1), time.Unix(-1, 0), 0, time.Minute)
	assert.ErrorIs(t, err, expiry.WrittenAtOutOfRange)
	_, err = pol.PlanBytes(key(1), time.UnixMilli(1<<53-1000), 0, time.Minute)
	assert.ErrorIs(t, err, expiry.WrittenAtOutOfRange)
	for _, r := range expiry.Reasons() {
		assert.True(t, r.Valid())
		assert.NotEqual(t, "INVALID_REASON", r.String())
	}
	assert.False(t, expiry.Reason(0).Valid())
}

func TestPlan(t *testing.T) {
	for i := 0; i < 10_000; i++ {
		pl, err := pol.PlanBytes(key(i), t0.Add(123456*time.Microsecond), 30*time.Second, 5*time.Minute)
		require.NoError(t, err)
		assert.Equal(t, t0.Add(123*time.Millisecond), pl.WrittenAt, "truncated to ms like the envelope")
		soft, hard := pl.SoftExpiresAt.Sub(pl.WrittenAt), pl.HardExpiresAt.Sub(pl.WrittenAt)
		require.True(t, soft >= 24*time.Second && soft <= 30*time.Second, "soft %v", soft)
		require.True(t, hard >= 4*time.Minute && hard <= 5*time.Minute, "hard %v", hard)
		require.LessOrEqual(t, soft, hard)
		j, _ := pol.JitterBytes(key(i), 5*time.Minute)
		require.Equal(t, j, hard, "Plan's hard TTL is Jitter's")
		// The physical TTL rule.
		require.Zero(t, pl.PhysicalTTL%time.Millisecond, "PX takes whole ms")
		require.Equal(t, hard+expiry.Grace(hard), pl.PhysicalTTL)
		require.Greater(t, pl.PhysicalTTL, hard, "the key never dies before the envelope's hard expiry")
		require.LessOrEqual(t, pl.PhysicalTTL-hard, time.Second+hard/5000+time.Millisecond, "nor outlives it by more than the grace")
	}
	pl, err := pol.PlanBytes(key(1), t0, 0, time.Minute)
	require.NoError(t, err)
	assert.True(t, pl.SoftExpiresAt.IsZero(), "no soft TTL, no soft expiry")
	// Equal soft and hard stay equal after jitter.
	for i := 0; i < 1000; i++ {
		pl, err := pol.PlanBytes(key(i), t0, time.Minute, time.Minute)
		require.NoError(t, err)
		assert.Equal(t, pl.HardExpiresAt, pl.SoftExpiresAt)
	}
}

func TestGraceAndRewriteTTL(t *testing.T) {
	assert.Equal(t, time.Second, expiry.Grace(0))
	assert.Equal(t, time.Second+time.Millisecond, expiry.Grace(time.Second), "200 ppm of 1 s rounds up to 1 ms")
	assert.Equal(t, time.Second+60*time.Millisecond, expiry.Grace(5*time.Minute))
	assert.Equal(t, time.Second+17280*time.Millisecond, expiry.Grace(24*time.Hour))
	assert.Equal(t, expiry.Grace(expiry.MaxTTL), expiry.Grace(math.MaxInt64), "capped")
	hard := t0.Add(time.Minute)
	px, ok := expiry.PhysicalTTL(hard, t0.Add(30*time.Second+500*time.Microsecond))
	require.True(t, ok)
	assert.Equal(t, 30*time.Second+expiry.Grace(30*time.Second), px, "29.9995 s left rounds up to 30 s, plus grace")
	assert.Equal(t, 31006*time.Millisecond, px)
	_, ok = expiry.PhysicalTTL(hard, hard)
	assert.False(t, ok, "an expired envelope is not rewritten")
	px, ok = expiry.PhysicalTTL(time.Unix(1<<40, 0), t0)
	require.True(t, ok)
	assert.Equal(t, expiry.MaxTTL+expiry.Grace(expiry.MaxTTL), px, "bounded")
}

// exampleKey renders one cache entry key as the host does (the material is
// a fixed example secret).
func exampleKey() keys.Key {
	b, err := keys.NewBuilder(keys.Config{App: "shop", Env: "prod", Material: policy.KeyMaterial{
		WriteVersion: 1, Versions: map[int]policy.Secret{1: policy.NewSecret([]byte("example-material-32-bytes-long!!"))},
	}})
	if err != nil {
		panic(err)
	}
	k, err := b.Build(keys.Spec{Capability: keys.CapCache, Region: "items", KeyVersion: 1, Kind: "entry", Parts: [][]byte{[]byte("item:1")}})
	if err != nil {
		panic(err)
	}
	return k
}

func ExamplePolicy_Plan() {
	p := expiry.Policy{Revision: "region-items@r7", Spread: 0.2, Min: time.Second}
	written := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pl, err := p.Plan(exampleKey(), written, 30*time.Second, 5*time.Minute)
	if err != nil {
		panic(err)
	}
	fmt.Println("soft", pl.SoftExpiresAt.Sub(written), "hard", pl.HardExpiresAt.Sub(written), "PX", pl.PhysicalTTL.Milliseconds())
	// Output:
	// soft 27.126s hard 4m31.262s PX 272317
}

// TestJitterDrawsOverTheRenderedKey: the exported API takes a keys.Key and
// draws over its rendered Redis bytes, the same draw as the raw one.
func TestJitterDrawsOverTheRenderedKey(t *testing.T) {
	k := exampleKey()
	got, err := pol.Jitter(k, time.Minute)
	require.NoError(t, err)
	want, err := pol.JitterBytes([]byte(k.Redis()), time.Minute)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	pl, err := pol.Plan(k, t0, 0, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, t0.Add(got), pl.HardExpiresAt)
}

func BenchmarkPlan(b *testing.B) {
	k := key(1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pol.PlanBytes(k, t0, 30*time.Second, 5*time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

package envoyrls_test

import (
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/ratelimit/envoyrls"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
)

// yearFile is an upstream descriptor file with a year rule (upstream
// upper-cases the unit, so any case is a year).
const yearFile = `domain: yearly
descriptors:
  - key: api_key
    rate_limit: {unit: Year, requests_per_unit: 3}
`

func yearConfig(t *testing.T, file string) *rlsconfig.Config {
	t.Helper()
	d, err := rlsconfig.Parse("yearly.yaml", []byte(file))
	require.NoError(t, err)
	c, err := rlsconfig.New(d)
	require.NoError(t, err)
	return c
}

// TestYearRule: a year rule answered through ShouldRateLimit over gRPC,
// with Redis deciding. As envoyproxy/ratelimit: the limit is 3 per YEAR,
// a fixed window of 365 days aligned to the Unix epoch, so three calls
// are OK with limit_remaining 2, 1, 0, the fourth is OVER_LIMIT, and
// duration_until_reset is the time to the next multiple of 365 days since
// the epoch — upstream's unit − now mod unit (31536000 s), which caphost
// answers to the millisecond from the service's (frozen) clock, where
// upstream counts whole seconds. The reset header rounds it up to seconds.
func TestYearRule(t *testing.T) {
	const year = 365 * 24 * time.Hour
	before := time.Now()
	f := serve(t, redistest.StartStandalone(t), envoyrls.Options{ResponseHeaders: true}, yearConfig(t, yearFile))
	var rs []*rlsv3.RateLimitResponse
	for range 4 {
		rs = append(rs, f.call(t, "yearly", 1, desc("api_key", "k1")))
	}
	after := time.Now()
	// The reset is the next epoch-aligned 365-day boundary (the window
	// can only end between before and after if a boundary falls there).
	end := time.Unix((before.Unix()/int64(year/time.Second)+1)*int64(year/time.Second), 0)
	require.True(t, end.After(after), "a 365-day boundary fell during the test")
	for i, want := range []uint32{2, 1, 0, 0} {
		code := rlsv3.RateLimitResponse_OK
		if i == 3 {
			code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		assert.Equal(t, code, rs[i].OverallCode, "call %d", i)
		status1(t, rs[i], 0, code, 3, rlsv3.RateLimitResponse_RateLimit_YEAR, want)
		d := rs[i].Statuses[0].DurationUntilReset.AsDuration()
		assert.GreaterOrEqual(t, d, end.Sub(after), "call %d", i)
		assert.LessOrEqual(t, d, end.Sub(before), "call %d", i)
		assert.Equal(t, rs[0].Statuses[0].DurationUntilReset.AsDuration(), d, "one window, one frozen clock")
		// Upstream's answer from the same clock: whole seconds to the end.
		upstream := time.Duration(int64(year/time.Second)-before.Unix()%int64(year/time.Second)) * time.Second
		assert.InDelta(t, upstream.Seconds(), d.Seconds(), (after.Sub(before) + time.Second).Seconds(), "call %d", i)
		hs := map[string]string{}
		for _, h := range rs[i].ResponseHeadersToAdd {
			hs[h.Key] = h.Value
		}
		assert.Equal(t, strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10), hs[envoyrls.HeaderReset])
		assert.Equal(t, strconv.Itoa(int(want)), hs[envoyrls.HeaderRemaining])
	}
	assert.Equal(t, 3.0, f.count(t, "ok"))
	assert.Equal(t, 1.0, f.count(t, "over_limit"))
	// Another descriptor value is another counter, in the same window.
	r := f.call(t, "yearly", 1, desc("api_key", "k2"))
	status1(t, r, 0, rlsv3.RateLimitResponse_OK, 3, rlsv3.RateLimitResponse_RateLimit_YEAR, 2)
	assert.Equal(t, rs[0].Statuses[0].DurationUntilReset.AsDuration(), r.Statuses[0].DurationUntilReset.AsDuration())
	// A cost above the limit is answered without Redis, with upstream's
	// aligned reset in whole seconds.
	r = f.call(t, "yearly", 4, desc("api_key", "k3"))
	status1(t, r, 0, rlsv3.RateLimitResponse_OVER_LIMIT, 3, rlsv3.RateLimitResponse_RateLimit_YEAR, 0)
	d := r.Statuses[0].DurationUntilReset.AsDuration()
	assert.Equal(t, time.Duration(0), d%time.Second)
	assert.LessOrEqual(t, d, end.Sub(before)+time.Second)
	assert.GreaterOrEqual(t, d, end.Sub(after))
}

// A year rule needs the fixed window: with another service algorithm the
// service refuses the configuration, naming the rule; the rule's own
// caphost block may choose the fixed window.
func TestYearRuleNeedsFixedWindow(t *testing.T) {
	rt := newRuntime(t, redistest.StartStandalone(t).Addr())
	for _, a := range []policy.RateAlgorithm{policy.RateSlidingCounter, policy.RateGCRA, policy.RateTokenBucket} {
		_, err := envoyrls.New(rt, yearConfig(t, yearFile), envoyrls.Options{Policies: rlsconfig.PolicyOptions{Algorithm: a}})
		require.Error(t, err, a)
		assert.ErrorIs(t, err, policy.ErrInvalid)
		assert.Contains(t, err.Error(), "envoy-rate-limit.window: yearly.yaml:3: descriptors[0]: year needs algorithm fixed-window: a year is 365 days, and "+string(a))
	}
	_, err := envoyrls.New(rt, yearConfig(t, yearFile+"    caphost: {algorithm: fixed-window}\n"),
		envoyrls.Options{Policies: rlsconfig.PolicyOptions{Algorithm: policy.RateGCRA}})
	require.NoError(t, err)
}

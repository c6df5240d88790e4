package ratelimit

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
)

func TestPerPodLimitFloors(t *testing.T) {
	assert.Equal(t, int64(5), perPodLimit(100, 0.05))
	assert.Equal(t, int64(0), perPodLimit(10, 0.05))
	assert.Equal(t, int64(29), perPodLimit(100, 0.29))
	assert.Equal(t, int64(0), perPodLimit(19, 0.05))
	assert.Equal(t, int64(1), perPodLimit(20, 0.05))
}

func TestLocalLimiterBoundsAndRefill(t *testing.T) {
	now := time.Unix(1000, 0)
	l, err := newLocalLimiter(LocalEmergencyConfig{MaxEntries: 2, EntryTTL: time.Minute, MaxInFlight: 1}, func() time.Time { return now })
	require.NoError(t, err)
	tb := policy.RatePolicy{ID: "tb", Algorithm: policy.RateTokenBucket, PerPodShare: 0.5,
		Parameters: policy.RateParameters{Capacity: 4, RefillTokens: 2, RefillPeriod: time.Second}}
	for i := 0; i < 2; i++ {
		d, ok := l.decide(tb, "k", 1)
		require.True(t, ok)
		assert.True(t, d.Allowed)
	}
	d, _ := l.decide(tb, "k", 1)
	assert.False(t, d.Allowed, "capacity floor(4×0.5)=2")
	assert.Equal(t, time.Second, d.RetryAfter, "refill floor(2×0.5)=1 per second")
	now = now.Add(time.Second)
	d, _ = l.decide(tb, "k", 1)
	assert.True(t, d.Allowed)

	for i := 0; i < 10; i++ {
		_, _ = l.decide(tb, fmt.Sprint("s", i), 1)
	}
	assert.Equal(t, 2, l.len(), "bounded entries")

	// Expired entries start fresh.
	now = now.Add(2 * time.Minute)
	fw := policy.RatePolicy{ID: "fw", Algorithm: policy.RateFixedWindow, PerPodShare: 0.5,
		Parameters: policy.RateParameters{Limit: 2, Window: time.Hour}}
	d, _ = l.decide(fw, "w", 1)
	assert.True(t, d.Allowed)
	d, _ = l.decide(fw, "w", 1)
	assert.False(t, d.Allowed)

	// A full in-flight bound fails closed.
	l.sem <- struct{}{}
	_, ok := l.decide(fw, "other", 1)
	assert.False(t, ok)
	<-l.sem
}

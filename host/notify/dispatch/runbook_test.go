package dispatch

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/notify/intent"
)

// TestQuarantineRunbook rehearses the card's runbook entry for
// quarantined entries, step by step, as an operator with redis-cli and
// the HTTP API would run it:
//
//  1. caphost_notify_quarantined_total rose (here: the observer), one
//     entry per reason;
//  2. find the quarantine streams: SCAN MATCH *:notify:*:quarantine;
//  3. XRANGE each: an entry holds src (the original entry id), r (the
//     reason) and the original fields i and p;
//  4. GET the intent of a "deliveries" entry: QUARANTINED, never sent;
//     an "undecodable" entry names no intent of this host;
//  5. fix the cause (here: nothing crashes any more), then submit a new
//     intent under a new idempotency key: it is delivered, once.
func TestQuarantineRunbook(t *testing.T) {
	ctx := ctxT(t)
	// 1. The metric (quarantineTwo waits until it counts each entry once).
	p := quarantineTwo(ctx, t, "order-42")
	admin, s, tr, sub, forged, d := p.srv.Admin(), p.s, p.tr, p.sub, p.forged, p.d

	// 2. The quarantine streams.
	qs, _, err := admin.Scan(ctx, 0, "*:notify:*:quarantine", 1000).Result()
	require.NoError(t, err)
	require.Len(t, qs, 1)
	_, q, err := s.StreamKeys(0)
	require.NoError(t, err)
	assert.Equal(t, q, qs[0], "the Go API names the same stream")

	// 3. Their entries.
	es, err := admin.XRange(ctx, qs[0], "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, es, 2)
	byReason := map[string]redis.XMessage{}
	for _, e := range es {
		assert.ElementsMatch(t, []string{"src", "r", "i", "p"}, keysOf(e.Values))
		byReason[e.Values["r"].(string)] = e
	}
	require.Contains(t, byReason, intent.ReasonDeliveries)
	require.Contains(t, byReason, intent.ReasonUndecodable)
	assert.Equal(t, string(sub.ID), byReason[intent.ReasonDeliveries].Values["i"])
	assert.Equal(t, forged, byReason[intent.ReasonUndecodable].Values["src"])

	// 4. The intent's state.
	st, err := s.Get(ctx, intent.ID(byReason[intent.ReasonDeliveries].Values["i"].(string)))
	require.NoError(t, err)
	assert.Equal(t, intent.Quarantined, st.State)
	assert.Zero(t, st.Attempts, "never sent")
	_, err = intent.ParseID(byReason[intent.ReasonUndecodable].Values["i"].(string))
	require.ErrorIs(t, err, intent.ErrInvalidRequest, "not an intent id of this host")
	assert.Empty(t, tr.Calls())

	// 5. A new intent for the message still wanted.
	again, err := s.Submit(ctx, []byte("order-42-resubmitted"), testPlan(t, "primary"))
	require.NoError(t, err)
	require.False(t, again.Duplicate)
	require.Eventually(t, func() bool {
		_, _ = d.Poll(ctx, 0)
		st, err := s.Get(ctx, again.ID)
		return err == nil && st.State == intent.Delivered
	}, 20*time.Second, 10*time.Millisecond)
	require.Len(t, tr.Calls(), 1)
	assert.Equal(t, string(again.ID), tr.Calls()[0].IntentID)
}

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

package intent

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins/transport"
)

// reduceEvent is one thing that can happen to attempt 1 of an intent
// after its claim: a receipt in band (Finalize, with the entry id), one
// out of band (RecordReceipt: final, no entry id), or the reclaim's claim
// that finds the attempt unfinalized.
type reduceEvent struct {
	name  string
	apply func(ctx context.Context, t *testing.T, s *Store, d *Delivery)
}

// reduceEvents are the events TestReceiptsReduceRegardlessOfOrder draws
// from. The claim runs with maxAttempts 1: attempt 1 is the only one, so
// after a recorded retry it exhausts (FAILED) instead of beginning
// attempt 2, whose receipts would be another set.
func reduceEvents() []reduceEvent {
	receipt := func(o transport.Outcome) Receipt {
		r := Receipt{Attempt: 1, Transport: "primary", Outcome: o, At: testNow}
		switch o {
		case transport.Accepted:
			r.Code = "http-202"
		case transport.RejectedDefinite:
			r.Code = "http-503"
		default:
			r.Code = "timeout-after-send"
		}
		return r
	}
	inBand := func(name string, o transport.Outcome, final bool) reduceEvent {
		return reduceEvent{name, func(ctx context.Context, t *testing.T, s *Store, d *Delivery) {
			_, err := s.Finalize(ctx, d, receipt(o), final)
			require.NoError(t, err, name)
		}}
	}
	outOfBand := func(name string, o transport.Outcome) reduceEvent {
		return reduceEvent{name, func(ctx context.Context, t *testing.T, s *Store, d *Delivery) {
			_, err := s.RecordReceipt(ctx, d.ID, receipt(o))
			require.NoError(t, err, name)
		}}
	}
	return []reduceEvent{
		inBand("accepted", transport.Accepted, true),
		inBand("rejected-final", transport.RejectedDefinite, true),
		inBand("rejected-retry", transport.RejectedDefinite, false),
		inBand("indeterminate", transport.Indeterminate, true),
		outOfBand("oob-accepted", transport.Accepted),
		outOfBand("oob-rejected", transport.RejectedDefinite),
		{"in-doubt-claim", func(ctx context.Context, t *testing.T, s *Store, d *Delivery) {
			c, err := s.Claim(ctx, d, 1)
			require.NoError(t, err)
			require.NotEqual(t, Proceed, c.Status, "the claim never begins attempt 2")
		}},
	}
}

// reducedState is the state a set of attempt-1 events leaves, as
// docs/notify.md states it: ACCEPTED wins; a definite rejection together
// with anything that ends the dispatch is FAILED; INDETERMINATE (a
// receipt or the in-doubt claim) without a rejection stays
// INDETERMINATE; a lone recorded retry is PENDING.
func reducedState(set []string) State {
	has := map[string]bool{}
	for _, n := range set {
		has[n] = true
	}
	doubt := has["indeterminate"] || has["in-doubt-claim"]
	switch {
	case has["accepted"] || has["oob-accepted"]:
		return Delivered
	case has["rejected-final"] || has["oob-rejected"] || has["rejected-retry"] && doubt:
		return Failed
	case doubt:
		return Indeterminate
	}
	return Pending
}

// subsets returns every subset of n indexes with lo..hi members, in
// index order.
func subsets(n, lo, hi int) [][]int {
	var out [][]int
	for mask := 1; mask < 1<<n; mask++ {
		var s []int
		for i := range n {
			if mask&(1<<i) != 0 {
				s = append(s, i)
			}
		}
		if len(s) >= lo && len(s) <= hi {
			out = append(out, s)
		}
	}
	return out
}

// permutations returns every order of s (lexicographic by position).
func permutations(s []int) [][]int {
	if len(s) <= 1 {
		return [][]int{append([]int(nil), s...)}
	}
	var out [][]int
	for i := range s {
		rest := append(append([]int(nil), s[:i]...), s[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]int{s[i]}, p...))
		}
	}
	return out
}

// TestReceiptsReduceRegardlessOfOrder: for one attempt, every set of two
// to four events — in band ACCEPTED, REJECTED_DEFINITE final and with a
// retry to follow, INDETERMINATE; out of band ACCEPTED and
// REJECTED_DEFINITE; the claim that finds the attempt in doubt — applied
// in every order to a fresh intent claimed at attempt 1 (DELIVERING)
// leaves one state, the one reducedState names. 91 sets, 1092 orders,
// enumerated: no timing.
func TestReceiptsReduceRegardlessOfOrder(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := standaloneStore(t, srv.Addr(), Config{Shards: 1})
	ctx := ctxT(t)
	events := reduceEvents()
	runs := 0
	for _, set := range subsets(len(events), 2, 4) {
		names := make([]string, len(set))
		for i, e := range set {
			names[i] = events[e].name
		}
		t.Run(strings.Join(names, "+"), func(t *testing.T) {
			var first State
			var firstOrder string
			for _, order := range permutations(set) {
				seq := make([]string, len(order))
				for i, e := range order {
					seq[i] = events[e].name
				}
				key := fmt.Sprint(seq)
				d := claimedDelivery(ctx, t, s, key)
				for _, e := range order {
					events[e].apply(ctx, t, s, d)
				}
				st, err := s.Get(ctx, d.ID)
				require.NoError(t, err)
				require.Equal(t, 1, st.Attempts, key)
				runs++
				if firstOrder == "" {
					first, firstOrder = st.State, key
					continue
				}
				require.Equal(t, first.String(), st.State.String(), "%s ends %s, %s ends %s", firstOrder, first, key, st.State)
			}
			assert.Equal(t, reducedState(names).String(), first.String())
		})
	}
	assert.Equal(t, 1092, runs)
}

// claimedDelivery submits a fresh intent under key, reads its entry and
// claims attempt 1: the record is DELIVERING, the entry pending.
func claimedDelivery(ctx context.Context, t *testing.T, s *Store, key string) *Delivery {
	t.Helper()
	sub, ds := submitAndRead(t, s, key)
	require.Equal(t, sub.ID, ds[0].ID)
	c, err := s.Claim(ctx, &ds[0], 1)
	require.NoError(t, err)
	require.Equal(t, Claim{Status: Proceed, Attempt: 1, State: Delivering}, c)
	return &ds[0]
}

// TestRecordReceiptRefusesIndeterminate: a provider's report is delivered
// or rejected; an out-of-band INDETERMINATE receipt is refused before
// anything is sent (it would make the reduction depend on arrival order
// against an in-band retry), and the intent is unchanged.
func TestRecordReceiptRefusesIndeterminate(t *testing.T) {
	srv := redistest.StartStandalone(t)
	s := standaloneStore(t, srv.Addr(), Config{Shards: 1})
	ctx := ctxT(t)
	d := claimedDelivery(ctx, t, s, "k")
	before := srv.CommandCalls(t, "evalsha")
	f, err := s.RecordReceipt(ctx, d.ID, Receipt{Attempt: 1, Transport: "primary", Outcome: transport.Indeterminate,
		Code: "timeout-after-send", At: testNow})
	require.ErrorIs(t, err, ErrInvalidRequest)
	assert.Equal(t, Finalization{}, f)
	assert.Equal(t, before, srv.CommandCalls(t, "evalsha"), "nothing was sent")
	st, err := s.Get(ctx, d.ID)
	require.NoError(t, err)
	assert.Equal(t, Delivering, st.State)
	assert.Empty(t, st.Receipts)

	// The definite outcomes are recorded.
	f, err = s.RecordReceipt(ctx, d.ID, Receipt{Attempt: 1, Transport: "primary", Outcome: transport.RejectedDefinite,
		Code: "http-550", At: testNow})
	require.NoError(t, err)
	assert.Equal(t, Failed, f.State)
	assert.False(t, f.Acked, "out of band: nothing acknowledged")
}

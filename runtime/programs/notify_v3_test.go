package programs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// v3Request is a valid submit of intent name with plan plan.
func v3Request(name, plan string) NotifySubmitRequest {
	id := sha256.Sum256([]byte(name))
	pd := sha256.Sum256([]byte(plan))
	return NotifySubmitRequest{IntentID: hex.EncodeToString(id[:]), Plan: []byte(plan),
		PlanDigest: hex.EncodeToString(pd[:]), Retention: time.Minute, MaxLen: 1000}
}

// One call judges each intent on its own, in order, with v2's record and
// stream entry: new, a duplicate of an intent a v2 host submitted, a
// duplicate of another plan, a wrong-type record, and a record named twice
// (SUBMITTED, then DUPLICATE). A wrong-type stream refuses the new intents
// of its call and still reports the duplicates. v1 and v2 see v3's intents
// as their own (a rolling upgrade shares them).
func TestNotifySubmitV3Statuses(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			e, err := NewExecutor(cat, mode, standaloneClient(t, s))
			require.NoError(t, err)
			admin := s.Admin()
			stream, recs := notifyShardRecords(t, testBuilder(t), "v3-statuses-"+string(mode), 4)
			dup, other, wrong, fresh := v3Request("dup", "p-dup"), v3Request("other", "p-other"), v3Request("wrong", "p-wrong"), v3Request("fresh", "p-fresh")

			r2, err := e.NotifySubmitV2(ctx, stream, recs[0], dup)
			require.NoError(t, err)
			require.Equal(t, NotifySubmitted, r2.Status)
			_, err = e.NotifySubmitV2(ctx, stream, recs[1], other)
			require.NoError(t, err)
			require.NoError(t, admin.Set(ctx, recs[2].Redis(), "x", time.Minute).Err())
			otherPlan := other
			otherPlan.PlanDigest = dup.PlanDigest

			rs, err := e.NotifySubmitV3(ctx, stream, recs, []NotifySubmitRequest{dup, otherPlan, wrong, fresh})
			require.NoError(t, err)
			require.Len(t, rs, 4)
			want := []struct {
				st    NotifySubmitStatus
				state NotifyState
			}{{NotifyDuplicate, NotifyPending}, {NotifyDuplicateOtherPlan, NotifyPending}, {NotifySubmitWrongType, 0}, {NotifySubmitted, NotifyPending}}
			for i, w := range want {
				require.NoError(t, rs[i].Err, i)
				assert.Equal(t, w.st, rs[i].Status, "intent %d", i)
				assert.Equal(t, w.state, rs[i].State, "intent %d", i)
				assert.Zero(t, rs[i].Attempts, "intent %d", i)
			}
			assert.Equal(t, time.Minute, rs[3].RecordTTL)
			assert.Equal(t, certainty.Conflict, rs[1].Outcome())
			assert.Equal(t, certainty.Rejected, rs[2].Outcome())

			// v2's record and entry: same fields, same stream entry layout.
			v2rec, err := admin.HGetAll(ctx, recs[0].Redis()).Result()
			require.NoError(t, err)
			v3rec, err := admin.HGetAll(ctx, recs[3].Redis()).Result()
			require.NoError(t, err)
			for _, f := range []string{"v", "st", "att", "rc"} {
				assert.Equal(t, v2rec[f], v3rec[f], f)
			}
			assert.Equal(t, fresh.PlanDigest, v3rec["pd"])
			entries, err := admin.XRange(ctx, stream.Redis(), "-", "+").Result()
			require.NoError(t, err)
			require.Len(t, entries, 3, "v2's two entries and v3's one")
			assert.Equal(t, map[string]any{"i": fresh.IntentID, "p": string(fresh.Plan)}, entries[2].Values)
			assert.Equal(t, entries[2].ID, v3rec["eid"])

			// v1 and v2 find v3's intent.
			r1, err := e.NotifySubmit(ctx, stream, recs[3], fresh)
			require.NoError(t, err)
			assert.Equal(t, NotifyDuplicate, r1.Status)
			assert.Equal(t, entries[2].ID, r1.EntryID)
			r2, err = e.NotifySubmitV2(ctx, stream, recs[3], fresh)
			require.NoError(t, err)
			assert.Equal(t, NotifyDuplicate, r2.Status)

			// A record named twice in one call: the second sees the first.
			stream2, recs2 := notifyShardRecords(t, testBuilder(t), "v3-twice-"+string(mode), 1)
			twice := v3Request("twice", "p-twice")
			rs, err = e.NotifySubmitV3(ctx, stream2, []keys.Key{recs2[0], recs2[0]}, []NotifySubmitRequest{twice, twice})
			require.NoError(t, err)
			assert.Equal(t, NotifySubmitted, rs[0].Status)
			assert.Equal(t, NotifyDuplicate, rs[1].Status)
			n, err := admin.XLen(ctx, stream2.Redis()).Result()
			require.NoError(t, err)
			assert.Equal(t, int64(1), n)

			// A wrong-type stream: new intents WRONG_TYPE, nothing written;
			// an existing record is still judged.
			stream3, recs3 := notifyShardRecords(t, testBuilder(t), "v3-wrongstream-"+string(mode), 3)
			_, err = e.NotifySubmitV2(ctx, stream3, recs3[1], dup)
			require.NoError(t, err)
			require.NoError(t, admin.Del(ctx, stream3.Redis()).Err())
			require.NoError(t, admin.Set(ctx, stream3.Redis(), "x", time.Minute).Err())
			rs, err = e.NotifySubmitV3(ctx, stream3, recs3, []NotifySubmitRequest{fresh, dup, other})
			require.NoError(t, err)
			assert.Equal(t, []NotifySubmitStatus{NotifySubmitWrongType, NotifyDuplicate, NotifySubmitWrongType},
				[]NotifySubmitStatus{rs[0].Status, rs[1].Status, rs[2].Status})
			for _, k := range []keys.Key{recs3[0], recs3[2]} {
				n, err := admin.Exists(ctx, k.Redis()).Result()
				require.NoError(t, err)
				assert.Zero(t, n, "no record without its entry")
			}
		})
	}
}

// The host checks what v2 checked in Lua: an invalid request is INVALID
// without being sent, a call that is not 1..4 intents sharing retention
// and maxLen, or with keys of another slot, is refused before anything is
// sent, and the valid intents of a call with an invalid one still go.
func TestNotifySubmitV3RefusesBeforeSend(t *testing.T) {
	s := redistest.StartStandalone(t)
	g := &gate{}
	ctx := context.Background()
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, gatedClient(t, s, g))
	require.NoError(t, err)
	b := e.NewBatcher(1, 64)
	stream, recs := notifyShardRecords(t, testBuilder(t), "v3-refuse", 4)
	good := v3Request("good", "plan")
	bad := []func(r *NotifySubmitRequest){
		func(r *NotifySubmitRequest) { r.IntentID = r.IntentID[:63] },
		func(r *NotifySubmitRequest) { r.IntentID = "A" + r.IntentID[1:] },
		func(r *NotifySubmitRequest) { r.PlanDigest = r.PlanDigest[:63] + "g" },
		func(r *NotifySubmitRequest) { r.Plan = nil },
		func(r *NotifySubmitRequest) { r.Plan = bytes.Repeat([]byte("x"), MaxNotifyPlanBytes+1) },
		func(r *NotifySubmitRequest) { r.Retention = 999 * time.Microsecond },
		func(r *NotifySubmitRequest) { r.Retention = 30*24*time.Hour + time.Millisecond },
		func(r *NotifySubmitRequest) { r.MaxLen = 0 },
		func(r *NotifySubmitRequest) { r.MaxLen = MaxNotifyStreamLen + 1 },
	}
	for i, mut := range bad {
		req := good
		mut(&req)
		r, err := b.NotifySubmit(ctx, stream, recs[0], req)
		require.NoError(t, err, i)
		assert.Equal(t, NotifySubmitInvalid, r.Status, i)
		rs, err := e.NotifySubmitV3(ctx, stream, recs[:1], []NotifySubmitRequest{req})
		require.NoError(t, err, i)
		assert.Equal(t, NotifySubmitInvalid, rs[0].Status, i)
	}
	other, _, _ := notifyShardKeys(t, testBuilder(t), "v3-refuse-elsewhere")
	if other.Slot() != stream.Slot() {
		_, err = b.NotifySubmit(ctx, other, recs[0], good)
		require.ErrorIs(t, err, ErrCrossSlot)
		_, err = e.NotifySubmitV3(ctx, other, recs[:1], []NotifySubmitRequest{good})
		require.ErrorIs(t, err, ErrCrossSlot)
	}
	_, err = b.NotifySubmit(ctx, stream, keys.Key{}, good)
	require.ErrorIs(t, err, ErrZeroKey)
	_, err = e.NotifySubmitV3(ctx, stream, []keys.Key{{}}, []NotifySubmitRequest{good})
	require.ErrorIs(t, err, ErrZeroKey)
	longer := good
	longer.Retention = time.Hour
	for _, call := range [][]NotifySubmitRequest{nil, {good, good, good, good, good}, {good, longer}} {
		rs := recs
		if len(call) <= len(recs) {
			rs = recs[:len(call)]
		}
		_, err = e.NotifySubmitV3(ctx, stream, rs, call)
		require.ErrorIs(t, err, ErrNotifyGroup)
	}
	names, _ := g.take()
	assert.Empty(t, names, "nothing sent")

	// One invalid intent among valid ones: only the valid ones are sent.
	mixed := []NotifySubmitRequest{v3Request("a", "plan"), v3Request("b", "plan"), v3Request("c", "plan")}
	mixed[1].IntentID = "x"
	rs, err := e.NotifySubmitV3(ctx, stream, recs[:3], mixed)
	require.NoError(t, err)
	assert.Equal(t, []NotifySubmitStatus{NotifySubmitted, NotifySubmitInvalid, NotifySubmitted},
		[]NotifySubmitStatus{rs[0].Status, rs[1].Status, rs[2].Status})
	n, err := s.Admin().Exists(ctx, recs[1].Redis()).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
	names, _ = g.take()
	assert.Equal(t, []string{"evalsha", "script load", "evalsha"}, names, "one call (NOSCRIPT, loaded, sent again)")
}

// Queued submits are grouped by stream (and retention and maxLen) into
// notify-submit-v3 calls of at most four intents whose plans total at most
// 1 MiB, beside the other programs' calls of the same pipeline; every
// intent gets its own status, and each stream holds one entry per intent.
func TestBatcherNotifySubmitGroups(t *testing.T) {
	eachBatcherMode(t, func(t *testing.T, mode policy.ProgramMode, s *redistest.Server, g *gate, b *Batcher) {
		ctx := context.Background()
		bld := testBuilder(t)
		streamA, recsA := notifyShardRecords(t, bld, "group-a-"+string(mode), 7)
		streamB, recsB := notifyShardRecords(t, bld, "group-b-"+string(mode), 3)
		type sub struct {
			stream, record keys.Key
			req            NotifySubmitRequest
		}
		var subs []sub
		for i, r := range recsA[:6] {
			subs = append(subs, sub{streamA, r, v3Request("a"+strconv.Itoa(i), "plan-a")})
		}
		// Same stream, another retention: a group of its own.
		longer := v3Request("a-longer", "plan-a")
		longer.Retention = time.Hour
		subs = append(subs, sub{streamA, recsA[6], longer})
		// 600 KiB plans: two would pass the 1 MiB bound, so one per call.
		for i, r := range recsB {
			subs = append(subs, sub{streamB, r, v3Request("b"+strconv.Itoa(i), string(bytes.Repeat([]byte{'b', byte(i)}, 300<<10)))})
		}
		// Warm (loads the script), then hold the only flight.
		warmStream, warmRec := notifyShardRecords(t, bld, "group-warm-"+string(mode), 1)
		_, err := b.NotifySubmit(ctx, warmStream, warmRec[0], v3Request("warm", "plan"))
		require.NoError(t, err)
		g.take()
		release, paused := g.holdNextCommand()
		held := make(chan error, 1)
		go func() {
			_, err := b.NotifySubmit(ctx, warmStream, warmRec[0], v3Request("warm", "plan"))
			held <- err
		}()
		<-paused
		type res struct {
			i   int
			r   NotifySubmitResult
			err error
		}
		out := make(chan res, len(subs))
		for i, x := range subs {
			go func() {
				r, err := b.NotifySubmit(ctx, x.stream, x.record, x.req)
				out <- res{i, r, err}
			}()
		}
		rate, _ := rateKeys(t, bld, "group-rate-"+string(mode), "bucket")
		rateDone := goCall(ctx, b, rate, bucketPlan(10))
		waitQueued(t, b, len(subs)+1)
		release()
		require.NoError(t, <-held)
		rr := <-rateDone
		require.NoError(t, rr.err)
		assert.Equal(t, RateAllowed, rr.r.Status)
		for range subs {
			x := <-out
			require.NoError(t, x.err, "submit %d", x.i)
			assert.Equal(t, NotifySubmitted, x.r.Status, "submit %d", x.i)
			assert.Equal(t, NotifyPending, x.r.State, "submit %d", x.i)
			assert.Equal(t, subs[x.i].req.Retention, x.r.RecordTTL, "submit %d", x.i)
		}
		for _, c := range []struct {
			stream keys.Key
			n      int64
		}{{streamA, 7}, {streamB, 3}} {
			n, err := s.Admin().XLen(ctx, c.stream.Redis()).Result()
			require.NoError(t, err)
			assert.Equal(t, c.n, n)
		}
		names, pipes := g.take()
		// A: 4 + 2 intents, and the longer retention alone; B: 1 + 1 + 1;
		// the rate call: 7 calls in one pipeline.
		assert.Equal(t, []int{7}, pipes)
		call := "pipeline:" + string(map[policy.ProgramMode]string{policy.ProgramsEvalshaManaged: "evalsha", policy.ProgramsFunctionsProvisioned: "fcall"}[mode])
		assert.Equal(t, 7, count(names, call), "%v", names)
	})
}

// A pipeline whose replies never come leaves every intent of every
// grouped call INDETERMINATE; a repeat afterwards reconciles: each intent
// has exactly one entry, and its repeat is DUPLICATE iff the first call
// applied.
func TestBatcherNotifySubmitStalledIsIndeterminate(t *testing.T) {
	s := redistest.StartStandalone(t)
	c, p := proxiedClient(t, s)
	g := &gate{}
	c.AddHook(g)
	e, err := NewExecutor(mustCatalog(t), policy.ProgramsEvalshaManaged, c)
	require.NoError(t, err)
	b := e.NewBatcher(1, 64)
	ctx := context.Background()
	stream, recs := notifyShardRecords(t, testBuilder(t), "v3-stall", 4)
	warmStream, warmRec := notifyShardRecords(t, testBuilder(t), "v3-stall-warm", 1)
	_, err = b.NotifySubmit(ctx, warmStream, warmRec[0], v3Request("warm", "plan")) // loads the script
	require.NoError(t, err)

	release, paused := g.holdNextCommand()
	held := make(chan error, 1)
	go func() {
		_, err := b.NotifySubmit(ctx, warmStream, warmRec[0], v3Request("warm", "plan"))
		held <- err
	}()
	<-paused
	errs := make(chan error, len(recs))
	for i, r := range recs {
		go func() {
			_, err := b.NotifySubmit(ctx, stream, r, v3Request("stall-"+strconv.Itoa(i), "plan"))
			errs <- err
		}()
	}
	waitQueued(t, b, len(recs))
	p.Stall()
	release()
	assert.Equal(t, certainty.Indeterminate, certainty.Classify(<-held, true))
	for range recs {
		err := <-errs
		require.Error(t, err)
		assert.Equal(t, certainty.Indeterminate, certainty.Classify(err, true), "%v", err)
	}
	p.Passthrough()
	assert.Zero(t, b.queued())
	_, pipes := g.take()
	assert.Equal(t, []int{1}, pipes, "the four intents were one call")
	applied, err := s.Admin().XLen(ctx, stream.Redis()).Result()
	require.NoError(t, err)
	for i, r := range recs {
		res, err := b.NotifySubmit(ctx, stream, r, v3Request("stall-"+strconv.Itoa(i), "plan"))
		require.NoError(t, err)
		if applied == 4 {
			assert.Equal(t, NotifyDuplicate, res.Status, "the stalled call applied")
		} else {
			assert.Equal(t, NotifySubmitted, res.Status, "the stalled call never ran")
		}
	}
	n, err := s.Admin().XLen(ctx, stream.Redis()).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(4), n, "one entry per intent")
}

// A queued submit whose context ends before its batch is taken is never
// sent; the others of its stream still share a call.
func TestBatcherNotifySubmitCanceledIsNeverSent(t *testing.T) {
	eachBatcherMode(t, func(t *testing.T, mode policy.ProgramMode, s *redistest.Server, g *gate, b *Batcher) {
		ctx := context.Background()
		stream, recs := notifyShardRecords(t, testBuilder(t), "v3-cancel-"+string(mode), 3)
		warmStream, warmRec := notifyShardRecords(t, testBuilder(t), "v3-cancel-warm-"+string(mode), 1)
		_, err := b.NotifySubmit(ctx, warmStream, warmRec[0], v3Request("warm", "plan"))
		require.NoError(t, err)
		g.take()
		release, paused := g.holdNextCommand()
		held := make(chan error, 1)
		go func() {
			_, err := b.NotifySubmit(ctx, warmStream, warmRec[0], v3Request("warm", "plan"))
			held <- err
		}()
		<-paused
		cctx, cancel := context.WithCancel(ctx)
		errs := make([]chan error, len(recs))
		for i, r := range recs {
			errs[i] = make(chan error, 1)
			cx := ctx
			if i == 1 {
				cx = cctx
			}
			go func() {
				_, err := b.NotifySubmit(cx, stream, r, v3Request("cancel-"+strconv.Itoa(i), "plan"))
				errs[i] <- err
			}()
			waitQueued(t, b, i+1)
		}
		cancel()
		err = <-errs[1]
		require.Error(t, err)
		assert.Equal(t, certainty.OverloadedBeforeSend, certainty.Classify(err, true), "%v", err)
		release()
		require.NoError(t, <-held)
		require.NoError(t, <-errs[0])
		require.NoError(t, <-errs[2])
		n, err := s.Admin().Exists(ctx, recs[1].Redis()).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the canceled intent was never sent")
		_, pipes := g.take()
		assert.Equal(t, []int{1}, pipes, "the two others shared one call")
	})
}

// The reply decoder: an intent's slot, the slots past the call's intents,
// the call status and every intent status are checked before use.
func TestNotifySubmitV3ItemDecoding(t *testing.T) {
	mk := func(status int64, items ...int64) *reply {
		r := &reply{status: status, n: 12}
		copy(r.ints[:], items)
		return r
	}
	res, err := notifySubmitV3Item(mk(1, 1, 1, 0, 2, 3, 4), 1, 2, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, NotifySubmitResult{Status: NotifyDuplicate, State: NotifyDelivered, Attempts: 4}, res)
	res, err = notifySubmitV3Item(mk(1, 1, 1, 0), 0, 1, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, NotifySubmitResult{Status: NotifySubmitted, State: NotifyPending, RecordTTL: time.Minute}, res)
	res, err = notifySubmitV3Item(mk(5), 0, 4, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, NotifySubmitInvalid, res.Status)

	_, err = notifySubmitV3Item(mk(1, 1, 1, 0, 0, 0, 0), 1, 2, time.Minute)
	var ce *certainty.Error
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, certainty.NotApplied, ce.Outcome)

	for name, c := range map[string]struct {
		r       *reply
		item, k int
	}{
		"past the call":        {mk(1, 1, 1, 0, 1, 1, 0), 0, 1},
		"invalid with fields":  {mk(5, 0, 0, 0, 0, 0, 1), 0, 1},
		"call status 2":        {mk(2, 1, 1, 0), 0, 1},
		"new not pending":      {mk(1, 1, 2, 0), 0, 1},
		"new with attempts":    {mk(1, 1, 1, 1), 0, 1},
		"duplicate no state":   {mk(1, 2, 0, 0), 0, 1},
		"duplicate state 7":    {mk(1, 3, 7, 0), 0, 1},
		"attempts over 1000":   {mk(1, 2, 1, 1001), 0, 1},
		"wrong type with data": {mk(1, 4, 1, 0), 0, 1},
		"intent INVALID":       {mk(1, 5, 0, 0), 0, 1},
		"not run with data":    {mk(1, 0, 1, 0), 0, 1},
		"item past k":          {mk(1, 1, 1, 0), 1, 1},
		"k of five":            {mk(1, 1, 1, 0), 0, 5},
		"narrow reply":         {&reply{status: 1, n: 3}, 0, 1},
	} {
		_, err := notifySubmitV3Item(c.r, c.item, c.k, time.Minute)
		require.ErrorIs(t, err, ErrIncompatible, name)
	}
}

// FuzzNotifySubmitV3Reply: whatever integers a server answers, decoding
// (decodeInts bounds the arity) and then reading every intent slot never
// panics, and a decoded intent is within bounds: SUBMITTED is PENDING
// with no attempts, a duplicate has a valid state, WRONG_TYPE and INVALID
// carry nothing.
func FuzzNotifySubmitV3Reply(f *testing.F) {
	le := func(v ...int64) []byte {
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, uint64(x))
		}
		return b
	}
	f.Add(le(1, 1, 0, 1, 1, 0, 2, 3, 4, 4, 0, 0, 0, 0, 0), uint8(3))
	f.Add(le(1, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), uint8(4))
	f.Add(le(1, 1, 0, 1, 1, 0), uint8(1))
	f.Add(le(1, 1, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9, 9), uint8(2))
	cat := mustCatalog(f)
	p, ok := cat.Program(notifySubmitV3)
	require.True(f, ok)
	f.Fuzz(func(t *testing.T, raw []byte, k uint8) {
		v := make([]int64, 0, len(raw)/8)
		for len(raw) >= 8 {
			v = append(v, int64(binary.LittleEndian.Uint64(raw)))
			raw = raw[8:]
		}
		r, err := decodeInts(&cat.manifest, &p.spec, v)
		if err != nil {
			require.ErrorIs(t, err, ErrIncompatible)
			return
		}
		for item := range int(k) + 1 {
			res, err := notifySubmitV3Item(&r, item, int(k), time.Minute)
			if err != nil {
				var ce *certainty.Error
				if !errors.As(err, &ce) {
					require.ErrorIs(t, err, ErrIncompatible)
				}
				continue
			}
			switch res.Status {
			case NotifySubmitted:
				require.Equal(t, NotifyPending, res.State)
				require.Zero(t, res.Attempts)
			case NotifyDuplicate, NotifyDuplicateOtherPlan:
				require.True(t, validNotifyState(int64(res.State)))
				require.True(t, validAttempts(int64(res.Attempts)))
			case NotifySubmitWrongType, NotifySubmitInvalid:
				require.Zero(t, res.State)
				require.Zero(t, res.Attempts)
			default:
				t.Fatalf("status %d", res.Status)
			}
		}
	})
}

// On Cluster the grouped calls of a pipeline go to the primaries of their
// streams' slots (go-redis splits the pipeline by the first key, the
// stream): concurrent submits of intents of several shards, each intent
// three times, leave exactly one SUBMITTED and one stream entry per
// intent. The grouping itself depends on arrival; the outcome does not.
func TestBatcherNotifySubmitCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	require.NoError(t, Deploy(ctx, cat, cl.Admin()))
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			e, err := NewExecutor(cat, mode, clusterClient(t, cl))
			require.NoError(t, err)
			b := e.NewBatcher(1, 64)
			type intent struct {
				stream, record keys.Key
				req            NotifySubmitRequest
			}
			var intents []intent
			slots := map[uint16]bool{}
			const shards, perShard, repeats = 6, 4, 3
			for sh := range shards {
				st, recs := notifyShardRecords(t, testBuilder(t), "v3-cluster-"+string(mode)+"-"+strconv.Itoa(sh), perShard)
				slots[st.Slot()] = true
				for i, r := range recs {
					intents = append(intents, intent{st, r, v3Request("c-"+strconv.Itoa(sh)+"-"+strconv.Itoa(i), "plan")})
				}
			}
			require.Greater(t, len(slots), 1)
			type res struct {
				i   int
				s   NotifySubmitStatus
				err error
			}
			out := make(chan res, len(intents)*repeats)
			for w := range repeats {
				for j := range intents {
					go func() {
						i := (j + w*perShard) % len(intents)
						r, err := b.NotifySubmit(ctx, intents[i].stream, intents[i].record, intents[i].req)
						out <- res{i, r.Status, err}
					}()
				}
			}
			submitted := map[int]int{}
			for range len(intents) * repeats {
				x := <-out
				require.NoError(t, x.err)
				switch x.s {
				case NotifySubmitted:
					submitted[x.i]++
				case NotifyDuplicate:
				default:
					t.Fatalf("intent %d: %s", x.i, x.s)
				}
			}
			for i := range intents {
				assert.Equal(t, 1, submitted[i], "intent %d submitted once", i)
			}
			for sh := range shards {
				n, err := cl.Admin().XLen(ctx, intents[sh*perShard].stream.Redis()).Result()
				require.NoError(t, err)
				assert.Equal(t, int64(perShard), n, "shard %d: one entry per intent", sh)
			}
		})
	}
}

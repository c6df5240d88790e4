package programs

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// notifyShardKeys builds one notify shard's stream, quarantine stream and
// the intent record of tag exactly as host/notify/intent lays them out:
// two keys.Sharded layouts over the same anchors (the streams), one with
// the intent member, one with the quarantine member located at a digest
// that selects the shard. The region is a digest of tag so vectors never
// share a stream and spread over the Cluster's slots.
func notifyShardKeys(t testing.TB, b *keys.Builder, tag string) (stream, quarantine, record keys.Key) {
	t.Helper()
	sum := sha256.Sum256([]byte(tag))
	region := "n-" + hex.EncodeToString(sum[:8])
	intents, err := b.PrepareSharded(keys.ShardSpec{Capability: keys.CapNotify, Region: region, KeyVersion: 1,
		Shards: 4, AnchorKind: "stream", MemberKinds: []string{"intent"}})
	require.NoError(t, err)
	quar, err := b.PrepareSharded(keys.ShardSpec{Capability: keys.CapNotify, Region: region, KeyVersion: 1,
		Shards: 4, AnchorKind: "stream", MemberKinds: []string{"quarantine"}})
	require.NoError(t, err)
	loc, err := intents.Locate([][]byte{[]byte(tag)})
	require.NoError(t, err)
	ks, err := intents.AppendMembers(nil, loc, []byte("intent"))
	require.NoError(t, err)
	var d [sha256.Size]byte
	binary.BigEndian.PutUint64(d[:8], uint64(loc.Shard()))
	qs, err := quar.AppendMembers(nil, quar.LocationOf(d), []byte("quarantine"))
	require.NoError(t, err)
	require.Equal(t, intents.AnchorOf(loc), quar.Anchor(loc.Shard()))
	return intents.AnchorOf(loc), qs[0], ks[0]
}

// notifyProgramKeys returns the keys of a notify program's vectors.
func notifyProgramKeys(t testing.TB, b *keys.Builder, program, tag string) []keys.Key {
	s, q, r := notifyShardKeys(t, b, tag)
	switch program {
	case "notify-submit-v3":
		st, recs := notifyShardRecords(t, b, tag, MaxNotifySubmitGroup)
		return append([]keys.Key{st}, recs...)
	case "notify-quarantine-v1":
		return []keys.Key{s, q, r}
	case "notify-inspect-v1":
		return []keys.Key{r, r}
	}
	return []keys.Key{s, r, r}
}

// streamSetup is a vector's stream fixture: entries with explicit ids,
// then (when Group is set) XGROUP CREATE at 0, XREADGROUP of Read entries
// by consumer "c", and XDEL of Delete.
type streamSetup struct {
	Entries []struct {
		ID     string   `json:"id"`
		Fields []string `json:"fields"`
	} `json:"entries"`
	Group  string   `json:"group"`
	Read   int64    `json:"read"`
	Delete []string `json:"delete"`
}

func applyStreamSetup(ctx context.Context, t *testing.T, admin redis.UniversalClient, k keys.Key, s *streamSetup) {
	t.Helper()
	for _, e := range s.Entries {
		vals := make([]any, len(e.Fields))
		for i, f := range e.Fields {
			vals[i] = f
		}
		require.NoError(t, admin.XAdd(ctx, &redis.XAddArgs{Stream: k.Redis(), ID: e.ID, Values: vals}).Err())
	}
	if s.Group != "" {
		require.NoError(t, admin.XGroupCreate(ctx, k.Redis(), s.Group, "0").Err())
		if s.Read > 0 {
			require.NoError(t, admin.XReadGroup(ctx, &redis.XReadGroupArgs{Group: s.Group, Consumer: "c",
				Streams: []string{k.Redis(), ">"}, Count: s.Read, Block: -1}).Err())
		}
	}
	if len(s.Delete) > 0 {
		require.NoError(t, admin.XDel(ctx, k.Redis(), s.Delete...).Err())
	}
}

// assertStreamState checks a stream's length and its group "g"'s pending
// count.
func assertStreamState(ctx context.Context, t *testing.T, admin redis.UniversalClient, k keys.Key, it stateItem) {
	t.Helper()
	if it.StreamLen != nil {
		n, err := admin.XLen(ctx, k.Redis()).Result()
		require.NoError(t, err)
		require.Equal(t, *it.StreamLen, n, "stream length")
	}
	if it.Pending != nil {
		p, err := admin.XPending(ctx, k.Redis(), "g").Result()
		require.NoError(t, err)
		require.Equal(t, *it.Pending, p.Count, "pending entries")
	}
}

// entryIDValue hides a server-generated entry id behind "<id>" so vectors
// stay deterministic; the integration tests compare ids exactly.
func entryIDValue(id string) string {
	if id == "" {
		return ""
	}
	return "<id>"
}

// notifySubmitFixture reads a submit step's arguments (both versions take
// the same five).
func notifySubmitFixture(a []any) (NotifySubmitRequest, error) {
	id, err1 := fixtureBytes(a[0])
	plan, err2 := fixtureBytes(a[1])
	pd, err3 := fixtureBytes(a[2])
	ret, err4 := fixtureInt(a[3])
	ml, err5 := fixtureInt(a[4])
	if err := firstErr(err1, err2, err3, err4, err5); err != nil {
		return NotifySubmitRequest{}, err
	}
	return NotifySubmitRequest{IntentID: string(id), Plan: plan, PlanDigest: string(pd),
		Retention: time.Duration(ret) * time.Millisecond, MaxLen: ml}, nil
}

func notifyFacades() map[string]facadeCall {
	str := func(v any) (string, error) { b, err := fixtureBytes(v); return string(b), err }
	num := func(v any) (int, error) { n, err := fixtureInt(v); return int(n), err }
	return map[string]facadeCall{
		"notify-submit-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			req, err := notifySubmitFixture(a)
			if err != nil {
				return "", 0, nil, err
			}
			r, err := e.NotifySubmit(ctx, ks[0], ks[1], req)
			return r.Status.String(), r.Outcome(), []any{entryIDValue(r.EntryID), int64(r.State), int64(r.Attempts), ms(r.RecordTTL)}, err
		},
		"notify-submit-v2": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			req, err := notifySubmitFixture(a)
			if err != nil {
				return "", 0, nil, err
			}
			r, err := e.NotifySubmitV2(ctx, ks[0], ks[1], req)
			if err != nil {
				return "", 0, nil, err
			}
			// The batched path (notify-submit-v3) must agree with v2: a
			// repeat of the request through a Batcher finds what v2 did.
			again, err := e.NewBatcher(1, 1).NotifySubmit(ctx, ks[0], ks[1], req)
			if err != nil {
				return "", 0, nil, err
			}
			if want := r.Status; want == NotifySubmitted {
				want = NotifyDuplicate
				if again.Status != want || again.State != r.State || again.Attempts != r.Attempts {
					return "", 0, nil, fmt.Errorf("batched repeat %s %s %d, want DUPLICATE of %s %d", again.Status, again.State, again.Attempts, r.State, r.Attempts)
				}
			} else if again.Status != want || again.State != r.State || again.Attempts != r.Attempts {
				return "", 0, nil, fmt.Errorf("batched repeat %s %s %d, want %s %s %d", again.Status, again.State, again.Attempts, want, r.State, r.Attempts)
			}
			return r.Status.String(), r.Outcome(), []any{int64(r.State), int64(r.Attempts), ms(r.RecordTTL)}, nil
		},
		"notify-submit-v3": notifySubmitV3Facade,
		"notify-claim-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			g, err1 := str(a[0])
			eid, err2 := str(a[1])
			mx, err3 := num(a[2])
			if err := firstErr(err1, err2, err3); err != nil {
				return "", 0, nil, err
			}
			r, err := e.NotifyClaim(ctx, ks[0], ks[1], g, eid, mx)
			return r.Status.String(), r.Outcome(), []any{int64(r.State), int64(r.Attempts), b2i(r.Acked)}, err
		},
		"notify-claim-v2": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			g, err1 := str(a[0])
			eid, err2 := str(a[1])
			mx, err3 := num(a[2])
			if err := firstErr(err1, err2, err3); err != nil {
				return "", 0, nil, err
			}
			r, err := e.NotifyClaimV2(ctx, ks[0], ks[1], g, eid, mx)
			return r.Status.String(), r.Outcome(), []any{int64(r.State), int64(r.Attempts), b2i(r.Acked)}, err
		},
		"notify-finalize-v1": notifyFinalizeFacade((*Executor).NotifyFinalize),
		"notify-finalize-v2": notifyFinalizeFacade((*Executor).NotifyFinalizeV2),
		"notify-quarantine-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			g, err1 := str(a[0])
			eid, err2 := str(a[1])
			id, err3 := str(a[2])
			why, err4 := str(a[3])
			ml, err5 := fixtureInt(a[4])
			if err := firstErr(err1, err2, err3, err4, err5); err != nil {
				return "", 0, nil, err
			}
			r, err := e.NotifyQuarantine(ctx, ks[0], ks[1], ks[2], NotifyQuarantineRequest{Group: g, EntryID: eid, IntentID: id, Reason: why, MaxLen: ml})
			return r.Status.String(), r.Outcome(), []any{b2i(r.Copied), int64(r.State)}, err
		},
		"notify-inspect-v1": func(ctx context.Context, e *Executor, ks []keys.Key, _ []any) (string, certainty.Outcome, []any, error) {
			r, err := e.NotifyInspect(ctx, ks[0])
			return r.Status.String(), r.Outcome(), []any{int64(r.State), int64(r.Attempts), ms(r.RecordTTL), r.EntryID, r.PlanDigest, string(r.Receipts)}, err
		},
	}
}

// notifyFinalizeFacade adapts a finalize facade (both versions take the
// same six arguments and answer the same result).
func notifyFinalizeFacade(call func(*Executor, context.Context, keys.Key, keys.Key, NotifyFinalizeRequest) (NotifyFinalizeResult, error)) facadeCall {
	return func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
		g, err1 := fixtureBytes(a[0])
		eid, err2 := fixtureBytes(a[1])
		att, err3 := fixtureInt(a[2])
		o, err4 := fixtureInt(a[3])
		fin, err5 := fixtureInt(a[4])
		rc, err6 := fixtureBytes(a[5])
		if err := firstErr(err1, err2, err3, err4, err5, err6); err != nil {
			return "", 0, nil, err
		}
		r, err := call(e, ctx, ks[0], ks[1], NotifyFinalizeRequest{Group: string(g), EntryID: string(eid), Attempt: int(att),
			Outcome: NotifyReceiptOutcome(o), Final: fin == 1, Receipt: rc})
		return r.Status.String(), r.Outcome(), []any{int64(r.State), int64(r.Attempts), b2i(r.Acked)}, err
	}
}

// notifyShardRecords returns the stream of tag's shard and n intent
// records located in it (tags tag/0, tag/1, ... that land in that shard),
// as one notify-submit-v3 call takes them.
func notifyShardRecords(t testing.TB, b *keys.Builder, tag string, n int) (keys.Key, []keys.Key) {
	t.Helper()
	stream, _, _ := notifyShardKeys(t, b, tag)
	sum := sha256.Sum256([]byte(tag))
	intents, err := b.PrepareSharded(keys.ShardSpec{Capability: keys.CapNotify, Region: "n-" + hex.EncodeToString(sum[:8]),
		KeyVersion: 1, Shards: 4, AnchorKind: "stream", MemberKinds: []string{"intent"}})
	require.NoError(t, err)
	var recs []keys.Key
	for i := 0; len(recs) < n; i++ {
		require.Less(t, i, 1000, "no records in the shard")
		loc, err := intents.Locate([][]byte{[]byte(tag + "/" + strconv.Itoa(i))})
		require.NoError(t, err)
		if intents.AnchorOf(loc) != stream {
			continue
		}
		ks, err := intents.AppendMembers(nil, loc, []byte("intent"))
		require.NoError(t, err)
		recs = append(recs, ks[0])
	}
	return stream, recs
}

// notifySubmitV3Facade runs a notify-submit-v3 vector step: ARGV is
// retention, maxLen, then id, plan, digest per intent (records ks[1..]).
// The step's status is the first intent's; its values are status, state
// and attempts of every intent.
func notifySubmitV3Facade(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
	if len(a) < 5 || (len(a)-2)%3 != 0 {
		return "", 0, nil, fmt.Errorf("notify-submit-v3 vector: %d arguments", len(a))
	}
	var reqs []NotifySubmitRequest
	for i := 2; i < len(a); i += 3 {
		req, err := notifySubmitFixture([]any{a[i], a[i+1], a[i+2], a[0], a[1]})
		if err != nil {
			return "", 0, nil, err
		}
		reqs = append(reqs, req)
	}
	rs, err := e.NotifySubmitV3(ctx, ks[0], ks[1:1+len(reqs)], reqs)
	if err != nil {
		return "", 0, nil, err
	}
	var vals []any
	for _, r := range rs {
		if r.Err != nil {
			return "", 0, nil, r.Err
		}
		vals = append(vals, int64(r.Status), int64(r.State), int64(r.Attempts))
	}
	return rs[0].Status.String(), rs[0].Outcome(), vals, nil
}

package programs

import (
	"context"
	"errors"
	"time"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// notifySubmitV3 is the program Executor.NotifySubmitV3 and
// Batcher.NotifySubmit run.
const notifySubmitV3 = "notify-submit-v3"

// Bounds of one notify-submit-v3 call.
const (
	// MaxNotifySubmitGroup is the most intents one call takes: the
	// manifest's bounds on keys (8), arguments (16) and result fields
	// (12) admit four, and four already pay the script call once for four
	// intents (docs/notify.md).
	MaxNotifySubmitGroup = 4
	// maxNotifyGroupPlanBytes bounds the plans a Batcher puts into one
	// call; a larger plan goes in a call of its own.
	maxNotifyGroupPlanBytes = 1 << 20
)

// ErrNotifyGroup rejects a NotifySubmitV3 call that is not 1..4 intents
// with one record each, sharing Retention and MaxLen, before anything is
// sent.
var ErrNotifyGroup = errors.New("programs: notify-submit-v3 takes 1..4 intents sharing retention and maxLen")

// NotifySubmitV3Result is the result of one intent of a notify-submit-v3
// call.
type NotifySubmitV3Result struct {
	NotifySubmitResult
	// Err is set (and the result zero) when the call ended before this
	// intent: a Redis error after an earlier intent of the call wrote.
	// Nothing of this intent was written (certainty NOT_APPLIED).
	Err error
}

// NotifySubmitV3 submits 1..MaxNotifySubmitGroup intents of one shard in
// one notify-submit-v3 call: records[i] is reqs[i]'s record, every record
// shares stream's slot, and every request the same Retention and MaxLen.
// Each intent is judged on its own exactly as NotifySubmitV2 judges it
// (same record, entry and statuses), in order, so a record named twice is
// SUBMITTED then DUPLICATE. The host checks what v2 checked in Lua: an
// invalid request is INVALID without being sent (the others are). A call
// error (a lost reply: INDETERMINATE) is every intent's. EntryID is not
// reported, nor RecordTTL on a duplicate.
func (e *Executor) NotifySubmitV3(ctx context.Context, stream keys.Key, records []keys.Key, reqs []NotifySubmitRequest) ([]NotifySubmitV3Result, error) {
	fp := e.notifySubmitV3
	if fp == nil {
		return nil, &CompatibilityError{Program: notifySubmitV3, Reason: "program not in catalog"}
	}
	if len(records) != len(reqs) || len(reqs) < 1 || len(reqs) > MaxNotifySubmitGroup {
		return nil, &Error{Program: notifySubmitV3, Err: ErrNotifyGroup}
	}
	for i := range reqs {
		if reqs[i].Retention.Milliseconds() != reqs[0].Retention.Milliseconds() || reqs[i].MaxLen != reqs[0].MaxLen {
			return nil, &Error{Program: notifySubmitV3, Err: ErrNotifyGroup}
		}
		if err := notifyV3Keys(stream, records[i]); err != nil {
			return nil, err
		}
	}
	out := make([]NotifySubmitV3Result, len(reqs))
	var send [MaxNotifySubmitGroup]int // indexes of the valid requests
	k := 0
	for i := range reqs {
		if e.validNotifySubmit(&reqs[i]) {
			send[k] = i
			k++
		} else {
			out[i].Status = NotifySubmitInvalid
		}
	}
	if k == 0 {
		return out, nil
	}
	ret, maxLen := reqs[0].Retention.Milliseconds(), reqs[0].MaxLen
	args := make([]any, 0, 6+4*k)
	args = append(args, fp.command, fp.target, 1+k, stream.Redis())
	for _, i := range send[:k] {
		args = append(args, records[i].Redis())
	}
	args = append(args, ret, maxLen)
	for _, i := range send[:k] {
		args = append(args, reqs[i].IntentID, reqs[i].Plan, reqs[i].PlanDigest)
	}
	r, err := e.runInts(ctx, fp, args)
	if err != nil {
		return nil, err
	}
	for j, i := range send[:k] {
		out[i].NotifySubmitResult, out[i].Err = notifySubmitV3Item(&r, j, k, reqs[i].Retention)
		if out[i].Err != nil && errors.Is(out[i].Err, ErrIncompatible) {
			return nil, out[i].Err
		}
	}
	return out, nil
}

// NotifySubmit is NotifySubmitV2 through notify-submit-v3, batched: a
// lone submit goes out at once as a call of one intent; submits that
// arrive while the Batcher's sends are in flight leave together as one
// pipeline, in which those of one stream (with the same Retention and
// MaxLen) share notify-submit-v3 calls of up to MaxNotifySubmitGroup
// intents. Each intent is still judged on its own, with its own status;
// a lost reply leaves every intent of its call INDETERMINATE.
func (b *Batcher) NotifySubmit(ctx context.Context, stream, record keys.Key, req NotifySubmitRequest) (NotifySubmitResult, error) {
	fp := b.e.notifySubmitV3
	if fp == nil {
		return NotifySubmitResult{}, &CompatibilityError{Program: notifySubmitV3, Reason: "program not in catalog"}
	}
	if err := notifyV3Keys(stream, record); err != nil {
		return NotifySubmitResult{}, err
	}
	if !b.e.validNotifySubmit(&req) {
		return NotifySubmitResult{Status: NotifySubmitInvalid}, nil
	}
	// The layout groupSubmits reads and mergeSubmits extends.
	args := []any{fp.command, fp.target, 2, stream.Redis(), record.Redis(),
		req.Retention.Milliseconds(), req.MaxLen, req.IntentID, req.Plan, req.PlanDigest}
	r, err := b.do(ctx, fp, args)
	if err != nil {
		return NotifySubmitResult{}, err
	}
	return notifySubmitV3Item(&r, r.item, max(1, r.items), req.Retention)
}

// notifyV3Keys refuses unbuilt keys and a record outside stream's slot.
func notifyV3Keys(stream, record keys.Key) error {
	if stream.IsZero() || record.IsZero() {
		return &Error{Program: notifySubmitV3, Err: ErrZeroKey}
	}
	return sameSlot(notifySubmitV3, stream, record)
}

// validNotifySubmit checks what notify-submit-v2 checked in Lua and v3
// leaves to the host: ids and digests of 64 lower-hex, a plan of
// 1..MaxNotifyPlanBytes, a retention of 1 ms up to the manifest's
// maxTtlMillis in whole milliseconds as sent, a MaxLen of
// 1..MaxNotifyStreamLen.
func (e *Executor) validNotifySubmit(req *NotifySubmitRequest) bool {
	ret := req.Retention.Milliseconds()
	return lowerHex64(req.IntentID) && lowerHex64(req.PlanDigest) &&
		len(req.Plan) >= 1 && len(req.Plan) <= MaxNotifyPlanBytes &&
		ret >= 1 && ret <= e.cat.manifest.MaxTTLMillis &&
		req.MaxLen >= 1 && req.MaxLen <= MaxNotifyStreamLen
}

func lowerHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// notifySubmitV3Item checks intent item of the k intents of a decoded
// notify-submit-v3 reply (decodeInts bounded its arity) and returns its
// result; retention is the TTL a new intent's record got. The reply is
// untrusted: a slot past k must be zero, a call status other than 1 or
// INVALID, an intent status or state out of range, or a new intent that
// is not PENDING is ErrIncompatible. Status 0 (the call ended before the
// intent) is a NOT_APPLIED error.
func notifySubmitV3Item(r *reply, item, k int, retention time.Duration) (NotifySubmitResult, error) {
	if k < 1 || k > MaxNotifySubmitGroup || item < 0 || item >= k || r.n != 3*MaxNotifySubmitGroup {
		return NotifySubmitResult{}, notifyIncompatible(notifySubmitV3, "intent slot out of range")
	}
	first := 3 * k // slots past k are zero, and all of them on INVALID
	if r.status == int64(NotifySubmitInvalid) {
		first = 0
	} else if r.status != int64(NotifySubmitted) {
		return NotifySubmitResult{}, notifyIncompatible(notifySubmitV3, "call status neither 1 nor INVALID")
	}
	for i := first; i < r.n; i++ {
		if r.int(i) != 0 {
			return NotifySubmitResult{}, notifyIncompatible(notifySubmitV3, "a result past the call's intents")
		}
	}
	if r.status == int64(NotifySubmitInvalid) {
		return NotifySubmitResult{Status: NotifySubmitInvalid}, nil
	}
	s, st, att := r.int(3*item), r.int(3*item+1), r.int(3*item+2)
	res := NotifySubmitResult{Status: NotifySubmitStatus(s), State: NotifyState(st), Attempts: int(att)}
	switch NotifySubmitStatus(s) {
	case 0:
		if st != 0 || att != 0 {
			break
		}
		return NotifySubmitResult{}, &Error{Program: notifySubmitV3, Err: &certainty.Error{
			Outcome: certainty.NotApplied, Op: notifySubmitV3, Code: "not-run"}}
	case NotifySubmitted:
		if st == int64(NotifyPending) && att == 0 {
			res.RecordTTL = time.Duration(retention.Milliseconds()) * time.Millisecond
			return res, nil
		}
	case NotifyDuplicate, NotifyDuplicateOtherPlan:
		if validNotifyState(st) && validAttempts(att) {
			return res, nil
		}
	case NotifySubmitWrongType:
		if st == 0 && att == 0 {
			return res, nil
		}
	}
	return NotifySubmitResult{}, notifyIncompatible(notifySubmitV3, "an intent status, state or attempts out of range")
}

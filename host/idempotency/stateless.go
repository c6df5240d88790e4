package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// Step is one step of the stateless API (Claim, Inspect, Start, Renew,
// Complete, Fail, Release): for callers that keep only their attempt — a
// service behind the sidecar, a process restarted with its stored owner
// token. Execute is the whole protocol in one call; a caller driving the
// steps itself takes on Execute's rule: run the action only after a Start
// of this attempt answered STARTED or ALREADY_STARTED_SAME_OPERATION.
type Step uint8

// Steps.
const (
	StepClaim Step = iota + 1
	StepInspect
	StepStart
	StepRenew
	StepComplete
	StepFail
	StepRelease
)

var stepNames = [...]string{StepClaim: "claim", StepInspect: "inspect", StepStart: "start", StepRenew: "renew",
	StepComplete: "complete", StepFail: "fail", StepRelease: "release"}

func (s Step) String() string {
	if int(s) <= 0 || int(s) >= len(stepNames) {
		return "invalid"
	}
	return stepNames[s]
}

// Outcome names a step's result besides the programs' statuses.
const (
	// StatusUnavailable: Redis refused or could not be reached before the
	// program ran (see StepResult.Overloaded); nothing changed.
	StatusUnavailable = "UNAVAILABLE"
	// StatusIndeterminate: the program was sent and no reply came, also
	// after one repeat with the same operation (and, for a claim, an
	// inspection with the same attempt). Repeat the step with the same
	// owner token and operation id.
	StatusIndeterminate = "INDETERMINATE"
)

// StepResult is the outcome of a stateless step.
type StepResult struct {
	// Status is the program's status name (idempotency-<step>-v1's
	// manifest enum), StatusUnavailable or StatusIndeterminate. A claim
	// whose replies were lost and that an inspection reconciled answers the
	// claim status the inspection implies (REPLAYED_ACQUIRE,
	// COMPLETED_REPLAY, IN_PROGRESS, RECOVERY_REQUIRED, ...).
	Status string
	// Owned: the attempt owns the record (claim and inspect: ACQUIRED,
	// REPLAYED_ACQUIRE, TAKEN_OVER_CLAIMED, CLAIMED_SAME_OPERATION,
	// EXECUTING_SAME_OPERATION). Never true on a guess.
	Owned bool
	// State is the record's state when the reply disclosed it ("CLAIMED",
	// "EXECUTING", ...), else "".
	State string
	// Attempt is the record's attempt number when disclosed: the number
	// Start, Renew, Complete, Fail and Release need.
	Attempt int64
	// RetryAfter is the holder's remaining lease (IN_PROGRESS and
	// IN_PROGRESS_OTHER), or the owner's (claimed or started).
	RetryAfter time.Duration
	// ValidUntil (Start answering STARTED or
	// ALREADY_STARTED_SAME_OPERATION, Renew answering RENEWED) is when the
	// caller's action must have ended unless a later Renew moves it: the
	// owner's remaining lease as the reply disclosed it, counted from just
	// before the first send, less a tenth of the configured lease for
	// clock drift — the deadline Execute's watchdog keeps itself. It reads
	// the monotonic clock; zero for any other answer.
	ValidUntil time.Time
	// Response is the stored response (COMPLETED_REPLAY).
	Response []byte
	// Certainty is the execution certainty of the last call.
	Certainty certainty.Outcome
	// Overloaded: Unavailable because the host's admission or Redis
	// refused the call for load.
	Overloaded bool
	// Cause is the runtime's error (Unavailable, Indeterminate).
	Cause error
}

// scopeKey builds the record key of s, checking the route against the
// allowlist; nothing is sent.
func (e *Executor) scopeKey(s Scope) (keys.Key, error) {
	switch {
	case len(s.Principal) == 0 || len(s.Principal) > 1024:
		return keys.Key{}, fmt.Errorf("%w: principal must be 1..1024 bytes", ErrInvalidRequest)
	case len(s.Key) == 0 || len(s.Key) > MaxKeyBytes:
		return keys.Key{}, fmt.Errorf("%w: key must be 1..%d bytes", ErrInvalidRequest, MaxKeyBytes)
	case e.routes != nil && !e.routes[s.Route]:
		return keys.Key{}, fmt.Errorf("%w: %w", ErrInvalidRequest, ErrUnknownRoute)
	}
	k, err := e.keys.Build(keys.Spec{Capability: keys.CapIdem, Region: s.Route, KeyVersion: keyVersion, Kind: "record",
		Parts: [][]byte{s.Principal, []byte(s.Key)}})
	if err != nil {
		return keys.Key{}, fmt.Errorf("%w: route must be a slug of 1..64 lower-case letters, digits and '-'", ErrInvalidRequest)
	}
	return k, nil
}

// stepOpID names one transition of one attempt: the same for every repeat
// of the step by the same attempt (so a repeat after a lost reply is
// recognised as ALREADY_..._SAME_OPERATION), and unguessable without the
// owner token.
func stepOpID(step Step, a owner.Attempt, attempt int64) []byte {
	h := sha256.New()
	for _, p := range []string{"caphost-idempotency-step-v1", step.String(), a.Owner().Reveal(), a.OperationID(),
		strconv.FormatInt(attempt, 10)} {
		h.Write([]byte(strconv.Itoa(len(p)) + ":" + p))
	}
	return []byte(step.String() + "-" + hex.EncodeToString(h.Sum(nil)[:16]))
}

// failed maps an error of one call: ctx's and incompatible replies are
// errors, a lost reply is Indeterminate, anything else Unavailable
// (nothing was sent, or Redis refused before the program ran).
func (e *Executor) failed(ctx context.Context, step Step, route string, err error) (StepResult, error) {
	o := certainty.Classify(err, true)
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		e.m.step(route, step.String(), resultError)
		return StepResult{}, ctx.Err()
	case errors.Is(err, programs.ErrIncompatible):
		e.m.step(route, step.String(), resultError)
		return StepResult{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	case o == certainty.Indeterminate:
		e.m.step(route, step.String(), StatusIndeterminate)
		e.m.lost(route, step.String())
		return StepResult{Status: StatusIndeterminate, Certainty: o, Cause: err}, nil
	}
	e.m.step(route, step.String(), StatusUnavailable)
	return StepResult{Status: StatusUnavailable, Certainty: o, Overloaded: o == certainty.OverloadedBeforeSend, Cause: err}, nil
}

// repeatable runs call, and once more with the same arguments when the
// first reply was lost. A repeat that fails before sending does not undo
// the first send's uncertainty: the error is then the first one's.
func repeatable[T any](ctx context.Context, e *Executor, step string, call func() (T, error)) (T, error) {
	var (
		res  T
		err  error
		lost error
	)
	for try := 0; try < 2; try++ {
		res, err = call()
		if err == nil {
			return res, nil
		}
		if certainty.Classify(err, true) != certainty.Indeterminate || ctx.Err() != nil {
			break
		}
		lost = err
		if try == 0 && e.beforeRepeat != nil {
			e.beforeRepeat(step)
		}
	}
	if lost != nil && !(ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		return res, lost
	}
	return res, err
}

func stateOf(r programs.IdemRecord) string {
	if r.State == programs.IdemStateNone {
		return ""
	}
	return r.State.String()
}

// Claim claims r without running anything: one claim program (repeated
// once with the same attempt after a lost reply, then reconciled by an
// inspection with the same attempt). Owned reports that the attempt now
// owns the record; Attempt is the number the other steps need. Errors are
// ErrInvalidRequest, ErrCorrupt, ErrCorruptResponse (a stored response
// that does not match its digest) and ctx's.
func (e *Executor) Claim(ctx context.Context, r Request) (StepResult, error) {
	c, err := e.prepare(r)
	if err != nil {
		return StepResult{}, err
	}
	route := r.Scope.Route
	req := programs.IdemClaimRequest{Attempt: c.attempt, Fingerprint: c.fp, Lease: e.cfg.Lease, Retention: e.cfg.Retention,
		CodecID: c.req.CodecID, PolicyRevision: e.cfg.PolicyRevision}
	res, err := repeatable(ctx, e, "claim", func() (programs.IdemClaimResult, error) { return e.exec.IdempotencyClaim(ctx, c.key, req) })
	if err != nil {
		if certainty.Classify(err, true) == certainty.Indeterminate && ctx.Err() == nil {
			e.m.claimed(route, StatusIndeterminate)
			return e.reconcileClaim(ctx, c, err)
		}
		if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
			e.m.claimed(route, StatusUnavailable)
		}
		return e.failed(ctx, StepClaim, route, err)
	}
	e.m.claimed(route, res.Status.String())
	if res.Status == programs.IdemClaimWrongType {
		return StepResult{}, ErrCorrupt
	}
	_, owned := res.Owned(c.attempt)
	out := StepResult{Status: res.Status.String(), Owned: owned, State: stateOf(res.Record), Attempt: res.Record.Attempt,
		RetryAfter: res.Record.Lease, Certainty: res.Outcome()}
	if res.Status == programs.IdemClaimCompletedReplay {
		if out.Response, err = storedPayload(res.Response); err != nil {
			return StepResult{}, err
		}
		e.m.bytes(route, "replay", len(out.Response))
	}
	e.m.step(route, "claim", out.Status)
	return out, nil
}

// reconcileClaim inspects a claim whose replies were lost, with the same
// attempt, and answers the claim status the record implies.
func (e *Executor) reconcileClaim(ctx context.Context, c call, cause error) (StepResult, error) {
	route := c.req.Scope.Route
	ins, err := e.exec.IdempotencyInspect(ctx, c.key, programs.IdemInspectRequest{Attempt: c.attempt, Fingerprint: c.fp,
		CodecID: c.req.CodecID, PolicyRevision: e.cfg.PolicyRevision})
	if err != nil {
		e.m.step(route, "claim", StatusIndeterminate)
		return StepResult{Status: StatusIndeterminate, Certainty: certainty.Indeterminate, Cause: cause}, nil
	}
	out := StepResult{State: stateOf(ins.Record), Attempt: ins.Record.Attempt, RetryAfter: ins.Record.Lease, Certainty: ins.Outcome()}
	switch ins.Status {
	case programs.IdemInspectClaimedSameOperation, programs.IdemInspectExecutingSameOperation:
		out.Status, out.Owned = programs.IdemClaimReplayedAcquire.String(), true
	case programs.IdemInspectCompletedReplay:
		if out.Response, err = storedPayload(ins.Response); err != nil {
			return StepResult{}, err
		}
		out.Status = programs.IdemClaimCompletedReplay.String()
	case programs.IdemInspectInProgressOther:
		out.Status, out.Attempt = programs.IdemClaimInProgress.String(), 0
	case programs.IdemInspectAbandoned:
		out.Status = programs.IdemClaimRecoveryRequired.String()
	case programs.IdemInspectFingerprintMismatch:
		out.Status = programs.IdemClaimFingerprintMismatch.String()
	case programs.IdemInspectPolicyMismatch:
		out.Status = programs.IdemClaimPolicyMismatch.String()
	case programs.IdemInspectOperationConflict:
		out.Status = programs.IdemClaimOwnerOperationConflict.String()
	case programs.IdemInspectWrongType:
		return StepResult{}, ErrCorrupt
	default:
		// ABSENT or FAILED_RETRYABLE: the lost claim did not apply, or was
		// overtaken; repeat it with the same attempt.
		out = StepResult{Status: StatusIndeterminate, Certainty: certainty.Indeterminate, Cause: cause}
	}
	e.m.step(route, "claim", out.Status)
	return out, nil
}

// Inspect reports what the record holds for r's attempt without writing.
// Owned is true when the attempt holds the claim (CLAIMED_SAME_OPERATION)
// or its action started (EXECUTING_SAME_OPERATION: never run the action
// again on that alone). Errors are ErrInvalidRequest, ErrCorrupt,
// ErrCorruptResponse and ctx's.
func (e *Executor) Inspect(ctx context.Context, r Request) (StepResult, error) {
	c, err := e.prepare(r)
	if err != nil {
		return StepResult{}, err
	}
	route := r.Scope.Route
	ins, err := e.exec.IdempotencyInspect(ctx, c.key, programs.IdemInspectRequest{Attempt: c.attempt, Fingerprint: c.fp,
		CodecID: c.req.CodecID, PolicyRevision: e.cfg.PolicyRevision})
	if err != nil {
		return e.failed(ctx, StepInspect, route, err)
	}
	if ins.Status == programs.IdemInspectWrongType {
		return StepResult{}, ErrCorrupt
	}
	out := StepResult{Status: ins.Status.String(), State: stateOf(ins.Record), Attempt: ins.Record.Attempt,
		RetryAfter: ins.Record.Lease, Certainty: ins.Outcome(),
		Owned: ins.Status == programs.IdemInspectClaimedSameOperation || ins.Status == programs.IdemInspectExecutingSameOperation}
	if ins.Status == programs.IdemInspectCompletedReplay {
		if out.Response, err = storedPayload(ins.Response); err != nil {
			return StepResult{}, err
		}
	}
	e.m.step(route, "inspect", out.Status)
	return out, nil
}

// owned checks the arguments every owner transition takes and builds the
// record key and owner handle.
func (e *Executor) owned(s Scope, a owner.Attempt, attempt int64) (keys.Key, programs.IdemOwner, error) {
	if a.IsZero() {
		return keys.Key{}, programs.IdemOwner{}, fmt.Errorf("%w: no attempt (the claim's owner token and operation id)", ErrInvalidRequest)
	}
	if attempt < 1 || attempt > 1<<53-1 {
		return keys.Key{}, programs.IdemOwner{}, fmt.Errorf("%w: attempt number must be within 1..2^53-1", ErrInvalidRequest)
	}
	k, err := e.scopeKey(s)
	if err != nil {
		return keys.Key{}, programs.IdemOwner{}, err
	}
	return k, programs.IdemOwner{Owner: []byte(a.Owner().Reveal()), Attempt: attempt}, nil
}

func transition(e *Executor, step Step, route, status string, rec programs.IdemRecord, o certainty.Outcome) StepResult {
	out := StepResult{Status: status, State: stateOf(rec), Attempt: rec.Attempt, RetryAfter: rec.Lease, Certainty: o}
	e.m.step(route, step.String(), out.Status)
	return out
}

// Start marks the attempt's claimed record EXECUTING with a fresh
// processing lease. Only on STARTED or ALREADY_STARTED_SAME_OPERATION (a
// repeat of this attempt's start) may the caller run its action. A lost
// reply is repeated once with the same operation. Errors are
// ErrInvalidRequest, ErrCorrupt and ctx's.
func (e *Executor) Start(ctx context.Context, s Scope, a owner.Attempt, attempt int64) (StepResult, error) {
	k, own, err := e.owned(s, a, attempt)
	if err != nil {
		return StepResult{}, err
	}
	op := stepOpID(StepStart, a, attempt)
	sent := e.now()
	res, err := repeatable(ctx, e, "start", func() (programs.IdemTransitionResult[programs.IdemStartStatus], error) {
		return e.exec.IdempotencyStart(ctx, k, own, op, e.cfg.Lease)
	})
	if err != nil {
		return e.failed(ctx, StepStart, s.Route, err)
	}
	if res.Status == programs.IdemStartWrongType {
		return StepResult{}, ErrCorrupt
	}
	out := transition(e, StepStart, s.Route, res.Status.String(), res.Record, res.Outcome())
	if res.Status == programs.IdemStarted || res.Status == programs.IdemAlreadyStartedSameOperation {
		out.ValidUntil = e.validUntil(sent, res.Record.Lease)
	}
	return out, nil
}

// validUntil is the local deadline of a lease the server reported as
// remaining for lease, measured from sent (just before the send): the
// server read it after the send arrived, so sent+lease is never later
// than the true end, and a tenth of the configured lease is kept for
// clock drift, as Execute's watchdog does.
func (e *Executor) validUntil(sent time.Time, lease time.Duration) time.Time {
	return sent.Add(min(lease, e.cfg.Lease) - driftBudget(e.cfg.Lease))
}

// Renew sets the remaining processing lease of the attempt's claimed or
// executing record to the configured lease. Each call is a new renew
// (never repeated: a lost reply is INDETERMINATE, renew again). Errors are
// ErrInvalidRequest, ErrCorrupt and ctx's.
func (e *Executor) Renew(ctx context.Context, s Scope, a owner.Attempt, attempt int64) (StepResult, error) {
	k, own, err := e.owned(s, a, attempt)
	if err != nil {
		return StepResult{}, err
	}
	sent := e.now()
	res, err := e.exec.IdempotencyRenew(ctx, k, own, newOpID("renew"), e.cfg.Lease)
	e.m.renewed(s.Route, renewLabel(res.Status, err))
	if err != nil {
		return e.failed(ctx, StepRenew, s.Route, err)
	}
	if res.Status == programs.IdemRenewWrongType {
		return StepResult{}, ErrCorrupt
	}
	out := transition(e, StepRenew, s.Route, res.Status.String(), res.Record, res.Outcome())
	if res.Status == programs.IdemRenewed {
		out.ValidUntil = e.validUntil(sent, res.Record.Lease)
	}
	return out, nil
}

// Complete stores response (at most Config.MaxResponseBytes, else
// programs.ErrResponseTooLarge and nothing is sent) as the attempt's
// result and makes the record COMPLETED for the replay TTL. A lost reply is
// repeated once with the same operation: ALREADY_COMPLETED_SAME_RESULT.
// Errors are ErrInvalidRequest, ErrResponseTooLarge, ErrCorrupt and ctx's.
func (e *Executor) Complete(ctx context.Context, s Scope, a owner.Attempt, attempt int64, response []byte) (StepResult, error) {
	k, own, err := e.owned(s, a, attempt)
	if err != nil {
		return StepResult{}, err
	}
	if len(response) > e.cfg.MaxResponseBytes {
		return StepResult{}, fmt.Errorf("%w: %d bytes over the bound of %d", programs.ErrResponseTooLarge, len(response), e.cfg.MaxResponseBytes)
	}
	sum := sha256.Sum256(response)
	req := programs.IdemCompleteRequest{Owner: own, OperationID: stepOpID(StepComplete, a, attempt),
		Response:  programs.IdemResponse{Version: 1, Digest: hex.EncodeToString(sum[:]), Payload: response},
		ReplayTTL: e.cfg.ReplayTTL, MaxResponseBytes: e.cfg.MaxResponseBytes}
	res, err := repeatable(ctx, e, "complete", func() (programs.IdemTransitionResult[programs.IdemCompleteStatus], error) {
		return e.exec.IdempotencyComplete(ctx, k, req)
	})
	if err != nil {
		return e.failed(ctx, StepComplete, s.Route, err)
	}
	switch res.Status {
	case programs.IdemCompleteWrongType:
		return StepResult{}, ErrCorrupt
	case programs.IdemCompleted:
		e.m.bytes(s.Route, "complete", len(response))
	}
	return transition(e, StepComplete, s.Route, res.Status.String(), res.Record, res.Outcome()), nil
}

// Fail records that the attempt's started action failed: retryable (it
// provably had no effect: FAILED_RETRYABLE, the next claim runs it again)
// or not (its effect is unknown: ABANDONED, every later claim is
// RECOVERY_REQUIRED). A lost reply is repeated once with the same
// operation. Errors are ErrInvalidRequest, ErrCorrupt and ctx's.
func (e *Executor) Fail(ctx context.Context, s Scope, a owner.Attempt, attempt int64, retryable bool) (StepResult, error) {
	k, own, err := e.owned(s, a, attempt)
	if err != nil {
		return StepResult{}, err
	}
	d := programs.IdemAbandon
	if retryable {
		d = programs.IdemRetryable
	}
	op := stepOpID(StepFail, a, attempt)
	res, err := repeatable(ctx, e, "fail", func() (programs.IdemTransitionResult[programs.IdemFailStatus], error) {
		return e.exec.IdempotencyFail(ctx, k, own, op, d, e.cfg.FailedTTL)
	})
	if err != nil {
		return e.failed(ctx, StepFail, s.Route, err)
	}
	if res.Status == programs.IdemFailWrongType {
		return StepResult{}, ErrCorrupt
	}
	return transition(e, StepFail, s.Route, res.Status.String(), res.Record, res.Outcome()), nil
}

// Release gives back the attempt's claim before its action started
// (RELEASED_BEFORE_EXECUTION); once started the record stays
// (EXECUTION_ALREADY_STARTED: use Fail). A lost reply is repeated once
// with the same operation. Errors are ErrInvalidRequest, ErrCorrupt and
// ctx's.
func (e *Executor) Release(ctx context.Context, s Scope, a owner.Attempt, attempt int64) (StepResult, error) {
	k, own, err := e.owned(s, a, attempt)
	if err != nil {
		return StepResult{}, err
	}
	op := stepOpID(StepRelease, a, attempt)
	res, err := repeatable(ctx, e, "release", func() (programs.IdemTransitionResult[programs.IdemReleaseStatus], error) {
		return e.exec.IdempotencyRelease(ctx, k, own, op)
	})
	if err != nil {
		return e.failed(ctx, StepRelease, s.Route, err)
	}
	if res.Status == programs.IdemReleaseWrongType {
		return StepResult{}, ErrCorrupt
	}
	return transition(e, StepRelease, s.Route, res.Status.String(), res.Record, res.Outcome()), nil
}

// Limits returns the bounds a stateless caller needs.
func (e *Executor) Limits() Limits {
	return Limits{MaxResponseBytes: e.cfg.MaxResponseBytes, Lease: e.cfg.Lease}
}

// Limits are the executor's bounds the sidecar checks.
type Limits struct {
	MaxResponseBytes int
	Lease            time.Duration
}

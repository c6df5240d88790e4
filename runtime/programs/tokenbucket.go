package programs

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

// tokenBucketV2 is the program behind TokenBucketPlan and RateTokenBucketV2.
const tokenBucketV2 = "rate-token-bucket-v2"

// RateTokenBucketV2 evaluates a token-bucket limit with
// rate-token-bucket-v2: the algorithm, clock rule and dedup of
// rate-token-bucket-v1 over a string state (SET PX) in fewer Redis calls.
// Its state is not v1's: keep v1 and v2 state under different keys (the
// rate limiter uses key version 2 for it). dedup is used, and must share
// state's hash tag, only when req.DedupTTL is positive; otherwise it may be
// the zero Key.
func (e *Executor) RateTokenBucketV2(ctx context.Context, state, dedup keys.Key, req TokenBucketRequest) (RateResult, error) {
	return e.RatePlan(ctx, state, dedup, NewTokenBucketPlan(req), req.CostScaled, string(req.EvaluationID))
}

// TokenBucketPlan is the RatePlan of a rate-token-bucket-v2 policy (see
// NewTokenBucketPlan).
type TokenBucketPlan = RatePlan

// NewTokenBucketPlan renders req for rate-token-bucket-v2.
// req.CostScaled is the cost the plan is rendered for (other costs cost one
// formatting per call) and req.EvaluationID is ignored: it is per call.
// With req.DedupTTL zero the plan sends neither the dedup key nor the dedup
// arguments.
func NewTokenBucketPlan(req TokenBucketRequest) *TokenBucketPlan {
	return newRatePlan(planTokenBucket, req.CostScaled, 4, req.RateOptions, req.PolicyRevision,
		strconv.FormatInt(req.CapacityScaled, 10), strconv.FormatInt(req.RefillScaled, 10),
		millis(req.RefillPeriod), strconv.FormatInt(req.CostScaled, 10))
}

// RateTokenBucketPlan is RatePlan: it evaluates the limit rendered by plan
// for costScaled micro-tokens.
func (e *Executor) RateTokenBucketPlan(ctx context.Context, state, dedup keys.Key, plan *TokenBucketPlan, costScaled int64, evaluationID string) (RateResult, error) {
	return e.RatePlan(ctx, state, dedup, plan, costScaled, evaluationID)
}

// planProgram names the program of a RatePlan; it indexes Executor.plans.
type planProgram uint8

const (
	planTokenBucket planProgram = iota
	planFixedWindow
	planSlidingCounter
	planGCRA
	planSlidingLog
	planSlidingLogV3
	planFixedWindowV3
	planPrograms // number of plan programs
)

// planProgramIDs are the programs a RatePlan can run, by planProgram.
var planProgramIDs = [planPrograms]string{tokenBucketV2, fixedWindowV2, slidingCounterV2, gcraV2, slidingLogV2, slidingLogV3, fixedWindowV3}

// RatePlan is one rate policy's call of a lean rate program
// (rate-token-bucket-v2, rate-fixed-window-v2 or -v3, rate-sliding-counter-v2,
// rate-gcra-v2, rate-sliding-log-v2 or rate-sliding-log-v3) rendered once into its ARGV, boxed, so that a caller
// evaluating the same policy many times (the rate limiter renders one per
// policy revision when a policy set is installed) sends each evaluation
// without formatting or boxing the policy's parameters. Only the cost and
// the evaluation id vary per call. A plan is immutable and safe for
// concurrent use; the program still validates every argument server-side.
type RatePlan struct {
	program planProgram
	// argv is ARGV without the evaluation id (appended per call, with
	// dedup only).
	argv      []any
	cost      int64
	costIndex int // position of the cost in argv; -1: the program takes cost 1 only
	dedup     bool
}

// newRatePlan renders a plan: params are the program's ARGV before the
// clock, grace and dedup tail, the cost at costIndex.
func newRatePlan(prog planProgram, cost int64, costIndex int, o RateOptions, params ...any) *RatePlan {
	p := &RatePlan{program: prog, cost: cost, costIndex: costIndex, dedup: o.DedupTTL != 0}
	p.argv = append(params, millis(o.MaxClockStep), millis(o.CleanupGrace))
	if p.dedup {
		p.argv = append(p.argv, millis(o.DedupTTL), strconv.Itoa(o.DedupMaxEntries))
	}
	return p
}

// Dedup reports whether the plan records evaluation ids.
func (p *RatePlan) Dedup() bool { return p.dedup }

// Program returns the id of the program the plan runs.
func (p *RatePlan) Program() string { return planProgramIDs[p.program] }

// appendArgv returns the ARGV of one call appended to dst.
func (p *RatePlan) appendArgv(dst []any, cost int64, evaluationID string) []any {
	n := len(dst)
	dst = append(dst, p.argv...)
	if cost != p.cost && p.costIndex >= 0 {
		dst[n+p.costIndex] = strconv.FormatInt(cost, 10)
	}
	if p.dedup {
		dst = append(dst, evaluationID)
	}
	return dst
}

// RatePlan evaluates the limit rendered by plan for cost (micro-tokens for
// a token bucket, units otherwise). With dedup in the plan, dedup must be
// the same-slot dedup key and evaluationID (1..128 bytes) identifies the
// evaluation; without, both are ignored.
//
// The call is built directly (one argument slice, the program's command and
// digest boxed once per Executor) and the reply, all integers by the
// manifest, is read as []int64: no per-field boxing. The reply checks of
// every facade apply (arity, schema, status range, clock); go-redis reads a
// nil element as 0 and a numeric bulk string as its number, which a pinned
// program of this catalog never returns.
func (e *Executor) RatePlan(ctx context.Context, state, dedup keys.Key, plan *RatePlan, cost int64, evaluationID string) (RateResult, error) {
	fp, args, err := e.planArgs(state, dedup, plan, cost, evaluationID)
	if err != nil {
		return RateResult{}, err
	}
	r, err := e.runInts(ctx, fp, args)
	if err != nil {
		return RateResult{}, err
	}
	return rateResult(&r), nil
}

// planArgs renders one plan call: command, target, numkeys, keys, ARGV, in
// one slice, and the program it runs.
func (e *Executor) planArgs(state, dedup keys.Key, plan *RatePlan, cost int64, evaluationID string) (*fastProgram, []any, error) {
	if plan == nil {
		return nil, nil, &CompatibilityError{Program: "rate plan", Reason: "no rate plan"}
	}
	fp := e.plans[plan.program]
	if fp == nil {
		return nil, nil, &CompatibilityError{Program: plan.Program(), Reason: "program not in catalog"}
	}
	if state.IsZero() || (plan.dedup && dedup.IsZero()) {
		return nil, nil, &Error{Program: plan.Program(), Err: ErrZeroKey}
	}
	if plan.costIndex < 0 && cost != plan.cost {
		return nil, nil, &CompatibilityError{Program: plan.Program(), Reason: "takes cost " + strconv.FormatInt(plan.cost, 10) + " only"}
	}
	nk := 1
	if plan.dedup {
		nk = 2
	}
	args := make([]any, 3, 3+nk+len(plan.argv)+1)
	args[0], args[1], args[2] = fp.command, fp.target, nk
	args = append(args, state.Redis())
	if plan.dedup {
		args = append(args, dedup.Redis())
	}
	return fp, plan.appendArgv(args, cost, evaluationID), nil
}

// fastProgram is a program prepared for calls built without go-redis's
// generic EvalSha/FCall helpers: its command name and target (digest or
// function) boxed once.
type fastProgram struct {
	program Program
	command any // "evalsha", "fcall" or "fcall_ro"
	target  any // sha1 or function name
	// short: besides the integer tuple, the program may answer the bare
	// integer 1 (status 1, fields implied by the request: the lease v3
	// fast paths), so its reply is read untyped (decodeShort).
	short bool
}

func (e *Executor) prepare(id string) *fastProgram {
	p, ok := e.cat.Program(id)
	if !ok {
		return nil
	}
	fp := &fastProgram{program: p, command: "evalsha", target: p.spec.SHA1}
	if e.mode == policy.ProgramsFunctionsProvisioned {
		fp.command, fp.target = "fcall", p.spec.Function
		if p.spec.ReadOnly != nil && *p.spec.ReadOnly {
			fp.command = "fcall_ro"
		}
	}
	return fp
}

// prepareShort is prepare for a program that may answer the bare integer 1.
func (e *Executor) prepareShort(id string) *fastProgram {
	fp := e.prepare(id)
	if fp != nil {
		fp.short = true
	}
	return fp
}

// runInts sends args (command, target, numkeys, keys..., ARGV...) for a
// program whose result fields are all integers and decodes the reply. In
// evalsha-managed mode an exact NOSCRIPT loads the source on the node the
// call routes to and sends the same call once more, as evalsha does.
func (e *Executor) runInts(ctx context.Context, fp *fastProgram, args []any) (reply, error) {
	id := fp.program.spec.ID
	cmd := newFastCmd(ctx, fp, args)
	err := e.client.Process(ctx, cmd)
	if err != nil && e.mode == policy.ProgramsEvalshaManaged && isNoScript(err) {
		if err := e.loadFor(ctx, fp.program, []string{args[3].(string)}); err != nil {
			return reply{}, &Error{Program: id, Err: err}
		}
		cmd = newFastCmd(ctx, fp, args)
		err = e.client.Process(ctx, cmd)
	}
	return e.decodeFastCmd(fp, cmd, err)
}

// newFastCmd is the command of one call of fp: read as integers, or
// untyped when the program may answer the bare integer 1.
func newFastCmd(ctx context.Context, fp *fastProgram, args []any) redis.Cmder {
	if fp.short {
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetFirstKeyPos(3)
		return cmd
	}
	cmd := redis.NewIntSliceCmd(ctx, args...)
	cmd.SetFirstKeyPos(3)
	return cmd
}

// decodeFastCmd decodes a finished newFastCmd of fp whose error is err.
func (e *Executor) decodeFastCmd(fp *fastProgram, cmd redis.Cmder, err error) (reply, error) {
	id := fp.program.spec.ID
	if err == redis.Nil {
		return reply{}, &CompatibilityError{Program: id, Reason: "nil reply, want an array"}
	}
	if err != nil {
		return reply{}, &Error{Program: id, Err: err}
	}
	switch c := cmd.(type) {
	case *redis.IntSliceCmd:
		return decodeInts(&e.cat.manifest, &fp.program.spec, c.Val())
	case *redis.Cmd:
		return decodeShort(&e.cat.manifest, &fp.program.spec, c.Val())
	}
	return reply{}, &CompatibilityError{Program: id, Reason: "unexpected command type"}
}

// decodeShort decodes the reply of a program that answers its fast path
// with the bare integer 1 and everything else with the integer tuple. The
// reply is untrusted: an integer other than 1, a tuple of another arity
// (checked before any element is read) or with a non-integer element is
// ErrIncompatible.
func decodeShort(m *Manifest, spec *ProgramSpec, v any) (reply, error) {
	bad := func(reason string) (reply, error) {
		return reply{}, &CompatibilityError{Program: spec.ID, Reason: reason}
	}
	if len(spec.Result) > maxResultFields {
		// Both forms below index fixed arrays by the spec's arity.
		return bad("too many result fields")
	}
	switch t := v.(type) {
	case int64:
		if t != 1 {
			return bad("integer reply " + strconv.FormatInt(t, 10) + ", want 1 or a tuple")
		}
		return reply{status: 1, n: len(spec.Result), short: true}, nil
	case []any:
		if want := 3 + len(spec.Result); len(t) != want {
			return bad("reply has " + strconv.Itoa(len(t)) + " elements, want " + strconv.Itoa(want))
		}
		var ints [3 + maxResultFields]int64
		for i, x := range t {
			n, ok := x.(int64)
			if !ok {
				return bad("reply element " + strconv.Itoa(i) + " is not an integer")
			}
			ints[i] = n
		}
		return decodeInts(m, spec, ints[:len(t)])
	}
	return bad("reply is neither the integer 1 nor an array")
}

// decodeInts is decodeReply for a reply read as integers.
func decodeInts(m *Manifest, spec *ProgramSpec, v []int64) (reply, error) {
	bad := func(reason string) (reply, error) {
		return reply{}, &CompatibilityError{Program: spec.ID, Reason: reason}
	}
	if want := 3 + len(spec.Result); len(v) != want {
		return bad("reply has " + strconv.Itoa(len(v)) + " elements, want " + strconv.Itoa(want))
	}
	if len(spec.Result) > maxResultFields {
		return bad("too many result fields")
	}
	if v[0] != int64(m.ResultSchemaVersion) {
		return bad("result schema " + strconv.FormatInt(v[0], 10))
	}
	if v[1] < 1 || v[1] > int64(len(spec.Statuses)) {
		return bad("unknown status " + strconv.FormatInt(v[1], 10))
	}
	if v[2] < 0 || (spec.Clock == "none" && v[2] != 0) {
		return bad("serverNowMillis " + strconv.FormatInt(v[2], 10) + " invalid for clock " + spec.Clock)
	}
	r := reply{status: v[1], serverNow: v[2], n: len(spec.Result)}
	for i, f := range spec.Result {
		if f.Type != ResultInteger {
			return bad("field " + f.Name + " is not an integer field")
		}
		r.ints[i] = v[3+i]
	}
	return r, nil
}

package programs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/internal/natbatch"
	"github.com/caphost/caphost/runtime/keys"
)

// Executor runs catalog programs on the script lane in exactly one mode. It
// is safe for concurrent use and holds no mutable state.
type Executor struct {
	cat    *Catalog
	mode   policy.ProgramMode
	client redis.UniversalClient
	// plans are the RatePlan programs prepared for the plan path, by
	// planProgram (nil: not in the catalog).
	plans [planPrograms]*fastProgram
	// notifySubmit (v2), notifySubmitV3, the lease*V2 and *V3 and the
	// permit*V3 are those programs prepared for the integer-only path
	// (nil: not in the catalog).
	notifySubmit, notifySubmitV3                    *fastProgram
	leaseAcquireV2, leaseReleaseV2                  *fastProgram
	leaseAcquireV3, leaseReleaseV3                  *fastProgram
	permitAcquireV3, permitRenewV3, permitReleaseV3 *fastProgram
	// calls, when set (Batched), batches run's calls naturally.
	calls *natbatch.Queue[*programCall]
}

// NewExecutor binds a catalog to the script-lane client in one mode. There
// is no fallback between modes: an evalsha-managed executor never sends
// FCALL and a functions-provisioned one never sends EVALSHA or SCRIPT LOAD.
func NewExecutor(c *Catalog, mode policy.ProgramMode, script redis.UniversalClient) (*Executor, error) {
	if c == nil || script == nil {
		return nil, errors.New("programs: NewExecutor needs a catalog and a client")
	}
	switch mode {
	case policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned:
	default:
		return nil, fmt.Errorf("%w: %q", ErrMode, mode)
	}
	e := &Executor{cat: c, mode: mode, client: script}
	for i, id := range planProgramIDs {
		e.plans[i] = e.prepare(id)
	}
	e.notifySubmit, e.notifySubmitV3 = e.prepare(notifySubmitV2), e.prepare(notifySubmitV3)
	e.leaseAcquireV2, e.leaseReleaseV2 = e.prepare(leaseAcquireV2), e.prepare(leaseReleaseV2)
	e.leaseAcquireV3, e.leaseReleaseV3 = e.prepareShort(leaseAcquireV3), e.prepareShort(leaseReleaseV3)
	e.permitAcquireV3, e.permitRenewV3 = e.prepare(concurrencyAcquireV3), e.prepare(concurrencyRenewV3)
	e.permitReleaseV3 = e.prepare(concurrencyReleaseV3)
	return e, nil
}

// Mode returns the executor's program mode.
func (e *Executor) Mode() policy.ProgramMode { return e.mode }

// reply is a decoded §7.6 result tuple. Fields live in fixed arrays (the
// manifest bounds them to maxResultFields) so that decoding a reply does not
// box every integer into an interface.
type reply struct {
	status    int64
	serverNow int64
	n         int                     // number of result fields
	ints      [maxResultFields]int64  // integer fields, by position
	raw       [maxResultFields][]byte // bytes fields, by position
	// short: the program answered with the bare integer 1, status 1 with
	// the fields the request implies (see decodeShort).
	short bool
	// item and items place one caller's intent in a notify-submit-v3
	// reply its Batcher shared among items callers (both 0: the call was
	// the caller's own).
	item, items int
}

func (r *reply) int(i int) int64 { return r.ints[i] }

func (r *reply) bytes(i int) []byte { return r.raw[i] }

// run executes program id with the given keys and arguments and decodes the
// reply against the manifest. Arguments are sent as given: the program
// validates them server-side before its first write, which is what the
// golden vectors prove in both modes.
func (e *Executor) run(ctx context.Context, id string, ks []keys.Key, args ...any) (reply, error) {
	p, ok := e.cat.Program(id)
	if !ok {
		return reply{}, &CompatibilityError{Program: id, Reason: "program not in catalog"}
	}
	wire := make([]string, len(ks))
	for i, k := range ks {
		if k.IsZero() {
			return reply{}, &Error{Program: id, Err: ErrZeroKey}
		}
		wire[i] = k.Redis()
	}
	var (
		v   any
		err error
	)
	if e.calls != nil {
		v, err = e.runQueued(ctx, p, wire, args)
	} else {
		v, err = e.call(ctx, p, wire, args)
	}
	if err != nil {
		return reply{}, &Error{Program: id, Err: err}
	}
	return decodeReply(&e.cat.manifest, &p.spec, v)
}

// call sends one call of p alone: FCALL (FCALL_RO), or EVALSHA with the
// NOSCRIPT recovery.
func (e *Executor) call(ctx context.Context, p Program, wire []string, args []any) (any, error) {
	if e.mode == policy.ProgramsFunctionsProvisioned {
		return e.fcall(ctx, p, wire, args)
	}
	return e.evalsha(ctx, p, wire, args)
}

func (e *Executor) fcall(ctx context.Context, p Program, wire []string, args []any) (any, error) {
	if p.spec.ReadOnly != nil && *p.spec.ReadOnly {
		return e.client.FCallRO(ctx, p.spec.Function, wire, args...).Result()
	}
	return e.client.FCall(ctx, p.spec.Function, wire, args...).Result()
}

// evalsha implements the only recovery the catalog allows: an exact NOSCRIPT
// reply means the server executed nothing, so loading the embedded source
// and sending EVALSHA once more cannot apply the program twice.
func (e *Executor) evalsha(ctx context.Context, p Program, wire []string, args []any) (any, error) {
	v, err := e.client.EvalSha(ctx, p.spec.SHA1, wire, args...).Result()
	if err == nil || !isNoScript(err) {
		return v, err
	}
	if err := e.loadFor(ctx, p, wire); err != nil {
		return nil, err
	}
	return e.client.EvalSha(ctx, p.spec.SHA1, wire, args...).Result()
}

// loadFor loads the source where the retry will run. On Cluster, go-redis's
// ClusterClient.ScriptLoad fans out to every known node (primaries and
// replicas) and fails if any one is unreachable, so the catalog loads on the
// primary serving the first key instead — that is where EVALSHA routes.
func (e *Executor) loadFor(ctx context.Context, p Program, wire []string) error {
	var target scriptLoader = e.client
	if cc, ok := e.client.(*redis.ClusterClient); ok && len(wire) > 0 {
		node, err := cc.MasterForKey(ctx, wire[0])
		if err != nil {
			return err
		}
		target = node
	}
	sha, err := target.ScriptLoad(ctx, p.source).Result()
	if err != nil {
		return err
	}
	if !strings.EqualFold(sha, p.spec.SHA1) {
		return fmt.Errorf("%w: got %q, manifest %q", ErrSHAMismatch, sha, p.spec.SHA1)
	}
	return nil
}

// scriptLoader is the one scripting command the recovery path needs; a
// narrower interface than redis.Scripter, which also offers EVAL.
type scriptLoader interface {
	ScriptLoad(ctx context.Context, script string) *redis.StringCmd
}

// isNoScript matches exactly a server NOSCRIPT error reply (go-redis may
// normalise its text but keeps the prefix and the redis.Error type).
func isNoScript(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	return strings.HasPrefix(rerr.Error(), "NOSCRIPT ")
}

// decodeReply checks a raw reply against the §7.6 shape and the manifest's
// result schema. Anything unexpected is a compatibility error, never a miss.
func decodeReply(m *Manifest, spec *ProgramSpec, v any) (reply, error) {
	bad := func(format string, a ...any) (reply, error) {
		return reply{}, &CompatibilityError{Program: spec.ID, Reason: fmt.Sprintf(format, a...)}
	}
	tuple, ok := v.([]any)
	if !ok {
		return bad("reply is %T, want an array", v)
	}
	if want := 3 + len(spec.Result); len(tuple) != want {
		return bad("reply has %d elements, want %d", len(tuple), want)
	}
	schema, ok := tuple[0].(int64)
	if !ok || schema != int64(m.ResultSchemaVersion) {
		return bad("result schema %v, want %d", tuple[0], m.ResultSchemaVersion)
	}
	status, ok := tuple[1].(int64)
	if !ok || status < 1 || status > int64(len(spec.Statuses)) {
		return bad("unknown status %v", tuple[1])
	}
	now, ok := tuple[2].(int64)
	if !ok || now < 0 || (spec.Clock == "none" && now != 0) {
		return bad("serverNowMillis %v invalid for clock %q", tuple[2], spec.Clock)
	}
	if len(spec.Result) > maxResultFields {
		return bad("result has %d fields, at most %d", len(spec.Result), maxResultFields)
	}
	r := reply{status: status, serverNow: now, n: len(spec.Result)}
	for i, f := range spec.Result {
		raw := tuple[3+i]
		switch f.Type {
		case ResultInteger:
			n, ok := raw.(int64)
			if !ok {
				return bad("field %s is %T, want integer", f.Name, raw)
			}
			r.ints[i] = n
		case ResultBytes:
			s, ok := raw.(string)
			if !ok {
				return bad("field %s is %T, want bytes", f.Name, raw)
			}
			if len(s) > maxValueBytes {
				return bad("field %s exceeds %d bytes", f.Name, maxValueBytes)
			}
			r.raw[i] = []byte(s)
		}
	}
	return r, nil
}

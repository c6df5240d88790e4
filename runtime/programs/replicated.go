package programs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/internal/replwait"
	"github.com/caphost/caphost/runtime/keys"
)

// Bounds of a ReplicaWait (the guard's hard bounds of a replica-wait
// grant).
const (
	// MaxReplicaAcks is the most replicas a ReplicaWait may ask for.
	MaxReplicaAcks = replwait.MaxAcks
	// MaxReplicaWait is the longest timeout a ReplicaWait may carry.
	MaxReplicaWait = replwait.MaxTimeout
	// ReplicaWaitMargin is what a ReplicaWait's timeout must leave of the
	// script lane's command (read) timeout for the program itself, so that
	// a WAIT that runs its full timeout still answers before the read
	// deadline (ReplicaWaitLimit).
	ReplicaWaitMargin = 100 * time.Millisecond
)

// ErrReplicaWait is matched by the error of a program call whose
// ReplicaWait is out of bounds (nothing was sent).
var ErrReplicaWait = errors.New("programs: replica wait out of bounds")

// ReplicaWait asks a program call to be followed, in one pipeline on the
// same connection, by WAIT Acks Timeout: Redis then answers how many
// replicas acknowledged every write that connection made, the program's
// included. The command guard admits that WAIT only for this pipeline.
type ReplicaWait struct {
	// Acks is the number of replicas to wait for, 1..MaxReplicaAcks.
	Acks int
	// Timeout bounds the wait: whole milliseconds, 1ms..MaxReplicaWait,
	// and within ReplicaWaitLimit.
	Timeout time.Duration
}

// Replicas is what the WAIT after a program answered.
type Replicas struct {
	// Wanted is the ReplicaWait's Acks.
	Wanted int
	// Reached is how many replicas acknowledged within the timeout (it can
	// exceed Wanted: WAIT counts every replica that has caught up).
	Reached int
	// Refused is the error reply WAIT answered instead of a count (NOPERM:
	// the script lane's ACL user lacks +wait; ERR from a server that
	// refuses WAIT). Nothing was counted: OK is false, and the caller
	// fails closed as for too few replicas.
	Refused error
}

// OK reports whether the wanted acknowledgements were reached.
func (r Replicas) OK() bool { return r.Refused == nil && r.Wanted > 0 && r.Reached >= r.Wanted }

// WaitLostError is the error of a replicated call whose program answered
// with an applied status but whose WAIT did not answer (a lost reply, a
// read timeout, a reset connection): the program's effect is on the
// primary and its replication is unknown. It is INDETERMINATE whatever the
// WAIT's own error class: the call as a whole is not settled. (A WAIT
// answered by an error reply is Replicas.Refused instead: the connection
// is fine and the answer is known.)
type WaitLostError struct {
	// Cause is the WAIT's error.
	Cause error
}

func (e *WaitLostError) Error() string {
	return "the program applied and its WAIT answered no replica count: " + e.Cause.Error()
}

// Unwrap returns the WAIT's error.
func (e *WaitLostError) Unwrap() error { return e.Cause }

// CertaintyOutcome is INDETERMINATE (certainty.Outcomer).
func (e *WaitLostError) CertaintyOutcome() certainty.Outcome { return certainty.Indeterminate }

// ReplicaWaitLimit is the longest ReplicaWait timeout this executor can
// act on: the script lane's command (read) timeout minus
// ReplicaWaitMargin, at most MaxReplicaWait. A WAIT longer than that
// would be cut by the read deadline and every slow acknowledgement would
// look like a lost reply. 0 when the lane has no usable read timeout.
func (e *Executor) ReplicaWaitLimit() time.Duration {
	var read time.Duration
	switch c := e.client.(type) {
	case *redis.Client:
		read = c.Options().ReadTimeout
	case *redis.ClusterClient:
		read = c.Options().ReadTimeout
	}
	limit := min(read-ReplicaWaitMargin, MaxReplicaWait)
	if limit < time.Millisecond {
		return 0
	}
	return limit
}

// check validates w against the hard bounds and the lane.
func (w ReplicaWait) check(limit time.Duration) error {
	switch {
	case w.Acks < 1 || w.Acks > MaxReplicaAcks:
		return fmt.Errorf("%w: acks %d not within 1..%d", ErrReplicaWait, w.Acks, MaxReplicaAcks)
	case w.Timeout < time.Millisecond || w.Timeout%time.Millisecond != 0 || w.Timeout > MaxReplicaWait:
		return fmt.Errorf("%w: timeout %s not whole milliseconds within 1ms..%s", ErrReplicaWait, w.Timeout, MaxReplicaWait)
	case w.Timeout > limit:
		return fmt.Errorf("%w: timeout %s above the script lane's limit %s (its command timeout minus %s)",
			ErrReplicaWait, w.Timeout, limit, ReplicaWaitMargin)
	}
	return nil
}

// CheckReplicaWait validates w for this executor (the bounds and ReplicaWaitLimit).
func (e *Executor) CheckReplicaWait(w ReplicaWait) error { return w.check(e.ReplicaWaitLimit()) }

// runReplicated is run followed by WAIT on the same connection: one
// pipeline on the primary serving the program's first key (Cluster:
// ClusterClient.MasterForKey; standalone and Sentinel: the lane client,
// whose pipelines use one connection to the primary). Its context carries
// the replica-wait grant the guard checks, bounded by w. The program's
// reply is decoded as run does; waitErr is the WAIT's own error (nil when
// it answered), n its count.
func (e *Executor) runReplicated(ctx context.Context, id string, ks []keys.Key, w ReplicaWait, args ...any) (r reply, n int64, waitErr error, err error) {
	if err := w.check(e.ReplicaWaitLimit()); err != nil {
		return reply{}, 0, nil, &Error{Program: id, Err: err}
	}
	p, ok := e.cat.Program(id)
	if !ok {
		return reply{}, 0, nil, &CompatibilityError{Program: id, Reason: "program not in catalog"}
	}
	wire := make([]string, len(ks))
	for i, k := range ks {
		if k.IsZero() {
			return reply{}, 0, nil, &Error{Program: id, Err: ErrZeroKey}
		}
		wire[i] = k.Redis()
	}
	var target redis.Cmdable = e.client
	cc, cluster := e.client.(*redis.ClusterClient)
	if cluster {
		node, err := cc.MasterForKey(ctx, wire[0])
		if err != nil {
			return reply{}, 0, nil, &Error{Program: id, Err: err}
		}
		target = node
	}
	gctx := replwait.With(ctx, replwait.Grant{Acks: w.Acks, Timeout: w.Timeout})
	v, n, waitErr, err := e.pipelineWait(gctx, target, p, wire, w, args)
	if err != nil && isNoScript(err) && e.mode != policy.ProgramsFunctionsProvisioned {
		// The exact NOSCRIPT reply proves the program did not run; load it
		// where it runs and send the pipeline once more.
		loader := scriptLoader(e.client)
		if cluster {
			loader = target.(*redis.Client)
		}
		if lerr := loadOn(gctx, loader, p); lerr != nil {
			return reply{}, 0, nil, &Error{Program: id, Err: lerr}
		}
		v, n, waitErr, err = e.pipelineWait(gctx, target, p, wire, w, args)
	}
	if err != nil {
		if cluster && isRedirect(err) {
			// The node answered "not here" (nothing ran): a stale slot map.
			cc.ReloadState(ctx)
		}
		return reply{}, 0, nil, &Error{Program: id, Err: err}
	}
	r, err = decodeReply(&e.cat.manifest, &p.spec, v)
	return r, n, waitErr, err
}

// pipelineWait sends the program and WAIT in one pipeline on target.
func (e *Executor) pipelineWait(ctx context.Context, target redis.Cmdable, p Program, wire []string, w ReplicaWait, args []any) (any, int64, error, error) {
	pipe := target.Pipeline()
	var prog *redis.Cmd
	switch {
	case e.mode == policy.ProgramsFunctionsProvisioned && p.spec.ReadOnly != nil && *p.spec.ReadOnly:
		prog = pipe.FCallRO(ctx, p.spec.Function, wire, args...)
	case e.mode == policy.ProgramsFunctionsProvisioned:
		prog = pipe.FCall(ctx, p.spec.Function, wire, args...)
	default:
		prog = pipe.EvalSha(ctx, p.spec.SHA1, wire, args...)
	}
	wait := redis.NewIntCmd(ctx, "wait", w.Acks, w.Timeout.Milliseconds())
	_ = pipe.Process(ctx, wait)
	_, _ = pipe.Exec(ctx) // each command carries its own outcome
	v, err := prog.Result()
	if err != nil {
		return nil, 0, nil, err
	}
	n, werr := wait.Result()
	return v, n, werr, nil
}

func loadOn(ctx context.Context, l scriptLoader, p Program) error {
	sha, err := l.ScriptLoad(ctx, p.source).Result()
	if err != nil {
		return err
	}
	if sha != p.spec.SHA1 {
		return fmt.Errorf("%w: got %q, manifest %q", ErrSHAMismatch, sha, p.spec.SHA1)
	}
	return nil
}

func isRedirect(err error) bool {
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		return false
	}
	code := certainty.ServerCode(rerr.Error())
	return code == "MOVED" || code == "ASK"
}

// replicas settles a replicated call's WAIT for a program status: applied
// statuses need the count (a lost WAIT makes the call INDETERMINATE);
// other statuses wrote nothing the caller relies on, so the WAIT does not
// matter.
func replicas(id string, applied bool, w ReplicaWait, n int64, waitErr error) (Replicas, error) {
	if !applied {
		return Replicas{Wanted: w.Acks}, nil
	}
	var rerr redis.Error
	if waitErr != nil && errors.As(waitErr, &rerr) {
		return Replicas{Wanted: w.Acks, Refused: waitErr}, nil
	}
	if waitErr != nil {
		return Replicas{}, &Error{Program: id, Err: &WaitLostError{Cause: waitErr}}
	}
	if n < 0 || n > 1<<20 {
		return Replicas{}, &CompatibilityError{Program: id, Reason: "WAIT answered " + strconv.FormatInt(n, 10)}
	}
	return Replicas{Wanted: w.Acks, Reached: int(n)}, nil
}

// FencedLeaseAcquireReplicated is FencedLeaseAcquire followed by WAIT on
// the same connection. On ACQUIRED and REPLAYED_SAME_OPERATION it reports
// how many replicas acknowledged the connection's writes (on a replay the
// program wrote nothing, so the count covers the connection's last write,
// not necessarily the original grant's; docs/replication.md); a WAIT that
// did not answer is a *WaitLostError (INDETERMINATE). On every other
// status Replicas.Reached is 0 and means nothing.
func (e *Executor) FencedLeaseAcquireReplicated(ctx context.Context, owner, counter keys.Key, req FencedLeaseAcquireRequest, w ReplicaWait) (FencedAcquireResult, Replicas, error) {
	const id = "fenced-lease-acquire-v1"
	if err := sameSlot(id, owner, counter); err != nil {
		return FencedAcquireResult{}, Replicas{}, err
	}
	reg := req.Registration
	r, n, waitErr, err := e.runReplicated(ctx, id, []keys.Key{owner, counter}, w, strconv.FormatInt(reg.Epoch, 10), reg.Digest,
		req.Attempt.Owner, millis(req.TTL), req.Attempt.OperationID, strconv.FormatInt(req.HardFailThreshold, 10))
	if err != nil {
		return FencedAcquireResult{}, Replicas{}, err
	}
	res, err := fencedAcquireResult(id, &r, req)
	if err != nil {
		return FencedAcquireResult{}, Replicas{}, err
	}
	applied := res.Status == FencedAcquired || res.Status == FencedReplayedSameOperation
	reps, err := replicas(id, applied, w, n, waitErr)
	if err != nil {
		return FencedAcquireResult{}, Replicas{}, err
	}
	return res, reps, nil
}

// FenceCounterProvisionReplicated is FenceCounterProvision followed by
// WAIT on the same connection: a counter is marked usable only once the
// wanted replicas hold it. On PROVISIONED and ALREADY_SAME it reports the
// count (on ALREADY_SAME nothing was written, as for a replayed acquire);
// a WAIT that did not answer is a *WaitLostError (INDETERMINATE).
func (e *Executor) FenceCounterProvisionReplicated(ctx context.Context, counter keys.Key, reg FenceRegistration, highWatermark int64, w ReplicaWait) (FenceProvisionResult, Replicas, error) {
	const id = "fenced-counter-provision-v1"
	r, n, waitErr, err := e.runReplicated(ctx, id, []keys.Key{counter}, w, strconv.FormatInt(reg.Epoch, 10), reg.Digest,
		strconv.FormatInt(highWatermark, 10))
	if err != nil {
		return FenceProvisionResult{}, Replicas{}, err
	}
	res, err := fenceProvisionResult(id, &r, reg, highWatermark)
	if err != nil {
		return FenceProvisionResult{}, Replicas{}, err
	}
	applied := res.Status == FenceProvisioned || res.Status == FenceAlreadySame
	reps, err := replicas(id, applied, w, n, waitErr)
	if err != nil {
		return FenceProvisionResult{}, Replicas{}, err
	}
	return res, reps, nil
}

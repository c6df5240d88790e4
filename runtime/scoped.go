package runtime

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/guard"
	"github.com/caphost/caphost/runtime/internal/natbatch"
	"github.com/caphost/caphost/runtime/keys"
)

// MaxScopedReadBytes bounds the maxBytes of ReadScoped and ReadMember:
// 1 MiB, the catalog's value cap (programs.MaxCacheValueBytes).
const MaxScopedReadBytes = 1 << 20

var (
	// ErrWrongType is matched (errors.Is) by a ReadScoped or ReadMember
	// error whose anchor or member holds another Redis type than a string.
	// The server answered: the error's certainty is REJECTED, never an
	// unavailability, and the key is not absent either (the cache treats
	// it as a corrupt entry).
	ErrWrongType = errors.New("redis key holds another type than a string")
	// ErrCrossSlot is matched by a ReadScoped error whose anchor and member
	// are in different Cluster slots; nothing was sent (REJECTED), on
	// standalone as well, so a key layout bug shows before a Cluster does.
	ErrCrossSlot error = rejectedError("anchor and member are in different hash slots")

	errScopedMaxBytes  = certainty.Wrap("read-scoped", rejectedError("maxBytes must be within 1..1048576"), false)
	errScopedCrossSlot = certainty.Wrap("read-scoped", ErrCrossSlot, false)
	errMemberMaxBytes  = certainty.Wrap("read-member", rejectedError("maxBytes must be within 1..1048576"), false)
)

// ScopedRead is what ReadScoped saw (ReadMember: the member alone): an
// anchor (a cache shard's generation) and one member built under a scope
// (an entry under the generation the caller last saw).
type ScopedRead struct {
	// Anchor is the anchor's value; nil when absent (AnchorFound false).
	Anchor []byte
	// AnchorFound reports that the anchor exists.
	AnchorFound bool
	// Length is the member's length (0 when absent).
	Length int64
	// Found reports that the member exists. An empty string reads as
	// absent: nothing caphost writes there is empty (cache-put-v2 refuses
	// an empty value).
	Found bool
	// Value is what was read of the member: all of it when Length <=
	// maxBytes; when it is longer (too large), its first maxBytes+1 bytes
	// and nothing more — enough to recognise or observe it, never the
	// whole value. Nil when absent. The slice is the caller's.
	Value []byte
}

// ReadScoped reads, in one pipeline on the regular lane, the anchor's value
// (GET) and at most maxBytes+1 bytes of the member (GETRANGE 0 maxBytes), so
// the reply is bounded by construction: a member that answers maxBytes+1
// bytes is longer than the bound, and only then a second round trip asks
// for its exact length (STRLEN) — never for its bytes.
//
// maxBytes is 1..MaxScopedReadBytes, and maxBytes+1 must fit the lane's
// reply budget (budgets.max-reply-bytes, 1 MiB by default): otherwise the
// guard refuses the GETRANGE, and with it the pipeline, before anything is
// sent (REJECTED). anchor and member must share a slot (ErrCrossSlot, before
// sending). A non-string anchor or member is an error matching ErrWrongType;
// every other failure is a *certainty.Error, as in ops.go.
//
// The commands are not atomic (a pipeline, not MULTI): another client's
// write may run between them. The result is still a linearizable read for the
// cache's protocol because members are scoped by the anchor: an entry key
// is built under a generation, and every write to it (cache-put-v2) checks
// atomically that the anchor still holds that generation. A member therefore
// changes only while the anchor equals its scope; once the anchor moves,
// no write reaches the old scope's members again (generations are random
// and never return), and only expiry or eviction can still remove them. So
// when the anchor read here equals the scope, either it had not moved by the
// GETRANGE (the pair read is the store's state at that instant) or it moved in
// between and the member was frozen from that moment (the pair is the state
// just before the move), or the frozen member has since expired, which reads
// as a miss whose fill cache-put-v2 refuses as GENERATION_MOVED. When the
// anchor differs from the scope, the member belongs to a dead generation and
// the caller discards it. The GETRANGE decides the member: its bytes are the
// value, an empty reply absence; the follow-up STRLEN of an oversized member
// only sizes it (rewritten in between, it reports at least maxBytes+1).
//
// Why two plain commands and not one catalog read program: the pipeline
// is already one round trip, and a script costs the server some twenty
// times more. Measured on redis-server 7.0.15 (redis-benchmark, 8
// clients, INFO commandstats): GET 0.10 µs and GETRANGE of a 1.1 KB value
// 0.11 µs per call, an EVALSHA doing GET + compare + GETRANGE + bounds
// 4.14 µs, at 29 k/s where GET alone ran 53 k/s. The client's share
// of ReadScoped is the write and read syscalls, which one command would
// not save.
func (d *Deployment) ReadScoped(ctx context.Context, anchor, member keys.Key, maxBytes int) (ScopedRead, error) {
	return d.readScoped(ctx, nil, anchor, member, maxBytes)
}

// ReadMember reads a member as ReadScoped does, bounded the same way, but
// without its anchor: one GETRANGE (and only for an oversized member a
// STRLEN). It is for a caller that read the anchor with ReadScoped a
// moment ago and has a reason to trust it still (the cache trusts a shard
// generation while invalidation hints would tell it of a move); the
// pipeline's GET is the share of ReadScoped it saves. Anchor and
// AnchorFound are left zero. Errors are as ReadScoped's.
func (d *Deployment) ReadMember(ctx context.Context, member keys.Key, maxBytes int) (ScopedRead, error) {
	return d.readMember(ctx, nil, member, maxBytes)
}

// ScopedReader is ReadScoped and ReadMember with natural batching: reads
// that arrive while maxFlights reads of this ScopedReader are in flight
// leave together as one pipeline when one completes, at most maxBatch
// reads in it. Nothing waits for a timer or for more reads, so a lone
// reader's latency is that of the unbatched read; under load the client
// and the server pay one write and one read syscall per batch instead of
// per read (what a cache hit mostly costs the client). A read whose
// context ends while it is queued is never sent; once its batch is taken,
// it returns at once and the batch completes for the others.
//
// Each read keeps its own result and error. The guard refuses a pipeline
// whole when one command is refused, so a batch refused before sending is
// sent again read by read: a read is only ever refused for its own
// commands. A ScopedReader is safe for concurrent use.
type ScopedReader struct {
	d *Deployment
	q *natbatch.Queue[scopedCall]
}

// NewScopedReader returns a ScopedReader on d's regular lane with at most
// maxFlights pipelines in flight before reads queue and at most maxBatch
// reads per pipeline (both at least 1).
func (d *Deployment) NewScopedReader(maxFlights, maxBatch int) *ScopedReader {
	return &ScopedReader{d: d, q: natbatch.New(maxFlights, maxBatch, d.sendRead, d.sendReads)}
}

// ReadScoped is Deployment.ReadScoped, batched.
func (r *ScopedReader) ReadScoped(ctx context.Context, anchor, member keys.Key, maxBytes int) (ScopedRead, error) {
	return r.d.readScoped(ctx, r.q, anchor, member, maxBytes)
}

// ReadMember is Deployment.ReadMember, batched.
func (r *ScopedReader) ReadMember(ctx context.Context, member keys.Key, maxBytes int) (ScopedRead, error) {
	return r.d.readMember(ctx, r.q, member, maxBytes)
}

// scopedCall is one read: the anchor's GET (nil for ReadMember) and the
// member's GETRANGE.
type scopedCall struct{ gen, head *redis.StringCmd }

// readScoped is ReadScoped through q (nil: sent at once, alone).
func (d *Deployment) readScoped(ctx context.Context, q *natbatch.Queue[scopedCall], anchor, member keys.Key, maxBytes int) (ScopedRead, error) {
	switch {
	case anchor.IsZero() || member.IsZero():
		return ScopedRead{}, errZeroKey
	case anchor.Slot() != member.Slot():
		return ScopedRead{}, errScopedCrossSlot
	case maxBytes < 1 || maxBytes > MaxScopedReadBytes:
		return ScopedRead{}, errScopedMaxBytes
	}
	c := scopedCall{gen: redis.NewStringCmd(ctx, "get", anchor.Redis()), head: getRange(ctx, member, maxBytes)}
	if err := d.send(ctx, q, "read-scoped", c); err != nil {
		return ScopedRead{}, err
	}
	r, err := scopedResult("read-scoped", c.gen, c.head, maxBytes)
	if err != nil || len(r.Value) <= maxBytes {
		return r, err
	}
	return d.sizeMember(ctx, "read-scoped", member, r)
}

// readMember is ReadMember through q (nil: sent at once).
func (d *Deployment) readMember(ctx context.Context, q *natbatch.Queue[scopedCall], member keys.Key, maxBytes int) (ScopedRead, error) {
	switch {
	case member.IsZero():
		return ScopedRead{}, errZeroKey
	case maxBytes < 1 || maxBytes > MaxScopedReadBytes:
		return ScopedRead{}, errMemberMaxBytes
	}
	c := scopedCall{head: getRange(ctx, member, maxBytes)}
	if err := d.send(ctx, q, "read-member", c); err != nil {
		return ScopedRead{}, err
	}
	r, err := scopedResult("read-member", nil, c.head, maxBytes)
	if err != nil || len(r.Value) <= maxBytes {
		return r, err
	}
	return d.sizeMember(ctx, "read-member", member, r)
}

// getRange is GETRANGE member 0 maxBytes: at most maxBytes+1 bytes.
func getRange(ctx context.Context, member keys.Key, maxBytes int) *redis.StringCmd {
	return redis.NewStringCmd(ctx, "getrange", member.Redis(), 0, int64(maxBytes))
}

// send sends c at once (q nil) or through q. Every command carries its own
// error (a refusal or a transport failure is set on each), which
// scopedResult reads; the error returned here is only that of a read whose
// context ended before its result came.
func (d *Deployment) send(ctx context.Context, q *natbatch.Queue[scopedCall], op string, c scopedCall) error {
	if q == nil {
		d.sendRead(ctx, c)
		return nil
	}
	switch q.Do(ctx, c) {
	case natbatch.Abandoned:
		// Never sent, like a call that gave up waiting for a lane slot.
		return batchCtxError(ctx, op, certainty.OverloadedBeforeSend)
	case natbatch.Left:
		return batchCtxError(ctx, op, certainty.Indeterminate)
	}
	return nil
}

// batchCtxError is the error of a read whose context ended while it was
// queued (OVERLOADED_BEFORE_SEND) or after its batch was taken.
func batchCtxError(ctx context.Context, op string, o certainty.Outcome) error {
	code := "batch-canceled"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		code = "batch-deadline"
	}
	return &certainty.Error{Outcome: o, Op: op, Code: code, Cause: ctx.Err()}
}

// sendRead sends one read: its GETRANGE alone, or with the GET in one
// pipeline.
func (d *Deployment) sendRead(ctx context.Context, c scopedCall) {
	if c.gen == nil {
		_ = d.regular.client.Process(ctx, c.head)
		return
	}
	p := d.regular.client.Pipeline()
	_ = p.BatchProcess(ctx, c.gen, c.head)
	_, _ = p.Exec(ctx)
}

// sendReads sends reads as one pipeline; when the guard refused all of it
// before sending (some read's command was refused), read by read.
func (d *Deployment) sendReads(ctx context.Context, cs []scopedCall) {
	if len(cs) == 1 {
		d.sendRead(ctx, cs[0])
		return
	}
	cmds := make([]redis.Cmder, 0, 2*len(cs))
	for _, c := range cs {
		if c.gen != nil {
			cmds = append(cmds, c.gen)
		}
		cmds = append(cmds, c.head)
	}
	p := d.regular.client.Pipeline()
	_ = p.BatchProcess(ctx, cmds...)
	_, _ = p.Exec(ctx)
	if !guard.RefusedWhole(cmds) {
		return
	}
	for _, c := range cs {
		for _, cmd := range [...]*redis.StringCmd{c.gen, c.head} {
			if cmd != nil {
				cmd.SetErr(nil)
			}
		}
		d.sendRead(ctx, c)
	}
}

// sizeMember asks for the exact length of a member whose read answered
// more than maxBytes (its head): never for its bytes.
func (d *Deployment) sizeMember(ctx context.Context, op string, member keys.Key, r ScopedRead) (ScopedRead, error) {
	n, err := d.regular.client.StrLen(ctx, member.Redis()).Result()
	switch {
	case wrongType(err):
		return ScopedRead{}, wrongTypeError(op, "member", err)
	case err != nil:
		return ScopedRead{}, certainty.Wrap(op, err, false)
	}
	r.Length = max(n, int64(len(r.Value)))
	return r, nil
}

// scopedResult turns the replies of a read (the anchor's, nil when none was
// asked for, and the member's) into a ScopedRead. A failure other than a
// wrong type wins, so a WRONGTYPE on one command is never mistaken for the
// whole read having been answered.
func scopedResult(op string, gen, head *redis.StringCmd, maxBytes int) (ScopedRead, error) {
	for _, cmd := range [...]*redis.StringCmd{gen, head} {
		if cmd == nil {
			continue
		}
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) && !wrongType(err) {
			return ScopedRead{}, certainty.Wrap(op, err, false)
		}
	}
	switch {
	case gen != nil && wrongType(gen.Err()):
		return ScopedRead{}, wrongTypeError(op, "anchor", gen.Err())
	case wrongType(head.Err()):
		return ScopedRead{}, wrongTypeError(op, "member", head.Err())
	}
	// Bytes hands over the reply's own buffer, which go-redis allocated for
	// this command alone and nothing else holds once the command is
	// dropped: the caller owns it without the copy []byte(Val()) makes (a
	// kilobyte-sized allocation per cache hit). It is nil for an empty
	// reply; an empty anchor still reads as found and non-nil.
	var r ScopedRead
	if gen != nil && gen.Err() == nil {
		r.Anchor, _ = gen.Bytes()
		if r.Anchor == nil {
			r.Anchor = []byte{}
		}
		r.AnchorFound = true
	}
	v, _ := head.Bytes()
	switch {
	case len(v) == 0:
		// Absent.
	case len(v) <= maxBytes+1:
		// All of it, or (maxBytes+1 bytes) the head of a longer member,
		// whose exact length the caller asks for.
		r.Found, r.Length, r.Value = true, int64(len(v)), v
	default:
		// GETRANGE 0 maxBytes cannot return more; a server or proxy that
		// does is not trusted with the rest of the read either.
		return ScopedRead{}, &certainty.Error{Outcome: certainty.Rejected, Op: op, Code: "reply",
			Cause: fmt.Errorf("GETRANGE 0 %d answered %d bytes", maxBytes, len(v))}
	}
	return r, nil
}

// wrongType reports a WRONGTYPE server reply (wrapped or not).
func wrongType(err error) bool {
	return err != nil && certainty.Reason(err, false) == "WRONGTYPE"
}

// wrongTypeError keeps the server's answer (REJECTED, code WRONGTYPE) and
// adds ErrWrongType for errors.Is.
func wrongTypeError(op, which string, err error) error {
	return &certainty.Error{Outcome: certainty.Rejected, Op: op, Code: "WRONGTYPE",
		Cause: fmt.Errorf("%w: the %s: %w", ErrWrongType, which, err)}
}

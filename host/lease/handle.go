package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/caphost/caphost/host/internal/hold"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
	"github.com/caphost/caphost/runtime/programs"
)

// Handle is a held lease. Its state is ACTIVE until Redis says otherwise,
// its validity runs out, a reply is lost, or it is released; then it never
// becomes ACTIVE again (the state machine is host/internal/hold,
// shared with fenced leases). It is safe for concurrent use.
type Handle struct {
	c          *Client
	key        keys.Key
	purpose    string // the metric label
	attempt    Attempt
	ttl        time.Duration
	acquiredAt time.Time
	st         *hold.Hold
}

func (c *Client) handle(key keys.Key, r Request, sent time.Time, serverTTL time.Duration) *Handle {
	h := &Handle{c: c, key: key, purpose: c.m.purpose(r.Purpose), attempt: r.Attempt, ttl: r.TTL, acquiredAt: sent}
	// A replay with less left than the drift budget is LOST at once.
	h.st = hold.New(c.now, c.drift, ErrValidityExpired, sent, serverTTL, func(s State, cause error) {
		if s != Released {
			c.m.lostLabel(h.purpose, s, cause)
		}
	})
	return h
}

// Attempt returns the attempt holding the lease.
func (h *Handle) Attempt() Attempt { return h.attempt }

// TTL is the lease's TTL (what every renew sets again).
func (h *Handle) TTL() time.Duration { return h.ttl }

// AcquiredAt is the local time just before the acquire that won was sent
// (telemetry: validity never uses wall-clock time).
func (h *Handle) AcquiredAt() time.Time { return h.acquiredAt }

// State returns the handle's state, moving it to LOST first if its
// validity has run out.
func (h *Handle) State() State { return h.st.State() }

// Cause says why the handle left ACTIVE (nil while ACTIVE or after a
// release): ErrLost, ErrValidityExpired or the runtime's error.
func (h *Handle) Cause() error { return h.st.Cause() }

// Done is closed when the handle leaves ACTIVE for any reason, including
// its validity running out (noticed by State, Remaining, Renew or a Hold
// watchdog's timer).
func (h *Handle) Done() <-chan struct{} { return h.st.Done() }

// Remaining is the validity left: the TTL from just before the last
// acquire or renew that applied, minus the time since on the monotonic
// clock and the drift budget. 0 when not ACTIVE.
func (h *Handle) Remaining() time.Duration { return h.st.Remaining() }

// UsableFor reports whether work of the given budget fits in the validity
// left. Work that does not fit should not start: release the lease.
func (h *Handle) UsableFor(work time.Duration) bool { return h.st.UsableFor(work) }

func (h *Handle) end(s State, cause error) { h.st.End(s, cause) }

// Renew sets the lease's TTL again, if the attempt still holds it: the
// program checks the owner and operation and extends by the handle's TTL,
// and the validity then counts from just before this send. Renew on a
// handle that is not ACTIVE (or whose validity ran out) sends nothing and
// fails with ErrNotActive. A lost reply makes the handle UNKNOWN: it is
// never resent, because the lease's fate is then unknowable locally.
func (h *Handle) Renew(ctx context.Context) (RenewKind, error) {
	if h.State() != Active {
		return 0, ErrNotActive
	}
	res, start, err := h.c.renewCall(ctx, h.key, h.purpose, h.attempt, h.ttl)
	switch {
	case err != nil:
		if errors.Is(err, ErrCorrupt) {
			h.end(Lost, ErrCorrupt)
		}
		return 0, err
	case res.Kind == RenewIndeterminate:
		h.end(Unknown, res.Cause)
	case res.Kind == RenewLost:
		h.end(Lost, ErrLost)
	case res.Kind == Renewed:
		// Two renews may race: the later send start wins.
		h.st.Extend(start, h.ttl)
	}
	return res.Kind, nil
}

// renewCall sends lease-renew-v1 once and counts its outcome under the
// purpose label; start is the local time just before the send. A lost
// reply is never resent.
func (c *Client) renewCall(ctx context.Context, key keys.Key, label string, a Attempt, ttl time.Duration) (RenewResult, time.Time, error) {
	start := c.now()
	res, err := c.renewOnce(ctx, key, a, ttl)
	c.m.renewed(label, res.Kind, err)
	return res, start, err
}

func (c *Client) renewOnce(ctx context.Context, key keys.Key, a Attempt, ttl time.Duration) (RenewResult, error) {
	res, err := c.exec.LeaseRenew(ctx, key, program(a), ttl)
	if err != nil {
		o := certainty.Classify(err, true)
		if o == certainty.Indeterminate {
			return RenewResult{Kind: RenewIndeterminate, Certainty: o, Cause: err}, nil
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return RenewResult{}, ctx.Err()
		}
		return RenewResult{Kind: RenewUnavailable, Certainty: o, Cause: err, Overloaded: o == certainty.OverloadedBeforeSend}, nil
	}
	out := RenewResult{Certainty: res.Outcome()}
	switch res.Status {
	case programs.LeaseRenewed:
		out.Kind = Renewed
	case programs.LeaseRenewAbsent, programs.LeaseRenewNotOwner:
		out.Kind = RenewLost
	case programs.LeaseRenewWrongType:
		return RenewResult{}, ErrCorrupt
	default:
		return RenewResult{}, fmt.Errorf("lease: lease-renew-v1 answered %s to a validated request", res.Status)
	}
	return out, nil
}

// Release deletes the lease if the attempt still holds it (never a blind
// DEL: another owner's lease stays). It sends from ACTIVE, UNKNOWN and LOST
// (a lease lost by the local estimate may still be ours on the server, and
// freeing it early helps the next holder); a released handle answers
// ReleaseAlreadyReleased without sending. A lost reply is repeated once
// (release is safe to repeat: ABSENT then means it applied).
func (h *Handle) Release(ctx context.Context) (ReleaseKind, error) {
	if h.State() == Released {
		return ReleaseAlreadyReleased, nil
	}
	res, err := h.c.releaseCall(ctx, h.key, h.purpose, h.attempt)
	if err != nil {
		return 0, err
	}
	switch res.Kind {
	case ReleaseIndeterminate:
		h.end(Unknown, res.Cause)
	case ReleaseDone, ReleaseAlreadyAbsent:
		h.end(Released, nil)
	case ReleaseNotOwner:
		h.end(Lost, ErrLost)
	}
	return res.Kind, nil
}

// releaseCall sends lease-release-v3, repeating it once after a lost reply
// (release is safe to repeat: ABSENT then means it applied), and counts its
// outcome under the purpose label.
func (c *Client) releaseCall(ctx context.Context, key keys.Key, label string, a Attempt) (ReleaseResult, error) {
	res, err := c.releaseTwice(ctx, key, a)
	c.m.released(label, res.Kind, err)
	return res, err
}

func (c *Client) releaseTwice(ctx context.Context, key keys.Key, a Attempt) (ReleaseResult, error) {
	var (
		res  programs.LeaseReleaseResult
		err  error
		lost error // the first send's, when its reply was lost
	)
	for try := 0; try < 2; try++ {
		res, err = c.batch.LeaseReleaseV3(ctx, key, program(a))
		if err == nil || certainty.Classify(err, true) != certainty.Indeterminate || ctx.Err() != nil {
			break
		}
		lost = err
		if try == 0 && c.beforeReleaseRepeat != nil {
			c.beforeReleaseRepeat()
		}
	}
	// A repeat that fails before it is sent does not undo the first
	// send's uncertainty: the release may have applied.
	if err != nil && lost != nil && !(ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		err = lost
	}
	if err != nil {
		o := certainty.Classify(err, true)
		if o == certainty.Indeterminate {
			return ReleaseResult{Kind: ReleaseIndeterminate, Certainty: o, Cause: err}, nil
		}
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return ReleaseResult{}, ctx.Err()
		}
		return ReleaseResult{Kind: ReleaseUnavailable, Certainty: o, Cause: err, Overloaded: o == certainty.OverloadedBeforeSend}, nil
	}
	out := ReleaseResult{Certainty: res.Outcome()}
	switch res.Status {
	case programs.LeaseReleased:
		out.Kind = ReleaseDone
	case programs.LeaseReleaseAbsent:
		out.Kind = ReleaseAlreadyAbsent
	case programs.LeaseReleaseNotOwner:
		out.Kind = ReleaseNotOwner
	case programs.LeaseReleaseWrongType:
		return ReleaseResult{}, ErrCorrupt
	default:
		return ReleaseResult{}, fmt.Errorf("lease: lease-release-v3 answered %s to a validated request", res.Status)
	}
	return out, nil
}

package cache

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/caphost/caphost/host/cache/hint"
	"github.com/caphost/caphost/host/cache/l1"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/keys"
)

// hints is the L1 invalidation hint channel of one Cache: every write and
// invalidation of an L1 region publishes an authenticated hint, and every
// host drops the named L1 entry (or flushes the region) when it receives
// one. Pub/Sub is best effort: while the subscription is down no L1 is
// used at all, and every L1 is flushed when it goes down and again when it
// is back, so a hint lost meanwhile cannot leave a stale copy behind.
//
// A region invalidation also ends every host's generation trust for the
// region (generations), and the subscription's changes of state end it
// for every region: trust is only ever used while the hints are up.
//
// The write that ends a refresh lease sends a key hint too, in any region:
// receivers wake their callers waiting for that refresh (waiters), which
// otherwise find the value at their next poll.
type hints struct {
	c       *Cache
	codec   *hint.Codec
	channel keys.Key
	sub     *runtime.Subscription
	up      atomic.Bool
}

// hintChannelSpec is the one hint channel of a key namespace. Its kind
// ("channel") has a key group of its own, so no region's keys can collide
// with it.
func hintChannelSpec() keys.Spec {
	return keys.Spec{Capability: keys.CapCache, Region: "invalidation", KeyVersion: 1, Kind: "channel",
		Parts: [][]byte{[]byte("hints")}, Opaque: true}
}

// startHints subscribes to the hint channel.
func (c *Cache) startHints(ctx context.Context) error {
	ch, err := c.keys.Build(hintChannelSpec())
	if err != nil {
		return err
	}
	codec, err := hint.NewCodec(c.cfg.HintSecret.Reveal(), c.cfg.HintWindow, c.clock)
	if err != nil {
		return err
	}
	h := &hints{c: c, codec: codec, channel: ch}
	h.sub, err = c.dep.Subscribe(ctx, ch, runtime.SubscriptionHandler{Message: h.receive, State: h.state},
		runtime.SubscribeOptions{MaxMessageBytes: hint.MaxBytes})
	if err != nil {
		return err
	}
	c.hints = h
	return nil
}

// hintsUp reports whether L1 may be used: the hint subscription is
// confirmed.
func (c *Cache) hintsUp() bool { return c.hints != nil && c.hints.up.Load() }

func (h *hints) close() error { return h.sub.Close() }

// state follows the subscription: down stops L1 use and flushes it; up
// flushes again (fills made while hints could not arrive) and resumes.
func (h *hints) state(up bool) {
	if !up {
		h.up.Store(false)
		h.flushAll()
		// Counted once the flush is done: whoever sees the count may
		// rely on L1 being empty.
		h.c.m.hint("subscription_down")
		h.c.log.Warn("cache invalidation hints down: L1 flushed and bypassed until they are back")
		return
	}
	h.flushAll()
	h.up.Store(true)
	h.c.m.hint("subscription_up")
	h.c.log.Info("cache invalidation hints up: L1 in use")
}

// flushAll empties every L1 and ends every generation trust: across a
// change of the subscription's state, hints may have been lost.
func (h *hints) flushAll() {
	for _, r := range h.c.state.Load().regions {
		r.gens.distrust()
		if r.l1 != nil {
			r.l1.Flush()
		}
	}
}

// receive applies one hint. A hint that fails authentication, is outside
// the freshness window or is malformed is counted (with no region: what it
// names cannot be believed) and ignored.
func (h *hints) receive(payload []byte) {
	msg, err := h.codec.Open(payload)
	switch {
	case errors.Is(err, hint.ErrForged):
		h.c.m.hint("rejected_forged")
		return
	case errors.Is(err, hint.ErrStale):
		h.c.m.hint("rejected_stale")
		return
	case err != nil:
		h.c.m.hint("rejected_malformed")
		return
	}
	// Authenticated: the region it names is one a host of this deployment
	// serves, counted under its id only when this host serves it too.
	r, ok := h.c.state.Load().regions[msg.Region]
	switch {
	case msg.Sender == h.c.instance && ok:
		r.m.hint(hintIgnoredOwn)
		return
	case msg.Sender == h.c.instance:
		h.c.m.hint("ignored_own") // a region a swap removed since
		return
	case !ok:
		h.c.m.hint("ignored_unknown_region")
		return
	}
	r.m.hint(hintReceived)
	if msg.Kind == hint.KeyInvalidated && h.c.waiters.wake(waitKey{region: msg.Region, loc: msg.Location}) {
		r.m.lease("woken")
	}
	if msg.Kind == hint.RegionInvalidated {
		// Before the flush: a lookup after it must not read under a
		// generation trusted before the hint.
		r.gens.distrust()
		if r.l1 != nil {
			r.l1.Flush()
		}
		return
	}
	if r.l1 == nil {
		return
	}
	// A generation of another size than this package creates has no L1
	// entries to drop.
	if len(msg.Scope) == len(l1.Key{}.Generation) {
		k := l1.Key{Location: msg.Location}
		copy(k.Generation[:], msg.Scope)
		r.l1.Delete(k)
	}
}

// publishKey tells the other hosts to drop their L1 copy of ref. A failure
// is counted: the other hosts' copies then live at most the L1 age cap.
func (c *Cache) publishKey(r *region, ref entryRef) {
	c.publish(r, hint.Message{Kind: hint.KeyInvalidated, Location: ref.loc.Digest(), Scope: ref.gen})
}

// publishRegion tells the other hosts that the region's generations moved:
// they flush its L1 and end their generation trust. It is sent whatever
// this host's own policy for the region: another host's may use either.
func (c *Cache) publishRegion(r *region) {
	c.publish(r, hint.Message{Kind: hint.RegionInvalidated})
}

func (c *Cache) publish(r *region, m hint.Message) {
	if c.hints == nil {
		return
	}
	m.Region, m.Sender, m.IssuedAt = r.pol.ID, c.instance, c.clock()
	b, err := c.hints.codec.Seal(m)
	if err != nil {
		r.m.hint(hintSendFailed)
		return
	}
	// Detached from the caller: the write it reports has happened, and a
	// caller that gives up now must not keep the other hosts' copies alive.
	ctx, cancel := context.WithTimeout(context.Background(), hintSendTimeout)
	defer cancel()
	if _, err := c.dep.Publish(ctx, c.hints.channel, b); err != nil {
		r.m.hint(hintSendFailed)
		return
	}
	r.m.hint(hintSent)
}

// hintSendTimeout bounds one hint's publish.
const hintSendTimeout = time.Second

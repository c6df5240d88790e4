package cache

import (
	"sync"
	"sync/atomic"

	"github.com/caphost/caphost/runtime/keys"
)

// waiters lets a caller waiting for another caller's refresh (the
// contended side of the refresh lease) read the entry as soon as the lease
// holder has written it, rather than at its next poll. A holder's write on
// this host wakes the waiters here directly; one on another host arrives
// as that host's key hint (when hints are configured). A wake is only a
// prompt to read: one that is lost or spurious costs at most a poll
// interval or one read, never a wrong answer.
//
// It holds one entry per key being waited for, so its size is bounded by
// the callers that may wait (single-flight keys and sidecar requests).
type waiters struct {
	// n counts the keys in m, so that a write with no one waiting (the
	// common case) does not take the lock.
	n  atomic.Int64
	mu sync.Mutex
	m  map[waitKey]*waitSlot
}

// waitKey names an entry across hosts: the region id and the location
// digest, as a key hint carries them. The generation is left out: a
// waiter woken for another generation reads once and waits on.
type waitKey struct {
	region string
	loc    [32]byte
}

// waitSlot is closed by the first wake of its key; refs counts the
// waiters holding it, so the last one to leave unwoken removes it.
type waitSlot struct {
	ch   chan struct{}
	refs int
}

func waitKeyOf(r *region, loc keys.Location) waitKey {
	return waitKey{region: r.pol.ID, loc: loc.Digest()}
}

// watch registers a waiter for k. The caller must unwatch the slot.
func (w *waiters) watch(k waitKey) *waitSlot {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.watchLocked(k)
}

// unwatch ends one waiter's registration of s.
func (w *waiters) unwatch(k waitKey, s *waitSlot) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unwatchLocked(k, s)
}

// rewatch ends one waiter's registration of the woken slot s and registers
// it again under one lock, so that no wake of k can fall in between.
func (w *waiters) rewatch(k waitKey, s *waitSlot) *waitSlot {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unwatchLocked(k, s)
	return w.watchLocked(k)
}

func (w *waiters) watchLocked(k waitKey) *waitSlot {
	s, ok := w.m[k]
	if !ok {
		if w.m == nil {
			w.m = make(map[waitKey]*waitSlot)
		}
		s = &waitSlot{ch: make(chan struct{})}
		w.m[k] = s
		w.n.Add(1)
	}
	s.refs++
	return s
}

func (w *waiters) unwatchLocked(k waitKey, s *waitSlot) {
	s.refs--
	if s.refs == 0 && w.m[k] == s {
		delete(w.m, k)
		w.n.Add(-1)
	}
}

// wake prompts every waiter of k to read now and reports whether any was
// waiting.
func (w *waiters) wake(k waitKey) bool {
	if w.n.Load() == 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.m[k]
	if ok {
		close(s.ch)
		delete(w.m, k)
		w.n.Add(-1)
	}
	return ok
}

// refreshWatch is one caller's registration for the announcement of a
// refresh: taken before the claim that may find the lease taken, so that a
// holder's write landing before the caller starts waiting still wakes it.
// The zero of *refreshWatch (nil) is no registration.
type refreshWatch struct {
	w    *waiters
	k    waitKey
	slot *waitSlot
}

func (c *Cache) watchRefresh(r *region, loc keys.Location) *refreshWatch {
	k := waitKeyOf(r, loc)
	return &refreshWatch{w: &c.waiters, k: k, slot: c.waiters.watch(k)}
}

// renew replaces a woken slot with a fresh one, so that a wake during the
// read it prompted is kept.
func (rw *refreshWatch) renew() { rw.slot = rw.w.rewatch(rw.k, rw.slot) }

// end ends the registration; it may be called more than once, and on nil.
func (rw *refreshWatch) end() {
	if rw == nil || rw.slot == nil {
		return
	}
	rw.w.unwatch(rw.k, rw.slot)
	rw.slot = nil
}

// len reports the keys being waited for.
func (w *waiters) len() int { return int(w.n.Load()) }

// announceRefresh tells the callers waiting for the refresh of ref that it
// is written: those on this host directly, those on other hosts through a
// key hint (which also drops their L1 copy, if any, of what is now an
// older value).
func (c *Cache) announceRefresh(r *region, loc keys.Location, ref entryRef) {
	if c.waiters.wake(waitKeyOf(r, loc)) {
		r.m.lease("woken")
	}
	c.publishKey(r, ref)
}

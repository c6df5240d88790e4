// Package logsample owns the bound on log lines an event may produce when
// a client or a workload can make it happen at any rate: at most N lines
// per clock minute, while the event's metric counts every occurrence.
package logsample

import (
	"sync"
	"time"
)

// Sampler lets at most perMinute events through per clock minute of its
// clock. It is safe for concurrent use.
type Sampler struct {
	mu        sync.Mutex
	perMinute int
	now       func() time.Time
	minute    int64
	n         int
}

// New returns a Sampler of perMinute lines a minute (0 or less: none) on
// clock now (nil: time.Now).
func New(perMinute int, now func() time.Time) *Sampler {
	if now == nil {
		now = time.Now
	}
	return &Sampler{perMinute: perMinute, now: now}
}

// Take reports whether one more line may be logged this minute.
func (s *Sampler) Take() bool {
	if s.perMinute <= 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.now().Unix() / 60; m != s.minute {
		s.minute, s.n = m, 0
	}
	if s.n >= s.perMinute {
		return false
	}
	s.n++
	return true
}

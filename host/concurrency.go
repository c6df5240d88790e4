package host

import "github.com/caphost/caphost/host/ratelimit"

// Concurrency returns the concurrency-permit limiter of the rate-limit
// capability (§20.8: a separate port over the same policy set), or
// ErrCapabilityDisabled.
func (h *Host) Concurrency() (*ratelimit.ConcurrencyLimiter, error) {
	w := h.rate.Load()
	if w == nil {
		return nil, ErrCapabilityDisabled
	}
	return w.conc, nil
}

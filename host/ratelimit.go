package host

import "github.com/caphost/caphost/host/ratelimit"

// ratePorts is what the rate-limit capability's module exposes to the
// host's typed accessors.
type ratePorts interface {
	Limiter() *ratelimit.Limiter
	Selector() ratelimit.Selector
	ConcurrencyLimiter() *ratelimit.ConcurrencyLimiter
}

func (h *Host) ratePorts() (ratePorts, error) {
	if p, ok := h.active(ratelimit.CapabilityID).(ratePorts); ok {
		return p, nil
	}
	return nil, ErrCapabilityDisabled
}

// RateLimit returns the rate limiter and the selector the configuration
// wires (a rate-policy guest, else the configured routes), or
// ErrCapabilityDisabled.
func (h *Host) RateLimit() (*ratelimit.Limiter, ratelimit.Selector, error) {
	p, err := h.ratePorts()
	if err != nil {
		return nil, nil, err
	}
	return p.Limiter(), p.Selector(), nil
}

// Concurrency returns the concurrency-permit limiter of the rate-limit
// capability (a separate port over the same policy set), or
// ErrCapabilityDisabled.
func (h *Host) Concurrency() (*ratelimit.ConcurrencyLimiter, error) {
	p, err := h.ratePorts()
	if err != nil {
		return nil, err
	}
	return p.ConcurrencyLimiter(), nil
}

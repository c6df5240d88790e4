package host

import "github.com/caphost/caphost/host/idempotency"

// Idempotency returns the idempotency capability's executor, or
// ErrCapabilityDisabled.
func (h *Host) Idempotency() (*idempotency.Executor, error) {
	if p, ok := h.active(idempotency.CapabilityID).(interface{ Executor() *idempotency.Executor }); ok {
		return p.Executor(), nil
	}
	return nil, ErrCapabilityDisabled
}

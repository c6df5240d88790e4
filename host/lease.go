package host

import (
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/host/lease/fenced"
)

// Lease returns the lease capability's client, or ErrCapabilityDisabled.
func (h *Host) Lease() (*lease.Client, error) {
	if p, ok := h.active(lease.CapabilityID).(interface{ Client() *lease.Client }); ok {
		return p.Client(), nil
	}
	return nil, ErrCapabilityDisabled
}

// FencedLease returns the fenced-lease capability's client, or
// ErrCapabilityDisabled.
func (h *Host) FencedLease() (*fenced.Client, error) {
	if p, ok := h.active(fenced.CapabilityID).(interface{ Client() *fenced.Client }); ok {
		return p.Client(), nil
	}
	return nil, ErrCapabilityDisabled
}

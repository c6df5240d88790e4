package host

import "github.com/caphost/caphost/host/lease"

// Lease returns the lease capability's client, or ErrCapabilityDisabled.
func (h *Host) Lease() (*lease.Client, error) {
	if p, ok := h.active(lease.CapabilityID).(interface{ Client() *lease.Client }); ok {
		return p.Client(), nil
	}
	return nil, ErrCapabilityDisabled
}

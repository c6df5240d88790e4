package host

import "github.com/caphost/caphost/host/cache"

// Cache returns the cache capability, or ErrCapabilityDisabled.
func (h *Host) Cache() (*cache.Cache, error) {
	if p, ok := h.active(cache.CapabilityID).(interface{ Cache() *cache.Cache }); ok {
		return p.Cache(), nil
	}
	return nil, ErrCapabilityDisabled
}

package host

import "github.com/caphost/caphost/host/notify"

// Notify returns the notify capability's notifier, or
// ErrCapabilityDisabled.
func (h *Host) Notify() (*notify.Notifier, error) {
	if p, ok := h.active(notify.CapabilityID).(interface{ Notifier() *notify.Notifier }); ok {
		return p.Notifier(), nil
	}
	return nil, ErrCapabilityDisabled
}

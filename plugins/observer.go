package plugins

import (
	"time"

	"github.com/caphost/caphost/abi"
)

// CallStats describes one finished call.
type CallStats struct {
	Module   string
	Export   abi.Export
	Duration time.Duration
	// Class is "" when the guest answered (whatever its status).
	Class Class
	// Status is the guest's status code when Class is "".
	Status abi.Code
}

// Observer receives engine metrics. Implementations must be cheap and safe
// for concurrent use; every label they receive comes from a closed set or
// from operator-chosen module names, never from request data.
type Observer interface {
	// CallDone is called once per call.
	CallDone(s CallStats)
	// PoolChanged reports a module's live instances after a change.
	PoolChanged(module string, inUse, idle int)
	// InstanceStarted reports a new instance (pool growth or replacement).
	InstanceStarted(module string)
	// InstanceDiscarded reports an instance closed after a failure, on recycling or on Close.
	InstanceDiscarded(module string)
	// GuestEvent reports an allowlisted event counted by the guest.
	GuestEvent(module, event string)
	// LogDropped reports a guest log line dropped by rate limiting or the per-call bound.
	LogDropped(module string)
}

// NopObserver discards everything. Embed it to implement Observer partially.
type NopObserver struct{}

// CallDone implements Observer.
func (NopObserver) CallDone(CallStats) {}

// PoolChanged implements Observer.
func (NopObserver) PoolChanged(string, int, int) {}

// GuestEvent implements Observer.
func (NopObserver) GuestEvent(string, string) {}

// LogDropped implements Observer.
func (NopObserver) LogDropped(string) {}

// InstanceStarted implements Observer.
func (NopObserver) InstanceStarted(string) {}

// InstanceDiscarded implements Observer.
func (NopObserver) InstanceDiscarded(string) {}

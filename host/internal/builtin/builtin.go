// Package builtin is the host's registration list: every capability caphost
// implements, in the order the host provisions them (and closes them in
// reverse). Adding a capability means adding its package and one line here;
// host/config, host.New, the daemon's HTTP surface, readiness and
// `caphost capabilities` all read this list.
//
// What may change here: new lines, appended (the order is part of the
// behaviour: a capability provisioned later may rely on one provisioned
// earlier). What must not: registration anywhere else.
package builtin

import (
	"github.com/caphost/caphost/host/cache"
	"github.com/caphost/caphost/host/idempotency"
	"github.com/caphost/caphost/host/internal/module"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/host/lease/fenced"
	"github.com/caphost/caphost/host/notify"
	"github.com/caphost/caphost/host/ratelimit"
)

// Capabilities returns the registered capabilities, in provisioning order.
func Capabilities() []module.Info {
	return []module.Info{
		ratelimit.CapabilityInfo(),
		cache.CapabilityInfo(),
		lease.CapabilityInfo(),
		idempotency.CapabilityInfo(),
		fenced.CapabilityInfo(),
		notify.CapabilityInfo(),
	}
}

// Lookup returns the registered capability with id.
func Lookup(id string) (module.Info, bool) {
	for _, c := range Capabilities() {
		if c.ID == id {
			return c, true
		}
	}
	return module.Info{}, false
}

// IDs lists the registered capability ids, in provisioning order.
func IDs() []string {
	cs := Capabilities()
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ID
	}
	return out
}

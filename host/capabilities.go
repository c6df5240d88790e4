package host

import (
	"context"
	"net/http"
	"slices"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/health"
	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/plugins/conformance"
	"github.com/caphost/caphost/policy"
)

// Capabilities reports every capability this host implements, in
// registration order, with its actual state: disabled, or its descriptor,
// the readiness it claims and the readiness this deployment gives it, the
// guests plugged into it, and whether its backing role is serving (one
// readiness check, so this touches Redis like /readyz does).
func (h *Host) Capabilities(ctx context.Context) []capability.Status {
	var rep *health.Report
	if h.checker != nil {
		r := h.checker.Readiness(ctx)
		rep = &r
	}
	out := make([]capability.Status, 0, len(h.caps))
	for _, e := range h.caps {
		st := capability.Status{Capability: e.info.ID, Claimed: e.info.Readiness, Readiness: e.info.Readiness}
		if e.mod == nil || !e.prov {
			st.State = capability.StateDisabled
			out = append(out, st)
			continue
		}
		d := e.mod.Descriptor()
		st.Descriptor = &d
		st.Guests = e.mod.Guests()
		st.Downgrades = h.downgrades(d, st.Guests)
		st.Readiness = capability.EffectiveReadiness(d.Readiness, st.Downgrades)
		st.State, st.Reason = stateOf(d, rep)
		out = append(out, st)
	}
	return out
}

// downgrades lists what this deployment does to d's claim: a correctness
// role colocated with the evictable cache by explicit choice caps it at R1,
// and a plugged guest caps it at its kind's readiness (a guest can lower a
// capability's readiness, never raise it).
func (h *Host) downgrades(d capability.Descriptor, mods []string) []capability.Downgrade {
	var out []capability.Downgrade
	if d.Role.Correctness() && h.cfg.Redis.AllowUnsafeColocation {
		if c, ok := h.cfg.Redis.Roles[policy.RoleCache]; ok && c.Deployment == h.cfg.Redis.Roles[d.Role].Deployment {
			out = append(out, capability.DowngradeUnsafeColocation)
		}
	}
	for _, k := range d.GuestKinds {
		// Only a kind some plugged module declares caps the capability: a
		// cache with a codec guest and no cache-region guest is not held
		// to the cache-region card.
		if !h.plugged(abi.Kind(k), mods) {
			continue
		}
		if r, ok := kindReadiness(abi.Kind(k)); ok {
			out = append(out, capability.Downgrade{Reason: "guest-kind:" + k, Cap: r})
		}
	}
	return out
}

// plugged reports whether one of mods declares kind.
func (h *Host) plugged(kind abi.Kind, mods []string) bool {
	if h.guests == nil {
		return false
	}
	for _, m := range h.guests.ModulesOfKind(kind) {
		if slices.Contains(mods, m) {
			return true
		}
	}
	return false
}

// kindReadiness is the readiness a guest kind's card claims.
func kindReadiness(k abi.Kind) (capability.Readiness, bool) {
	b, ok := conformance.KindCard(k)
	if !ok {
		return capability.R0, true // no card: no evidence
	}
	c, err := capability.ParseCard(b)
	if err != nil {
		return capability.R0, true
	}
	return c.Readiness, true
}

// stateOf maps the backing role's readiness to the capability's state.
func stateOf(d capability.Descriptor, rep *health.Report) (capability.State, string) {
	if d.Role == "" || rep == nil {
		return capability.StateActive, ""
	}
	i := slices.IndexFunc(rep.Roles, func(r health.RoleReport) bool { return r.Role == d.Role })
	if i < 0 {
		return capability.StateActive, ""
	}
	r := rep.Roles[i]
	reason := "role-" + r.Reason
	if r.Class != "" {
		reason += ":" + string(r.Class) // misconfiguration or outage
	}
	switch {
	case r.Status == health.Up:
		return capability.StateActive, ""
	case r.Reason == health.ReasonHandshakePending:
		// Not yet proven either way: the startup handshake is running.
		return capability.StateStarting, reason
	case d.Impact == capability.ImpactRequired:
		return capability.StateDown, reason
	default:
		return capability.StateDegraded, reason
	}
}

// GuestKind is one guest kind as operators see it: the readiness its card
// claims and the active capabilities of this host that consume it.
type GuestKind struct {
	Kind       string               `json:"kind"`
	Readiness  capability.Readiness `json:"readiness"`
	ConsumedBy []string             `json:"consumed-by,omitempty"`
}

// GuestKinds lists every guest kind of the ABI, in the ABI's order.
func (h *Host) GuestKinds() []GuestKind {
	var out []GuestKind
	for _, k := range abi.Kinds() {
		r, _ := kindReadiness(k)
		gk := GuestKind{Kind: string(k), Readiness: r}
		for _, e := range h.caps {
			if e.mod != nil && e.prov && slices.Contains(e.mod.Descriptor().GuestKinds, string(k)) {
				gk.ConsumedBy = append(gk.ConsumedBy, e.info.ID)
			}
		}
		out = append(out, gk)
	}
	return out
}

// CapabilityRoutes returns the HTTP API of every registered capability,
// keyed by net/http ServeMux pattern: an active capability's own handlers,
// and for a disabled one a handler that answers every pattern it registered
// with 503 capability-disabled — so a sidecar client can tell "this host
// does not run that capability" from "no such endpoint".
func (h *Host) CapabilityRoutes() map[string]http.Handler {
	out := map[string]http.Handler{}
	for _, e := range h.caps {
		if e.mod != nil && e.prov {
			for p, hd := range e.mod.Routes() {
				out[p] = hd
			}
			continue
		}
		disabled := disabledHandler(e.info.ID)
		for _, p := range e.info.Routes {
			out[p] = disabled
		}
	}
	return out
}

func disabledHandler(id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		httpjson.WriteError(w, httpjson.NewError(http.StatusServiceUnavailable, httpjson.CodeCapabilityDisabled,
			"the "+id+" capability is not enabled"))
	})
}

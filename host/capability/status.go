package capability

// State is a capability's actual state in a running host.
type State string

// Capability states.
const (
	// StateDisabled: absent from the configuration or `provider: disabled`.
	// It created no client, goroutine, program load or health dependency.
	StateDisabled State = "disabled"
	// StateStarting: provisioned, but its backing deployment has not passed
	// the startup handshake yet; it is not ready to serve its guarantees.
	StateStarting State = "starting"
	// StateActive: serving with its full guarantees.
	StateActive State = "active"
	// StateDegraded: serving through its declared fallback (an optional
	// backing role is down, or a fallback mode is deciding).
	StateDegraded State = "degraded"
	// StateDown: it cannot meet its contract (its required backing role is
	// down or misconfigured); calls fail closed.
	StateDown State = "down"
)

// Downgrade is one reason a deployment caps a capability's readiness below
// what its implementation claims.
type Downgrade struct {
	// Reason is a bounded word, e.g. "unsafe-colocation" or "guest-kind:codec".
	Reason string `json:"reason"`
	// Cap is the highest readiness the reason allows.
	Cap Readiness `json:"cap"`
}

// DowngradeUnsafeColocation caps a capability whose correctness role shares a
// deployment with the evictable cache role by explicit operator choice.
var DowngradeUnsafeColocation = Downgrade{Reason: "unsafe-colocation", Cap: R1}

// EffectiveReadiness is the claimed readiness capped by every downgrade: the
// minimum of them all. Nothing can raise it above the claim — in particular
// not a guest plugged into the capability.
func EffectiveReadiness(claimed Readiness, downs []Downgrade) Readiness {
	r := claimed
	for _, d := range downs {
		r = min(r, d.Cap)
	}
	return r
}

// Status is what `caphost capabilities` and GET /admin/capabilities show
// for one registered capability.
type Status struct {
	// Capability is the capability id.
	Capability string `json:"capability"`
	// State is the actual state; Reason a bounded word explaining a state
	// other than active ("handshake-pending", "role-down", ...).
	State  State  `json:"state"`
	Reason string `json:"reason,omitempty"`
	// Claimed is the readiness the implementation claims (a constant of
	// its package); Readiness is what this deployment actually gets.
	Claimed    Readiness   `json:"claimed-readiness"`
	Readiness  Readiness   `json:"readiness"`
	Downgrades []Downgrade `json:"downgrades,omitempty"`
	// Descriptor is nil when the capability is disabled.
	Descriptor *Descriptor `json:"descriptor,omitempty"`
	// Guests lists the guest modules plugged into the capability, sorted.
	Guests []string `json:"guests,omitempty"`
}

package capability

import (
	"fmt"
)

// Readiness is a capability's readiness level: how much evidence stands
// behind what its descriptor claims.
type Readiness uint8

// The readiness scale. Each level needs the evidence of the ones below.
const (
	// R0 is a contract: a type, a seam or a placeholder, proven by unit
	// tests and the architecture boundary only.
	R0 Readiness = iota
	// R1 works in one local process or against a local service, with a
	// focused integration test and documented limitations.
	R1
	// R2 is the production baseline: a real provider, safe configuration,
	// failure semantics, health, metrics, security and a graceful
	// lifecycle, proven by provider-contract, real-service, concurrency
	// and failure tests, with a runbook.
	R2
	// R3 adds proven Cluster, failover and rolling-upgrade behaviour:
	// topology tests, a compatibility matrix, recovery and capacity
	// runbooks.
	R3
)

var readinessNames = [...]string{"R0", "R1", "R2", "R3"}

var readinessMeanings = [...]string{"contract", "local", "production-baseline", "scale-ha"}

// String returns "R0" … "R3".
func (r Readiness) String() string {
	if int(r) < len(readinessNames) {
		return readinessNames[r]
	}
	return fmt.Sprintf("Readiness(%d)", uint8(r))
}

// Meaning returns the level's name: contract, local, production-baseline,
// scale-ha.
func (r Readiness) Meaning() string {
	if int(r) < len(readinessMeanings) {
		return readinessMeanings[r]
	}
	return "invalid"
}

// Valid reports whether r is on the scale.
func (r Readiness) Valid() bool { return r <= R3 }

// MarshalText encodes the level as "R0" … "R3".
func (r Readiness) MarshalText() ([]byte, error) {
	if !r.Valid() {
		return nil, fmt.Errorf("capability: invalid readiness %d", uint8(r))
	}
	return []byte(r.String()), nil
}

// UnmarshalText decodes "R0" … "R3" exactly.
func (r *Readiness) UnmarshalText(b []byte) error {
	v, err := ParseReadiness(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// ParseReadiness parses "R0" … "R3" (exact spelling).
func ParseReadiness(s string) (Readiness, error) {
	for i, n := range readinessNames {
		if n == s {
			return Readiness(i), nil
		}
	}
	return 0, fmt.Errorf("capability: unknown readiness level %q (want R0, R1, R2 or R3)", s)
}

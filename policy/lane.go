package policy

import "fmt"

// Lane names a connection lane: a separate pool per deployment and purpose,
// with its own credential role, pool size and timeouts. Lanes exist so that a
// slow or privileged kind of traffic can never starve or borrow the
// privileges of another.
type Lane string

// The closed set of lanes.
const (
	// LaneRegular carries short, non-blocking commands (GET, SET with TTL, ...).
	LaneRegular Lane = "regular"
	// LaneScript carries catalog programs (EVALSHA, FCALL) and SCRIPT LOAD.
	LaneScript Lane = "script"
	// LaneBlocking carries blocking reads (XREAD BLOCK, ...); never shared.
	LaneBlocking Lane = "blocking"
	// LanePubSub carries SUBSCRIBE/PUBLISH traffic.
	LanePubSub Lane = "pubsub"
	// LaneAdmin carries operator commands: FUNCTION LOAD, INFO, CONFIG GET, ...
	LaneAdmin Lane = "admin"
)

// Lanes lists every lane in a fixed order (deterministic iteration).
func Lanes() []Lane {
	return []Lane{LaneRegular, LaneScript, LaneBlocking, LanePubSub, LaneAdmin}
}

// Valid reports whether l is one of the closed set.
func (l Lane) Valid() bool {
	switch l {
	case LaneRegular, LaneScript, LaneBlocking, LanePubSub, LaneAdmin:
		return true
	}
	return false
}

// ParseLane converts a configuration string to a Lane.
func ParseLane(s string) (Lane, error) {
	l := Lane(s)
	if !l.Valid() {
		return "", fmt.Errorf("unknown lane %q (want one of regular, script, blocking, pubsub, admin)", s)
	}
	return l, nil
}

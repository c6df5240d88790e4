package policy

import "fmt"

// Role names what a deployment is used for. Correctness roles (coordination,
// session) must not share a deployment with the evictable cache role: a DB
// number or key prefix is not isolation.
type Role string

// The closed set of roles.
const (
	RoleCache        Role = "cache"
	RoleCoordination Role = "coordination"
	RoleSession      Role = "session"
)

// Roles lists every role in a fixed order.
func Roles() []Role { return []Role{RoleCache, RoleCoordination, RoleSession} }

// Valid reports whether r is one of the closed set.
func (r Role) Valid() bool {
	switch r {
	case RoleCache, RoleCoordination, RoleSession:
		return true
	}
	return false
}

// Correctness reports whether the role holds state whose loss is a
// correctness failure (and therefore must not live on an evictable deployment).
func (r Role) Correctness() bool { return r == RoleCoordination || r == RoleSession }

// ParseRole converts a configuration string to a Role.
func ParseRole(s string) (Role, error) {
	r := Role(s)
	if !r.Valid() {
		return "", fmt.Errorf("unknown role %q (want one of cache, coordination, session)", s)
	}
	return r, nil
}

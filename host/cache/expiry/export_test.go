package expiry

import "time"

// JitterBytes and PlanBytes expose the draw over raw key bytes, so the
// golden values and the fuzz target do not depend on how a keys.Builder
// renders keys.
func (p Policy) JitterBytes(key []byte, ttl time.Duration) (time.Duration, error) {
	return p.jitter(key, ttl)
}

func (p Policy) PlanBytes(key []byte, writtenAt time.Time, soft, hard time.Duration) (Plan, error) {
	return p.plan(key, writtenAt, soft, hard)
}

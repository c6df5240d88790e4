package keys

// Capability names the owner of a key family. The set is closed: each
// capability has its own kind allowlist, and the capability segment lets the
// guard and operators attribute every key without decoding it.
type Capability string

// The closed set of capabilities.
const (
	CapCache   Capability = "cache"   // cache region entries, region generations, the invalidation-hint channel
	CapRate    Capability = "rate"    // rate-limit state; Region carries policy id and revision
	CapLease   Capability = "lease"   // efficiency (owner-token) leases
	CapFence   Capability = "fence"   // fenced leases: owner plus no-TTL fencing counter
	CapIdem    Capability = "idem"    // idempotency records and operation markers
	CapSession Capability = "session" // sessions and their tombstones
	CapProbe   Capability = "probe"   // startup read/write probe keys (ephemeral namespace)
	CapGen     Capability = "gen"     // standalone generation keys (mass invalidation)
	CapNotify  Capability = "notify"  // notification intent streams, intent records, quarantine streams
)

// Capabilities lists every capability in a fixed order.
func Capabilities() []Capability {
	return []Capability{CapCache, CapRate, CapLease, CapFence, CapIdem, CapSession, CapProbe, CapGen, CapNotify}
}

// kindGroup is a set of kinds that may share one digest and slot tag: the
// minimum co-location group of one atomic operation (§11.3). The group name,
// not the kind, enters the digest, which is what lets Group render several
// kinds of the same resource into the same slot by construction while keys of
// different groups stay domain-separated.
type kindGroup struct {
	name  string
	kinds []string
}

// groups returns the capability's kind groups, or nil for an unknown
// capability. It returns fresh literals each call: there is no package-level
// mutable table to tamper with.
func (c Capability) groups() []kindGroup {
	switch c {
	case CapCache:
		return []kindGroup{
			{"entry", []string{"entry", "refresh-lease"}},
			{"generation", []string{"generation"}},
			{"channel", []string{"channel"}},
		}
	case CapRate:
		// Counters, buckets, logs and the evaluation-id dedup record of one
		// subject must live in one slot so a single program can touch them.
		return []kindGroup{{"state", []string{"bucket", "window", "log", "dedup", "concurrency"}}}
	case CapLease:
		return []kindGroup{{"owner", []string{"owner"}}}
	case CapFence:
		return []kindGroup{{"fence", []string{"owner", "counter"}}}
	case CapIdem:
		return []kindGroup{{"record", []string{"record", "marker"}}}
	case CapSession:
		return []kindGroup{{"session", []string{"session", "tombstone"}}}
	case CapProbe:
		return []kindGroup{{"probe", []string{"probe"}}}
	case CapGen:
		return []kindGroup{{"generation", []string{"generation"}}}
	case CapNotify:
		// A shard's stream is the anchor of a keys.Sharded layout; intent
		// records and the shard's quarantine stream are members in its slot,
		// so one program can append, finalize and acknowledge atomically.
		return []kindGroup{{"stream", []string{"stream"}}, {"intent", []string{"intent"}}, {"quarantine", []string{"quarantine"}}}
	}
	return nil
}

// Valid reports whether c is in the closed set.
func (c Capability) Valid() bool {
	switch c {
	case CapCache, CapRate, CapLease, CapFence, CapIdem, CapSession, CapProbe, CapGen, CapNotify:
		return true
	}
	return false
}

// Kinds returns the capability's kind allowlist in a fixed order (nil for an
// unknown capability).
func (c Capability) Kinds() []string {
	var out []string
	for _, g := range c.groups() {
		out = append(out, g.kinds...)
	}
	return out
}

// groupOf returns the kind group that admits kind, or "" when the kind is
// not in the capability's allowlist. It mirrors groups() without allocating
// because it runs on every Build; TestKindGroupsAgree keeps the two in step.
func (c Capability) groupOf(kind string) string {
	switch c {
	case CapCache:
		switch kind {
		case "entry", "refresh-lease":
			return "entry"
		case "generation":
			return "generation"
		case "channel":
			return "channel"
		}
	case CapRate:
		switch kind {
		case "bucket", "window", "log", "dedup", "concurrency":
			return "state"
		}
	case CapLease:
		if kind == "owner" {
			return "owner"
		}
	case CapFence:
		if kind == "owner" || kind == "counter" {
			return "fence"
		}
	case CapIdem:
		if kind == "record" || kind == "marker" {
			return "record"
		}
	case CapSession:
		if kind == "session" || kind == "tombstone" {
			return "session"
		}
	case CapProbe:
		if kind == "probe" {
			return "probe"
		}
	case CapGen:
		if kind == "generation" {
			return "generation"
		}
	case CapNotify:
		switch kind {
		case "stream", "intent", "quarantine":
			return kind
		}
	}
	return ""
}

// Package keys owns every Redis key caphost renders. Keys have the shape
//
//	ca:<app>:<env>:<capability>:<region>:hv<n>:kv<n>:{<slotTag>}:<digest>:<kind>
//
// and are produced only by a Builder: identifying material is
// length-prefixed and HMAC-SHA-256'd with versioned secret material, exactly
// one hash tag is present, every segment is bounded and the kind comes from a
// per-capability allowlist. Callers hold a Key value, never a string, so no
// exported API elsewhere can accept a pre-rendered key.
//
// A family of keys that one atomic program must touch together and that must
// still spread over the Cluster (a cache region: a generation per shard and
// the entries of that shard) uses a sharded layout (PrepareSharded): the
// region is split into a fixed number of shards, each with an anchor key,
// and every member carries its shard anchor's hash tag, so "exactly one hash
// tag" still holds while no region becomes one hot slot.
//
// What may change here: new capabilities or kinds (extend the allowlists in
// capability.go), bounds within the documented limits, and new readable HMAC
// versions through configuration. The canonical digest encoding and the key
// shape are a storage contract: changing either orphans every existing key,
// so it requires a key-schema (kv) bump and a design change.
package keys

// Key is a rendered, validated Redis key. The zero value is invalid. Only
// this package constructs Keys; other runtime packages read the wire form
// through Redis and the cluster slot through Slot.
type Key struct {
	s    string
	slot uint16
	kind string
}

// Redis returns the wire form of the key. It is meant for the runtime's own
// command construction; it must never be logged (the digest is derived from
// identifying material).
func (k Key) Redis() string { return k.s }

// Slot returns the Redis Cluster hash slot of the key.
func (k Key) Slot() uint16 { return k.slot }

// Kind returns the key's kind segment (for example "entry" or "bucket").
func (k Key) Kind() string { return k.kind }

// IsZero reports whether k was never built.
func (k Key) IsZero() bool { return k.s == "" }

// String redacts the key: keys carry digests of identifying material and
// must not reach logs by accident.
func (k Key) String() string { return "keys.Key(" + k.kind + ")" }

// Package policy holds caphost's declarative models and their compilers: the
// Redis configuration model (deployments, topology, roles, lanes, key
// digests, programs; redis.go), secrets and credentials (secret.go), guest
// module declarations (guests.go), the rate-policy model and its compiler
// (rate.go), and, in subpackages, the closed command catalog
// (policy/commands) and the strict reader for untyped config values
// (policy/strict). Everything here is plain data plus validation: no I/O beyond
// reading embedded files, no Redis client, no Wasm engine.
//
// Values produced here are validated once and then treated as frozen; a
// change is a new value (a new revision), never a field-by-field mutation.
package policy

// Package capability is the vocabulary every caphost capability speaks to
// operators and to the host: readiness levels (R0–R3), guarantee and
// non-guarantee classes, failure modes, readiness impact, the typed
// Descriptor a capability contributes, the Status that shows its actual
// state, and the Card — the 13-item capability card, kept as data next to
// the code it describes.
//
// The package is pure: it imports only the standard library and policy, so
// the descriptors can be read, validated and printed without a Redis
// client, a Wasm engine or a metrics registry.
//
// A capability's readiness level is a constant of its own package, never
// configuration; a deployment can only lower it (EffectiveReadiness), and a
// guest plugged into a capability can never raise it.
//
// What may change here: new guarantee, non-guarantee and failure-mode
// values as capabilities arrive (values are never renamed: operators and
// dashboards read them). What must not: the closed readiness scale, and the
// rule that effective readiness is the minimum of what the code claims and
// what the deployment allows.
package capability

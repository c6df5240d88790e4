// Package plugins loads and runs caphost guest modules on wazero (the native
// flavour of ABI v1, see package abi).
//
// It owns: compiling modules through one shared compilation cache (on disk
// when configured), one wazero Runtime per module so mutually untrusted guests
// never share a namespace, import vetting (only the caphost_v1 host functions
// and the WASI clock/random/stdio subset the Go runtime needs; no filesystem,
// environment, arguments or sockets), ABI version negotiation, describe
// validation, a bounded pool of instances per module, per-module limits under
// engine-wide hard caps, and the mapping of every guest failure to a typed
// *GuestError. Per-call deadlines and caller cancellation are enforced by
// one engine-wide watchdog (watchdog.go) through wazero's termination
// checks, which the patched wazero in third_party makes cheap. Metrics leave
// through the Observer interface; this package must not import Prometheus.
//
// Above the engine: Manager (manager*.go) owns named module slots and their
// generations — load, verify, self-test vectors and the conformance suite
// (manager_conformance.go), atomic swap, drain, fsnotify watch. Guest
// (calls.go) is the flavour-neutral view both this engine's *Module and
// plugins/extism implement; the typed calls and their answer checks are
// functions over it, so both flavours are held to the same rules.
//
// Changes to what a guest may import, or to how failures are classified, are
// made here; changes to message layouts belong in package abi.
package plugins

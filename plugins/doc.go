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
// *GuestError. Metrics leave through the Observer interface; this package
// must not import Prometheus.
//
// Changes to what a guest may import, or to how failures are classified, are
// made here; changes to message layouts belong in package abi.
package plugins

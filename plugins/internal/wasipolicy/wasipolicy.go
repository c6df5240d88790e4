// Package wasipolicy is the one WASI policy both guest engines (plugins and
// plugins/extism) apply: which WASI functions a module may import (Allowed)
// and what an instance finds behind them (NewModuleConfig). Changing what a
// guest may reach of WASI is a sandbox decision: it is made here, once.
//
// # Clocks and entropy, per kind
//
// Every v1 export is a pure function of its request (ABI.md §2: the rate
// limiter memoizes selections, the cache keys on canonical parts, a codec
// must round-trip, a renderer is handed `now` in the request), so no v1 kind
// needs the host's clock or the host's entropy, and none gets them:
//
//	kind          clock_time_get / clock_res_get     random_get
//	codec         virtual                            deterministic
//	cache-region  virtual                            deterministic
//	rate-policy   virtual                            deterministic
//	renderer      virtual (now comes in the request) deterministic
//
// The functions stay importable because every Go wasip1 guest imports them:
// its runtime reads the clock for scheduling and garbage collection and
// seeds map hashing from random_get at start, and it cannot start without
// them. Behind them an instance finds wazero's sandbox defaults: a wall clock
// that starts at 2022-01-01T00:00:00Z and a monotonic clock that starts at
// 0, each advancing 1 ms per reading, and a fixed-seed pseudo-random stream,
// all fresh per instance. So a guest learns nothing about the host's time
// (no timing side channel, no clock to make answers time-dependent) and
// its answers can depend only on its request and its own call history,
// which the conformance suite probes. A fixed seed makes a guest's map
// hashing predictable; requests are bounded (64 attributes), so a crafted
// collision costs at most one call's deadline.
//
// Because no kind differs, the decision is made at load, before describe
// tells the kinds; a future kind that needs the host's clock would be given
// it here, and the engines would then have to configure instances after
// describe.
package wasipolicy

import "github.com/caphost/caphost/third_party/wazero"

// allowed lists the WASI functions a module may import: what the Go runtime
// and io-using packages link (clock, random, stdio, exit, yield, and the
// args/env/preopen probes that simply find nothing). fd_read/fd_write only
// reach the three stdio descriptors because nothing can open another: no
// path or socket function is allowed and no filesystem is mounted.
var allowed = map[string]bool{
	"args_get": true, "args_sizes_get": true, "environ_get": true, "environ_sizes_get": true,
	"clock_time_get": true, "clock_res_get": true, "random_get": true, "proc_exit": true,
	"sched_yield": true, "poll_oneoff": true, "fd_write": true, "fd_read": true, "fd_close": true,
	"fd_fdstat_get": true, "fd_fdstat_set_flags": true, "fd_prestat_get": true, "fd_prestat_dir_name": true,
}

// Allowed reports whether a guest may import the WASI function fn.
func Allowed(fn string) bool { return allowed[fn] }

// NewModuleConfig returns the configuration every guest instance starts
// from, in both engines: no filesystem, arguments or environment, no
// sockets, and the virtual clocks and deterministic entropy of the package
// comment. Those are wazero's documented ModuleConfig defaults ("this does
// not default to time.Since as that violates sandboxing"), so the policy is
// to add nothing: in particular never WithSysWalltime, WithSysNanotime,
// WithSysNanosleep or WithRandSource(crypto/rand.Reader). A plugins test
// (TestNoKindSeesHostClockOrEntropy) pins the behaviour for every kind.
// Callers add only what is not a sandbox decision (name, stderr capture,
// start functions).
func NewModuleConfig() wazero.ModuleConfig { return wazero.NewModuleConfig() }

// Package wasipolicy is the one WASI allowlist both guest engines (plugins
// and plugins/extism) vet a module's imports against. Changing what a guest
// may reach of WASI is a sandbox decision: it is made here, once.
package wasipolicy

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

package transport

import "errors"

// A plugin's own namespaces (Linux). Landlock checks an open only once
// its path has resolved, so a sandbox that may open some files answers
// ENOENT for a missing path and EACCES for an existing one: its plugin
// could map which files exist on the host. The host therefore asks each
// plugin to run in a user and mount namespace of its own (isolate); the
// plugin enters them first thing (enterNamespaces) and, once it knows
// its Sandbox, makes its root a small tmpfs holding only the paths it is
// granted (hidePaths): any other path does not exist for it, whether or
// not it exists on the host. Landlock and the seccomp filter then apply
// on top, as without it; the filter also keeps the plugin from changing
// its mounts back (mountSyscalls).
//
// Where the kernel refuses the namespaces (unprivileged user namespaces
// off), the plugin serves in the host's, says why, and reports
// SandboxLevel.Paths false; the host warns once per Plugin.

// envNamespaces is the plugin environment variable through which the
// host asks for namespaces of the plugin's own and names its own (mount
// and user, namespaceIDs): the plugin changes its mounts only once it
// has checked that it is in neither, never in the host's. Absent, the
// plugin runs in the host's namespaces.
const envNamespaces = "CAPHOST_TRANSPORT_NAMESPACES"

// errPathsShown wraps why a plugin's sandbox does not hide the paths
// outside its grants (no namespace of its own, or a kernel that would not
// set its root up); the plugin runs on with Landlock's rules alone.
var errPathsShown = errors.New("transport: sandbox does not hide paths")

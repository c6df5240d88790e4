//go:build !unix

package filesink

// probeFlags: this system has no O_NOFOLLOW or O_NONBLOCK for files (and
// no sandbox that needs exists to open rather than stat).
const probeFlags = 0

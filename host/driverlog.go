package host

import (
	"log/slog"

	"github.com/caphost/caphost/runtime"
)

// RouteRedisDriverLogs sends the Redis driver's own log lines (a pool that
// cannot dial, a broken connection) to l as structured records carrying the
// driver's constant message and only the kinds of its arguments, so no
// address, key or server text reaches the log; each message is logged at
// most once per interval with a count of the ones suppressed.
//
// The driver has one logger per process, so New never installs it: a
// library must not change process-wide settings. A program's main (caphost
// serve does) calls this once; the last call wins.
func RouteRedisDriverLogs(l *slog.Logger) { runtime.RouteDriverLogs(l) }

package runtime_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"

	"github.com/caphost/caphost/runtime"
)

// A process routes go-redis's own log lines through its JSON slog logger
// once, at start-up (runtime.RouteDriverLogs(logger)); this shows what one
// pool dial failure becomes: the constant format, the attempt count, and
// the error's class — never the address.
func ExampleNewDriverLog() {
	h := slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{} // a fixed output for the example
		}
		return a
	}})
	d := runtime.NewDriverLog(slog.New(h))
	refused := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 6379},
		Err: errors.New("connect: connection refused")}
	d.Printf(context.Background(), "redis: connection pool: failed to dial after %d attempts: %v", 1, refused)
	// Output:
	// {"level":"WARN","msg":"redis driver","event":"redis-driver","format":"redis: connection pool: failed to dial after %d attempts: %v","args":["1","dial"]}
}

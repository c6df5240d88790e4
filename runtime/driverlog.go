package runtime

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/runtime/certainty"
)

// This file routes go-redis's own log lines (pool dial failures, push and
// handoff notices, recovered panics) through slog.
//
// go-redis v9.23.0 keeps its logger in one process-wide variable
// (internal.Logger, set by redis.SetLogger); no client option carries a
// logger. caphost keeps no package-level state of its own: DriverLog is an
// ordinary value holding its slog.Logger and its rate-limit table, and
// RouteDriverLogs is the one call that installs it in go-redis. It is not
// called by New — a library constructor must not change process-wide
// settings, and two runtimes in one process would fight over it — but by
// whoever owns the process (the caphost serve command, or an embedder's
// main), once, at start-up.
//
// A driver line is redacted: go-redis formats addresses, error texts from
// the server and, in some lines, command names or notification payloads
// into it, so only its format string (a constant in go-redis's source) is
// kept, with each argument reduced to a bounded kind — an integer as is,
// an error to its class ("dial", "timeout", "eof", "connection", the
// server error code, "closed", "error"), anything else to its Go kind.

// driverLogEvery is the least time between two lines of the same driver
// format; the ones in between are counted and the next line carries the
// count. A dead node makes go-redis log one dial failure per attempt.
const driverLogEvery = 10 * time.Second

// maxDriverFormat bounds a logged format string (go-redis's longest is well
// under it).
const maxDriverFormat = 256

// DriverLog adapts go-redis's logger interface (Printf) to slog, redacted
// and rate-limited per format. It is safe for concurrent use.
type DriverLog struct {
	log   *slog.Logger
	now   func() time.Time
	every time.Duration

	mu   sync.Mutex
	seen map[string]*driverLine
}

type driverLine struct {
	last       time.Time
	suppressed int
}

// NewDriverLog returns a DriverLog writing to l (slog.Default() when nil).
func NewDriverLog(l *slog.Logger) *DriverLog {
	if l == nil {
		l = slog.Default()
	}
	return &DriverLog{log: l, now: time.Now, every: driverLogEvery, seen: map[string]*driverLine{}}
}

// RouteDriverLogs installs a DriverLog over l as go-redis's process-wide
// logger and returns it. Call it once, from the process's main; the last
// call wins.
func RouteDriverLogs(l *slog.Logger) *DriverLog {
	d := NewDriverLog(l)
	redis.SetLogger(d)
	return d
}

// Printf implements go-redis's internal.Logging.
func (d *DriverLog) Printf(ctx context.Context, format string, args ...any) {
	format = boundFormat(format)
	now := d.now()
	d.mu.Lock()
	ln := d.seen[format]
	if ln == nil {
		if len(d.seen) >= maxDriverFormats {
			// go-redis has a few dozen formats; a table this full means
			// something else calls the logger: stop remembering new ones.
			clear(d.seen)
		}
		ln = &driverLine{}
		d.seen[format] = ln
	} else if now.Sub(ln.last) < d.every {
		ln.suppressed++
		d.mu.Unlock()
		return
	}
	ln.last = now
	suppressed := ln.suppressed
	ln.suppressed = 0
	d.mu.Unlock()

	attrs := []any{"event", "redis-driver", "format", format, "args", argKinds(args)}
	if suppressed > 0 {
		attrs = append(attrs, "suppressed", suppressed)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	d.log.WarnContext(ctx, "redis driver", attrs...)
}

// maxDriverFormats bounds the rate-limit table.
const maxDriverFormats = 256

func boundFormat(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= maxDriverFormat {
		return s
	}
	cut := maxDriverFormat
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// argKinds reduces each argument to a bounded word (see the file comment).
func argKinds(args []any) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = argKind(a)
	}
	return out
}

func argKind(a any) string {
	switch v := a.(type) {
	case nil:
		return "nil"
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return numberWord(v)
	case time.Duration:
		return v.String()
	case bool:
		if v {
			return "true"
		}
		return "false"
	case error:
		return errKind(v)
	case string:
		return "string"
	case []byte:
		return "bytes"
	}
	return "value"
}

func numberWord(v any) string {
	switch n := v.(type) {
	case int:
		return strconv.FormatInt(int64(n), 10)
	case int8:
		return strconv.FormatInt(int64(n), 10)
	case int16:
		return strconv.FormatInt(int64(n), 10)
	case int32:
		return strconv.FormatInt(int64(n), 10)
	case int64:
		return strconv.FormatInt(n, 10)
	}
	return "number" // unsigned: go-redis logs none
}

// errKind is the bounded class of a driver error.
func errKind(err error) string {
	var rerr redis.Error
	var op *net.OpError
	switch {
	case errors.As(err, &rerr):
		return "server:" + boundedWord(certainty.ServerCode(rerr.Error()))
	case errors.Is(err, redis.ErrClosed), errors.Is(err, net.ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	case errors.As(err, &op):
		switch {
		case op.Op == "dial":
			return "dial"
		case op.Timeout():
			return "timeout"
		}
		return "connection"
	}
	return "error"
}

package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

func TestTopologyCause(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		name  string
		err   error
		cause string
	}{
		{"success", nil, ""},
		{"nil reply", redis.Nil, ""},
		{"moved", serverErr("MOVED 3999 127.0.0.1:6381"), "MOVED"},
		{"ask", serverErr("ASK 3999 127.0.0.1:6381"), "ASK"},
		{"readonly", serverErr("READONLY You can't write against a read only replica."), "READONLY"},
		{"clusterdown", serverErr("CLUSTERDOWN The cluster is down"), "CLUSTERDOWN"},
		{"tryagain", serverErr("TRYAGAIN Multiple keys request during rehashing of slot"), "TRYAGAIN"},
		{"masterdown", serverErr("MASTERDOWN Link with MASTER is down"), "MASTERDOWN"},
		{"loading", serverErr("LOADING Redis is loading the dataset in memory"), "LOADING"},
		{"wrongtype: the owner answered", serverErr("WRONGTYPE Operation against a key"), ""},
		{"generic error reply", serverErr("ERR something"), ""},
		{"dial refused", refused, causeDial},
		{"dial refused, proven before send", &beforeSendError{reason: "dial failed", cause: refused}, causeDial},
		{"dial timeout", &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}, causeDial},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, causeTimeout},
		{"read reset", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, causeConnection},
		{"write broken pipe", &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}, causeConnection},
		{"eof", io.EOF, causeEOF},
		{"wrapped unexpected eof", fmt.Errorf("read reply: %w", io.ErrUnexpectedEOF), causeEOF},
		{"bare reset", syscall.ECONNRESET, causeConnection},
		{"use of closed connection", net.ErrClosed, causeConnection},
		{"caller canceled", context.Canceled, ""},
		{"deadline while waiting for a pool turn", context.DeadlineExceeded, ""},
		{"pool timeout", redis.ErrPoolTimeout, ""},
		{"client closed", redis.ErrClosed, ""},
		{"admission refusal", &AdmissionError{Deployment: "d", Lane: policy.LaneRegular, Outcome: certainty.OverloadedBeforeSend}, ""},
		{"unclassified", errors.New("something else"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cause, ok := topologyCause(tc.err)
			assert.Equal(t, tc.cause, cause)
			assert.Equal(t, tc.cause != "", ok)
		})
	}
}

// refreshCounter is an Observer that counts slot-map refreshes.
type refreshCounter struct {
	nopObserver
	n atomic.Int64
}

func (o *refreshCounter) SlotMapRefresh(string, policy.Lane) { o.n.Add(1) }

// logRecords is a slog handler that keeps the messages and levels it saw.
type logRecords struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}
func (h *logRecords) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecords) WithGroup(string) slog.Handler      { return h }

func (h *logRecords) count(level slog.Level, msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level == level && r.Message == msg {
			n++
		}
	}
	return n
}

const (
	refreshWarn  = "redis cluster: topology failure, refreshing the slot map"
	refreshDebug = "redis cluster: refreshing the slot map"
)

func testRefresher(every time.Duration, reload func()) (*slotRefresher, *refreshCounter, *logRecords) {
	obs := &refreshCounter{}
	logs := &logRecords{}
	s := &slotRefresher{deployment: "cl", lane: policy.LaneRegular, reload: reload, every: every,
		obs: obs, log: &refreshLog{log: slog.New(logs)}}
	return s, obs, logs
}

// A storm of failures from many goroutines asks go-redis for at most one
// reload per interval, and the storm's last failure is still followed by a
// reload (the trailing one).
func TestSlotRefresherBoundsAStorm(t *testing.T) {
	const every = 20 * time.Millisecond
	var reloads atomic.Int64
	s, obs, logs := testRefresher(every, func() { reloads.Add(1) })
	t.Cleanup(s.close)

	start := time.Now()
	var requests atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 300*time.Millisecond {
				s.failed(io.EOF)
				requests.Add(1)
			}
		}()
	}
	wg.Wait()
	// The trailing reload of the last window, if one is pending, runs
	// within one interval.
	time.Sleep(2 * every)
	s.mu.Lock()
	pending := s.pending != nil
	s.mu.Unlock()
	require.False(t, pending)
	elapsed := time.Since(start)

	n := reloads.Load()
	assert.Greater(t, requests.Load(), int64(1000), "the storm was a storm")
	assert.GreaterOrEqual(t, n, int64(2))
	assert.LessOrEqual(t, n, int64(elapsed/every)+1, "at most one reload per interval")
	assert.Equal(t, n, obs.n.Load(), "every reload is observed")
	assert.Equal(t, 1, logs.count(slog.LevelWarn, refreshWarn), "one WARN for the burst")
	assert.Equal(t, int(n)-1, logs.count(slog.LevelDebug, refreshDebug))

	// Any request after the storm still leads to a reload within an interval.
	s.failed(serverErr("CLUSTERDOWN The cluster is down"))
	require.Eventually(t, func() bool { return reloads.Load() == n+1 }, 2*time.Second, every/4)

	// Failures that are not topology-class request nothing.
	s.failed(serverErr("WRONGTYPE Operation against a key"))
	s.failed(redis.ErrPoolTimeout)
	time.Sleep(2 * every)
	assert.Equal(t, n+1, reloads.Load())
}

func TestSlotRefresherCloseCancelsTheTrailingReload(t *testing.T) {
	const every = 50 * time.Millisecond
	var reloads atomic.Int64
	s, _, _ := testRefresher(every, func() { reloads.Add(1) })
	s.request(causeDial) // runs now
	s.request(causeDial) // scheduled for the end of the window
	require.Equal(t, int64(1), reloads.Load())
	s.close()
	time.Sleep(3 * every)
	s.request(causeDial)
	assert.Equal(t, int64(1), reloads.Load(), "no reload after close")
}

func TestRefreshLogWarnsOncePerQuietPeriod(t *testing.T) {
	logs := &logRecords{}
	l := &refreshLog{log: slog.New(logs)}
	l.note("cl", policy.LaneRegular, causeDial)
	l.note("cl", policy.LaneScript, causeDial)
	l.note("cl", policy.LaneRegular, causeEOF)
	assert.Equal(t, 1, logs.count(slog.LevelWarn, refreshWarn))
	assert.Equal(t, 2, logs.count(slog.LevelDebug, refreshDebug))
	// A refresh after a quiet period warns again.
	l.last.Store(time.Now().Add(-refreshQuiet - time.Second).UnixNano())
	l.note("cl", policy.LaneRegular, causeDial)
	assert.Equal(t, 2, logs.count(slog.LevelWarn, refreshWarn))
}

// The hook returns the call's error untouched, calls next exactly once, and
// requests a refresh only for topology-class failures.
func TestRefreshHookNeverResends(t *testing.T) {
	var reloads atomic.Int64
	s, _, _ := testRefresher(time.Hour, func() { reloads.Add(1) })
	t.Cleanup(s.close)
	h := refreshHook{r: s}
	ctx := context.Background()

	for _, err := range []error{nil, redis.Nil, serverErr("WRONGTYPE x"), io.EOF, serverErr("MOVED 1 127.0.0.1:1")} {
		var calls int
		process := h.ProcessHook(func(context.Context, redis.Cmder) error { calls++; return err })
		got := process(ctx, redis.NewStringCmd(ctx, "get", "k"))
		assert.Equal(t, 1, calls)
		assert.Equal(t, err, got)
	}
	assert.Equal(t, int64(1), reloads.Load(), "EOF ran one reload; the MOVED inside the window coalesced")

	var calls int
	cmds := []redis.Cmder{redis.NewStringCmd(ctx, "get", "a"), redis.NewStringCmd(ctx, "get", "b")}
	cmds[1].SetErr(serverErr("CLUSTERDOWN The cluster is down"))
	pipe := h.ProcessPipelineHook(func(context.Context, []redis.Cmder) error { calls++; return cmds[1].Err() })
	assert.Equal(t, cmds[1].Err(), pipe(ctx, cmds))
	assert.Equal(t, 1, calls)
}

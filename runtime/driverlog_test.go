package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/logtest"
	"github.com/caphost/caphost/policy"
)

// jsonLines decodes every JSON log line written to s.
func jsonLines(t *testing.T, s *logtest.Buffer) []map[string]any {
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

func TestDriverLogRedactsAndRateLimits(t *testing.T) {
	var buf logtest.Buffer
	d := NewDriverLog(slog.New(slog.NewJSONHandler(&buf, nil)))
	now := time.Unix(1_800_000_000, 0)
	d.now = func() time.Time { return now }
	dial := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 6379},
		Err: errors.New("connect: connection refused")}
	const format = "redis: connection pool: failed to dial after %d attempts: %v"

	d.Printf(context.Background(), format, 1, dial)
	for range 99 {
		now = now.Add(50 * time.Millisecond) // 4.95 s in all: inside the window
		d.Printf(context.Background(), format, 1, dial)
	}
	d.Printf(context.Background(), "%s", "MOVING 10.1.2.3:6380 payload key=ca:demo:secret")
	d.Printf(context.Background(), "x %v %v %v %v", protoErr("NOSCRIPT No matching script"), io.EOF, nil, 3*time.Second)
	now = now.Add(driverLogEvery)
	d.Printf(context.Background(), format, 1, dial)

	out := buf.String()
	assert.NotContains(t, out, "10.1.2.3", "no address")
	assert.NotContains(t, out, "secret", "no free text")
	lines := jsonLines(t, &buf)
	require.Len(t, lines, 4)
	assert.Equal(t, "WARN", lines[0]["level"])
	assert.Equal(t, "redis driver", lines[0]["msg"])
	assert.Equal(t, "redis-driver", lines[0]["event"])
	assert.Equal(t, format, lines[0]["format"])
	assert.Equal(t, []any{"1", "dial"}, lines[0]["args"])
	assert.Nil(t, lines[0]["suppressed"])
	assert.Equal(t, []any{"string"}, lines[1]["args"])
	assert.Equal(t, []any{"server:NOSCRIPT", "eof", "nil", "3s"}, lines[2]["args"])
	assert.Equal(t, float64(99), lines[3]["suppressed"], "the next line after the window counts the suppressed ones")
}

// TestRouteDriverLogs installs the adapter as go-redis's process-wide
// logger and makes go-redis log a pool dial failure of a runtime lane.
func TestRouteDriverLogs(t *testing.T) {
	var buf logtest.Buffer
	RouteDriverLogs(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { RouteDriverLogs(slog.Default()) })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // a port nothing listens on
	r := newRuntime(t, testConfig(testDeployment("gone", standalone(addr))))
	c := laneClient(t, r, policy.RoleCoordination, policy.LaneRegular)
	require.Error(t, c.Set(ctxT(t, 5*time.Second), testKey("driver-log"), "v", time.Minute).Err())

	require.Eventually(t, func() bool {
		return strings.Contains(buf.String(), `"format":"redis: connection pool: failed to dial`)
	}, 5*time.Second, 10*time.Millisecond, "go-redis's dial failure line: %s", buf.String())
	_, port, _ := net.SplitHostPort(addr)
	assert.NotContains(t, buf.String(), port, "the address is redacted")
	assert.Contains(t, buf.String(), `"dial"`)
}

// FuzzDriverLog: whatever go-redis (or anything calling its logger)
// formats, the line is valid JSON with a bounded, valid UTF-8 format, and
// no string or error text given as an argument reaches it.
func FuzzDriverLog(f *testing.F) {
	f.Add("redis: connection pool: failed to dial after %d attempts: %v", "dial tcp 10.0.0.1:6379")
	f.Add("%s", "MOVING 1 10.0.0.2:7000")
	f.Add("\xff\xfe %v", "ca:demo:k")
	f.Add(strings.Repeat("é", 300), "x")
	f.Fuzz(func(t *testing.T, format, text string) {
		var buf bytes.Buffer
		d := NewDriverLog(slog.New(slog.NewJSONHandler(&buf, nil)))
		marker := "LEAK-" + text
		d.Printf(context.Background(), format, marker, errors.New(marker), protoErr(marker), []byte(marker))
		var m map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
		got, _ := m["format"].(string)
		assert.True(t, utf8.ValidString(got))
		assert.LessOrEqual(t, len(got), maxDriverFormat+len("…"))
		if !strings.Contains(format, "LEAK-") {
			assert.NotContains(t, buf.String(), "LEAK-", fmt.Sprintf("%q", buf.String()))
		}
	})
}

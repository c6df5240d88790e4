package transport_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/logtest"
	"github.com/caphost/caphost/plugins/transport"
)

func launchMisbehaving(t *testing.T, mode string, log *slog.Logger) (*transport.Plugin, *recorder) {
	t.Helper()
	return launchPlugin(t, "misbehaving", "bad", map[string]string{"mode": mode}, func(c *transport.Config) { c.Logger = log })
}

// TestMalformedReplyIsIndeterminate: a reply the host cannot read, or one
// that breaks the rules, is never Accepted: the plugin may have sent.
func TestMalformedReplyIsIndeterminate(t *testing.T) {
	for _, mode := range []string{"garbage", "bad-code"} {
		var buf logtest.Buffer
		p, _ := launchMisbehaving(t, mode, slog.New(slog.NewJSONHandler(&buf, nil)))
		r := p.Deliver(context.Background(), message(t, "malformed"))
		assert.Equal(t, transport.Receipt{Outcome: transport.Indeterminate, Code: "plugin-reply-invalid"}, r, mode)
		assert.Contains(t, buf.String(), `"msg":"transport plugin reply refused"`, mode)
		assert.Contains(t, buf.String(), transport.ErrInvalidReply.Error(), mode)
		assert.NotContains(t, buf.String(), "ada@example.com", mode)
	}
}

// TestCrashDuringCall: a plugin that dies inside every call makes each
// call Indeterminate, is restarted each time, and its backoff keeps
// doubling because it never answers.
func TestCrashDuringCall(t *testing.T) {
	p, rec := launchMisbehaving(t, "crash", nil)
	var delays []time.Duration
	for range 3 {
		r := p.Deliver(context.Background(), message(t, "crash"))
		assert.Equal(t, transport.Receipt{Outcome: transport.Indeterminate, Code: "plugin-lost-after-send"}, r)
		ev := wait(t, rec.restarts)
		assert.Contains(t, []transport.RestartCause{transport.CauseExited, transport.CauseUnhealthy}, ev.cause)
		delays = append(delays, ev.delay)
		require.NoError(t, wait(t, rec.launches))
	}
	assert.Equal(t, []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond}, delays)
}

// TestWedgedPluginIsRestarted: a plugin stuck inside Deliver keeps its
// process and gRPC health service up, so only its unanswered calls show
// it. Each such call is Indeterminate (it may have sent); the third in a
// row restarts the instance as wedged, and the new instance starts with
// a clean count.
func TestWedgedPluginIsRestarted(t *testing.T) {
	p, rec := launchMisbehaving(t, "wedge", nil)
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		r := p.Deliver(ctx, message(t, "wedge"))
		assert.Equal(t, transport.Receipt{Outcome: transport.Indeterminate, Code: "timeout-after-send"}, r)
	}
	for round := range 2 {
		for range 3 {
			call()
		}
		ev := wait(t, rec.restarts)
		assert.Equal(t, transport.CauseWedged, ev.cause, "round %d", round)
		require.NoError(t, wait(t, rec.launches))
	}
	select {
	case ev := <-rec.restarts:
		t.Fatalf("a restart beyond the two wedged ones: %v", ev)
	default:
	}
}

// TestReplacedBinaryIsNotRestarted: the checksum is checked on every
// launch, so a binary swapped after the first launch is refused when the
// supervisor restarts it.
func TestReplacedBinaryIsNotRestarted(t *testing.T) {
	src, sum := pluginBin(t, "file")
	path := filepath.Join(t.TempDir(), "file")
	copyFile(t, src, path)
	rec := newRecorder()
	p, err := transport.Launch(context.Background(), transport.Config{Name: "file", Path: path, SHA256: sum,
		Settings: map[string]string{"dir": t.TempDir()}, Observer: rec,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond, HealthInterval: 10 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, wait(t, rec.launches))
	t.Cleanup(func() { _ = p.Close() })

	other, _ := pluginBin(t, "webhook")
	require.NoError(t, os.Remove(path)) // the running process keeps its inode
	copyFile(t, other, path)
	pid := transport.PluginPID(p)
	proc, err := os.FindProcess(pid)
	require.NoError(t, err)
	require.NoError(t, proc.Kill())

	wait(t, rec.restarts)
	require.ErrorIs(t, wait(t, rec.launches), transport.ErrChecksumMismatch)
	ev := wait(t, rec.restarts)
	assert.Equal(t, transport.CauseLaunchFailed, ev.cause)
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "plugin-unavailable"},
		p.Deliver(context.Background(), message(t, "after-swap")))
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

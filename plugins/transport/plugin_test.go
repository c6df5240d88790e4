package transport_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/logtest"
	"github.com/caphost/caphost/plugins/transport"
)

type restartEvent struct {
	cause transport.RestartCause
	delay time.Duration
}

// recorder is an Observer that hands events to the test through channels,
// so a test waits for an event instead of for time.
type recorder struct {
	restarts chan restartEvent
	launches chan error
	mu       sync.Mutex
	calls    map[transport.Outcome]int
	refused  map[string]int // the broker's refusals by reason
}

func newRecorder() *recorder {
	return &recorder{restarts: make(chan restartEvent, 64), launches: make(chan error, 64), calls: map[transport.Outcome]int{}, refused: map[string]int{}}
}

func (r *recorder) Restarting(_ string, c transport.RestartCause, d time.Duration) {
	r.restarts <- restartEvent{c, d}
}
func (r *recorder) Launched(_ string, err error) { r.launches <- err }
func (r *recorder) BrokerRefused(_ string, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refused[reason]++
}

func (r *recorder) refusals(reason string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused[reason]
}
func (r *recorder) Delivered(_ string, o transport.Outcome, _ time.Duration) {
	r.mu.Lock()
	r.calls[o]++
	r.mu.Unlock()
}

// wait returns the next value of ch, failing the test after a minute: a
// bound on a hung test, not a timing assertion.
func wait[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatal("no event within a minute")
	}
	var zero T
	return zero
}

func message(t testing.TB, id string) transport.Message {
	rcpt, err := transport.NewRecipient("ada@example.com")
	require.NoError(t, err)
	return transport.Message{IntentID: id, Attempt: 1, Channel: "email", Recipient: rcpt, Parts: []transport.Part{
		{Name: "subject", ContentType: "text/plain", Body: []byte("Hello")},
		{Name: "text", ContentType: "text/plain", Body: []byte("Hello, Ada.\n")},
	}}
}

// launchPlugin launches the built plugin bin as transport name with fast
// supervision (5..20 ms backoff, 10 ms health interval) and a recorder,
// and waits for its first launch.
func launchPlugin(t *testing.T, bin, name string, settings map[string]string, mod func(*transport.Config)) (*transport.Plugin, *recorder) {
	t.Helper()
	path, sum := pluginBin(t, bin)
	rec := newRecorder()
	cfg := transport.Config{Name: name, Path: path, SHA256: sum, Settings: settings, Observer: rec,
		BackoffMin: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond, HealthInterval: 10 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	p, err := transport.Launch(context.Background(), cfg)
	require.NoError(t, err)
	require.NoError(t, wait(t, rec.launches))
	t.Cleanup(func() { _ = p.Close() })
	return p, rec
}

func launchFile(t *testing.T, dir string, mod func(*transport.Config)) (*transport.Plugin, *recorder) {
	t.Helper()
	return launchPlugin(t, "file", "file", map[string]string{"dir": dir}, mod)
}

func TestFileSinkThroughPlugin(t *testing.T) {
	dir := t.TempDir()
	p, rec := launchFile(t, dir, nil)
	assert.Equal(t, "file", p.Name())

	r := p.Deliver(context.Background(), message(t, "intent-1"))
	require.Equal(t, transport.Receipt{Outcome: transport.Accepted, Code: "file-written", ProviderRef: "intent-1.json"}, r)
	doc, err := os.ReadFile(filepath.Join(dir, "intent-1.json"))
	require.NoError(t, err)
	assert.JSONEq(t, `{"intent_id":"intent-1","attempt":1,"channel":"email","recipient":"ada@example.com",
		"parts":[{"name":"subject","content_type":"text/plain","body":"Hello"},{"name":"text","content_type":"text/plain","body":"Hello, Ada.\n"}]}`, string(doc))

	// A second attempt of the same intent is deduplicated, not rewritten.
	m := message(t, "intent-1")
	m.Attempt, m.Parts[1].Body = 2, []byte("changed")
	r = p.Deliver(context.Background(), m)
	assert.Equal(t, transport.Receipt{Outcome: transport.Accepted, Code: "file-exists", ProviderRef: "intent-1.json"}, r)
	doc2, err := os.ReadFile(filepath.Join(dir, "intent-1.json"))
	require.NoError(t, err)
	assert.Equal(t, doc, doc2)

	// A message the host refuses never reaches the plugin.
	bad := message(t, "../escape")
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "message-invalid"}, p.Deliver(context.Background(), bad))
	rec.mu.Lock()
	assert.Equal(t, map[transport.Outcome]int{transport.Accepted: 2, transport.RejectedDefinite: 1}, rec.calls)
	rec.mu.Unlock()

	require.NoError(t, p.Close())
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "plugin-closed"}, p.Deliver(context.Background(), message(t, "intent-2")))
}

func TestChecksumMismatchRefusesLaunch(t *testing.T) {
	path, sum := pluginBin(t, "file")
	wrong := strings.Repeat("0", 64)
	require.NotEqual(t, sum, wrong)
	rec := newRecorder()
	_, err := transport.Launch(context.Background(), transport.Config{Name: "file", Path: path, SHA256: wrong,
		Settings: map[string]string{"dir": t.TempDir()}, Observer: rec})
	require.ErrorIs(t, err, transport.ErrChecksumMismatch)
	require.ErrorIs(t, wait(t, rec.launches), transport.ErrChecksumMismatch)
}

func TestLaunchRefusesBadConfigAndSettings(t *testing.T) {
	path, sum := pluginBin(t, "file")
	_, err := transport.Launch(context.Background(), transport.Config{Name: "File!", Path: path, SHA256: sum})
	require.ErrorIs(t, err, transport.ErrConfig)
	_, err = transport.Launch(context.Background(), transport.Config{Name: "file", Path: "relative/file", SHA256: sum})
	require.ErrorIs(t, err, transport.ErrConfig)
	_, err = transport.Launch(context.Background(), transport.Config{Name: "file", Path: path, SHA256: sum,
		Settings: map[string]string{"dir": "x\nb"}})
	require.ErrorIs(t, err, transport.ErrConfig)

	// The plugin itself refuses a directory that does not exist; the error
	// names the key and a code, never the value.
	_, err = transport.Launch(context.Background(), transport.Config{Name: "file", Path: path, SHA256: sum,
		Settings: map[string]string{"dir": "/nonexistent/secret-looking-value"}})
	require.ErrorIs(t, err, transport.ErrSettingsRefused)
	assert.Contains(t, err.Error(), "setting dir: not-a-directory")
	assert.NotContains(t, err.Error(), "secret-looking-value")
}

// TestPluginEnvironmentIsMinimal: the plugin process sees go-plugin's
// handshake variables, the name of the host's namespaces it was launched
// out of, and nothing of the host's environment.
func TestPluginEnvironmentIsMinimal(t *testing.T) {
	t.Setenv("CAPHOST_REDIS_ADDR", "127.0.0.1:6379")
	t.Setenv("CAPHOST_SECRET_FOR_TEST", "hunter2")
	p, _ := launchFile(t, t.TempDir(), nil)
	pid := transport.PluginPID(p)
	require.NotZero(t, pid)
	env, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "environ"))
	require.NoError(t, err)
	var keys []string
	for _, kv := range strings.Split(strings.TrimRight(string(env), "\x00"), "\x00") {
		k, _, _ := strings.Cut(kv, "=")
		keys = append(keys, k)
	}
	assert.ElementsMatch(t, []string{"CAPHOST_TRANSPORT_PLUGIN", "PLUGIN_MIN_PORT", "PLUGIN_MAX_PORT", "PLUGIN_PROTOCOL_VERSIONS",
		"CAPHOST_TRANSPORT_NAMESPACES"}, keys)
	cmdline, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "cmdline"))
	require.NoError(t, err)
	assert.NotContains(t, string(cmdline), t.TempDir(), "settings never travel in argv")
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestRestartBackoff: each crash is followed by a restart whose delay
// doubles from BackoffMin up to BackoffMax, and an answered call brings it
// back to BackoffMin. The delays are the supervisor's decisions reported
// through the Observer (the metric hook), not measured times.
func TestRestartBackoff(t *testing.T) {
	p, rec := launchFile(t, t.TempDir(), nil)
	kill := func() restartEvent {
		t.Helper()
		pid := transport.PluginPID(p)
		require.NotZero(t, pid)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		ev := wait(t, rec.restarts)
		require.NoError(t, wait(t, rec.launches))
		return ev
	}
	var delays []time.Duration
	for range 4 {
		ev := kill()
		assert.Contains(t, []transport.RestartCause{transport.CauseExited, transport.CauseUnhealthy}, ev.cause)
		delays = append(delays, ev.delay)
	}
	assert.Equal(t, []time.Duration{5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}, delays)

	r := p.Deliver(context.Background(), message(t, "after-restarts"))
	require.Equal(t, transport.Accepted, r.Outcome, r.Code)
	assert.Equal(t, 5*time.Millisecond, kill().delay, "an answered call resets the backoff")
	require.Equal(t, transport.Accepted, p.Deliver(context.Background(), message(t, "after-reset")).Outcome)
}

// TestDeliverWhileRestartingIsDefinite: a call that finds no running plugin
// is refused before anything is handed over.
func TestDeliverWhileRestartingIsDefinite(t *testing.T) {
	p, rec := launchFile(t, t.TempDir(), func(c *transport.Config) { c.BackoffMin, c.BackoffMax = time.Hour, time.Hour })
	require.NoError(t, syscall.Kill(transport.PluginPID(p), syscall.SIGKILL))
	ev := wait(t, rec.restarts)
	assert.Equal(t, time.Hour, ev.delay)
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "plugin-unavailable"},
		p.Deliver(context.Background(), message(t, "during-restart")))
	require.NoError(t, p.Close(), "Close does not wait out the backoff")
}

func TestPluginLogLinesAreBounded(t *testing.T) {
	var buf logtest.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, _ := launchFile(t, t.TempDir(), func(c *transport.Config) { c.Logger = log })
	require.NoError(t, p.Close())
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == "" {
			continue
		}
		assert.Less(t, len(line), 2048, line)
		assert.Contains(t, line, `"transport":"file"`)
	}
}

// TestConcurrentDeliveriesAcrossACrash: calls from many goroutines while
// the plugin process is killed under them. Whatever the interleaving,
// every receipt is valid, an Accepted one means the file is there, and
// the plugin serves again after its restart. Run under -race.
func TestConcurrentDeliveriesAcrossACrash(t *testing.T) {
	dir := t.TempDir()
	p, rec := launchFile(t, dir, nil)
	type result struct {
		id string
		r  transport.Receipt
	}
	const workers, each = 8, 25
	results := make(chan result, workers*each)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range each {
				id := "c-" + strconv.Itoa(w) + "-" + strconv.Itoa(i)
				results <- result{id, p.Deliver(context.Background(), message(t, id))}
			}
		}()
	}
	close(start)
	first := <-results
	require.NoError(t, syscall.Kill(transport.PluginPID(p), syscall.SIGKILL))
	wg.Wait()
	close(results)
	all := append([]result{first}, collect(results)...)
	require.Len(t, all, workers*each)
	for _, res := range all {
		require.NoError(t, transport.ValidateReceipt(res.r))
		switch res.r.Outcome {
		case transport.Accepted:
			assert.FileExists(t, filepath.Join(dir, res.id+".json"))
		case transport.RejectedDefinite:
			assert.Contains(t, []string{"plugin-unavailable", "plugin-unreachable"}, res.r.Code)
		case transport.Indeterminate:
			assert.Contains(t, []string{"plugin-lost-after-send", "timeout-after-send"}, res.r.Code)
		}
	}
	wait(t, rec.restarts)
	require.NoError(t, wait(t, rec.launches))
	assert.Equal(t, transport.Accepted, p.Deliver(context.Background(), message(t, "after-crash")).Outcome)
}

func collect[T any](ch <-chan T) []T {
	var out []T
	for v := range ch {
		out = append(out, v)
	}
	return out
}

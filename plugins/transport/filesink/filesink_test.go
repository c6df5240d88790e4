package filesink

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/plugins/transport"
)

func message(t *testing.T, body string) transport.Message {
	rcpt, err := transport.NewRecipient("ops@example.com")
	require.NoError(t, err)
	return transport.Message{IntentID: "intent-7", Attempt: 1, Channel: "csv", Recipient: rcpt,
		Parts: []transport.Part{{Name: "csv", ContentType: "text/csv", Body: []byte(body)}}}
}

// TestConcurrentAttemptsWriteOnce: attempts of one intent racing each
// other leave exactly one document, the first linked, and no temp files.
func TestConcurrentAttemptsWriteOnce(t *testing.T) {
	dir := t.TempDir()
	s, err := New(map[string]string{"dir": dir}, transport.Env{})
	require.NoError(t, err)
	const n = 8
	start := make(chan struct{})
	codes := make(chan string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r := s.Deliver(context.Background(), message(t, "row,"+string(rune('a'+i))))
			assert.Equal(t, transport.Accepted, r.Outcome)
			codes <- r.Code
		}()
	}
	close(start)
	wg.Wait()
	close(codes)
	count := map[string]int{}
	for c := range codes {
		count[c]++
	}
	assert.Equal(t, map[string]int{"file-written": 1, "file-exists": n - 1}, count)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "intent-7.json", entries[0].Name())
}

func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	s, err := New(map[string]string{"dir": dir}, transport.Env{})
	require.NoError(t, err)
	m := message(t, "x")
	m.Parts[0].Body = []byte{0xff}
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "part-not-text"}, s.Deliver(context.Background(), m))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.Equal(t, transport.Receipt{Outcome: transport.RejectedDefinite, Code: "canceled-before-send"}, s.Deliver(ctx, message(t, "x")))
	_, err = os.Stat(filepath.Join(dir, "intent-7.json"))
	assert.ErrorIs(t, err, os.ErrNotExist)

	for settings, key := range map[*map[string]string]string{
		{"dir": "relative"}:                    "dir",
		{}:                                     "dir",
		{"dir": dir, "mode": "0600"}:           "mode",
		{"dir": filepath.Join(dir, "missing")}: "dir",
	} {
		_, err := New(*settings, transport.Env{})
		var se *transport.SettingError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, key, se.Key)
	}
}

// TestSandboxIsTheDirectory: the plugin may read and write its directory
// and nothing else, no network.
func TestSandboxIsTheDirectory(t *testing.T) {
	dir := t.TempDir()
	s, err := New(map[string]string{"dir": dir + "/"}, transport.Env{})
	require.NoError(t, err)
	assert.Equal(t, transport.Sandbox{WriteDirs: []string{dir}}, s.(transport.Sandboxed).Sandbox())
}

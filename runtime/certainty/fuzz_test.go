package certainty_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/runtime/certainty"
)

// FuzzServerCode checks that arbitrary server error text never escapes into
// the code, the error text or an invalid outcome.
func FuzzServerCode(f *testing.F) {
	seeds, err := os.ReadFile(filepath.Join("testdata", "server_errors.txt"))
	require.NoError(f, err)
	for _, line := range strings.Split(string(seeds), "\n") {
		if line != "" {
			f.Add(line, true)
			f.Add(line, false)
		}
	}
	f.Fuzz(func(t *testing.T, msg string, mutation bool) {
		code := certainty.ServerCode(msg)
		if code != "UNKNOWN" && !strings.HasPrefix(msg, code) {
			t.Fatalf("code %q is not the prefix of %q", code, msg)
		}
		o := certainty.Classify(serverErr(msg), mutation)
		if !o.Valid() || o == certainty.Applied {
			t.Fatalf("server error classified as %s", o)
		}
		if o.Retryable() {
			t.Fatalf("a server reply can never be retryable-before-send: %s", o)
		}
		e := certainty.Wrap("op", serverErr(msg), mutation)
		text := e.Error()
		rest := strings.TrimPrefix(msg, code)
		if len(rest) > 3 && strings.Contains(text, rest) {
			t.Fatalf("server text %q leaked into %q", rest, text)
		}
	})
}

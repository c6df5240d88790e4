package certainty_test

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/runtime/certainty"
)

func parseOutcome(t *testing.T, s string) certainty.Outcome {
	t.Helper()
	for _, o := range certainty.Outcomes() {
		if o.String() == s {
			return o
		}
	}
	t.Fatalf("unknown outcome %q", s)
	return 0
}

func TestGoldenServerErrors(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "server_errors.golden"))
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.SplitN(line, "|", 4)
		require.Len(t, parts, 4, line)
		msg := parts[3]
		assert.Equal(t, parseOutcome(t, parts[0]), certainty.Classify(serverErr(msg), true), "mutation: %s", msg)
		assert.Equal(t, parseOutcome(t, parts[1]), certainty.Classify(serverErr(msg), false), "read: %s", msg)
		assert.Equal(t, parts[2], certainty.ServerCode(msg), msg)
		assert.Equal(t, parts[2], certainty.Reason(serverErr(msg), true), msg)
		n++
	}
	require.NoError(t, sc.Err())
	assert.GreaterOrEqual(t, n, 20)
}

package extism

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
	"github.com/caphost/caphost/plugins"
)

func init() {
	testGuests["timeleak-extism"] = "plugins/extism/testdata/guests/timeleak"
	// A native guest importing caphost_v1, which this engine refuses.
	testGuests["hostcalls"] = "testdata/guests/hostcalls"
}

// As in the native flavour, a module links only the host functions it was
// granted: the refusal names the Extism import and the grant it needs.
func TestExtismGrantsDecideWhichImportsLink(t *testing.T) {
	ctx := context.Background()
	e := newExtism(t, plugins.Config{})
	wasm := th.wasm["rate-policy-extism"] // imports caphost_log and caphost_count

	_, err := e.Load(ctx, "rate", wasm, plugins.Limits{})
	ge := requireClass(t, err, plugins.ClassForbiddenImport)
	assert.Contains(t, ge.Detail, "extism:host/user.caphost_log (not granted: add log to the module's grants)")
	assert.Contains(t, ge.Detail, "extism:host/user.caphost_count (not granted: add count to the module's grants)")

	_, err = e.Load(ctx, "rate", wasm, plugins.Limits{Grants: plugins.GrantLog})
	ge = requireClass(t, err, plugins.ClassForbiddenImport)
	assert.NotContains(t, ge.Detail, "caphost_log")
	assert.Contains(t, ge.Detail, "extism:host/user.caphost_count (not granted")

	m, err := e.Load(ctx, "rate", wasm, plugins.Limits{Grants: plugins.GrantLog | plugins.GrantCount, CallTimeout: 5 * time.Second})
	require.NoError(t, err)
	_, err = plugins.RateSelect(ctx, m, &abi.RateSelectRequest{Route: "/", Method: "GET", APIKeyPlan: "pro"})
	require.NoError(t, err)
}

// The Extism flavour gives no instance the host's clock or entropy either
// (plugins/internal/wasipolicy): two modules answer the same virtual time
// near wazero's 2022 epoch and the same "randomness".
func TestExtismSeesNoHostClockOrEntropy(t *testing.T) {
	ctx := context.Background()
	lim := plugins.Limits{CallTimeout: 5 * time.Second, InitTimeout: 30 * time.Second}
	leak := func() string {
		m := loadExt(t, newExtism(t, plugins.Config{}), "timeleak-extism", lim)
		r, err := plugins.RateSelect(ctx, m, &abi.RateSelectRequest{Route: "/", Method: "GET"})
		require.NoError(t, err)
		return r.Selections[0].Dimensions[0]
	}
	a, b := leak(), leak()
	nanos, _, ok := strings.Cut(a, " ")
	require.True(t, ok, a)
	ns, err := strconv.ParseInt(nanos, 10, 64)
	require.NoError(t, err)
	epoch := time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)
	seen := time.Unix(0, ns).UTC()
	assert.True(t, !seen.Before(epoch) && seen.Before(epoch.Add(24*time.Hour)), "the guest saw %s, not the virtual clock near %s", seen, epoch)
	assert.Equal(t, a, b, "two modules read the same clock and the same entropy: neither is the host's")
}

package plugins

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/abi"
)

func init() {
	testGuests = append(testGuests, "plugins/testdata/guests/timeleak")
}

// fakeEpoch is where wazero's virtual wall clock starts (2022-01-01 UTC).
var fakeEpoch = time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)

// No kind is given the host's clock or entropy (plugins/internal/wasipolicy):
// timeleak answers what it reads of time.Now and crypto/rand through every
// kind, and each answer shows the virtual clock near its 2022 epoch, not
// the host's, and the same "randomness" in two separate modules.
func TestNoKindSeesHostClockOrEntropy(t *testing.T) {
	ctx := context.Background()
	lim := Limits{CallTimeout: 5 * time.Second}
	a := load(t, newEngine(t, Config{}), "timeleak", lim)
	b := load(t, newEngine(t, Config{}), "timeleak", lim)
	leaks := []struct {
		kind abi.Kind
		call func(m *Module) (string, error)
	}{
		{abi.KindCodec, func(m *Module) (string, error) {
			r, err := m.CodecEncode(ctx, &abi.CodecEncodeRequest{Schema: "leak"})
			if err != nil {
				return "", err
			}
			return string(r.Payload), nil
		}},
		{abi.KindCacheRegion, func(m *Module) (string, error) {
			r, err := m.Canonicalize(ctx, &abi.CanonicalizeRequest{Region: "leak"})
			if err != nil {
				return "", err
			}
			return r.Parts[0], nil
		}},
		{abi.KindRatePolicy, func(m *Module) (string, error) {
			r, err := m.RateSelect(ctx, &abi.RateSelectRequest{Route: "/", Method: "GET"})
			if err != nil {
				return "", err
			}
			return r.Selections[0].Dimensions[0], nil
		}},
		{abi.KindRenderer, func(m *Module) (string, error) {
			r, err := m.Render(ctx, &abi.RenderRequest{Template: "leak", Version: 1, Locale: "en", Channel: "text", NowUnixMilli: time.Now().UnixMilli()})
			if err != nil {
				return "", err
			}
			return string(r.Parts[0].Body), nil
		}},
	}
	require.Len(t, leaks, len(abi.Kinds()), "every v1 kind")
	for _, l := range leaks {
		t.Run(string(l.kind), func(t *testing.T) {
			la, err := l.call(a)
			require.NoError(t, err)
			lb, err := l.call(b)
			require.NoError(t, err)
			nanos, rnd, ok := strings.Cut(la, " ")
			require.True(t, ok, la)
			ns, err := strconv.ParseInt(nanos, 10, 64)
			require.NoError(t, err)
			seen := time.Unix(0, ns).UTC()
			assert.False(t, seen.Before(fakeEpoch), "the guest saw %s", seen)
			assert.True(t, seen.Before(fakeEpoch.Add(24*time.Hour)), "the guest saw %s, not the virtual clock near %s", seen, fakeEpoch)
			assert.Len(t, rnd, 16)
			assert.Equal(t, la, lb, "two modules read the same clock and the same entropy: neither is the host's")
		})
	}
}

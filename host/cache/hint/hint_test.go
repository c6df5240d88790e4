package hint_test

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/hint"
)

func TestRoundTrip(t *testing.T) {
	c := newCodec(t, secret, t0)
	for _, m := range []hint.Message{keyMessage(), regionMessage(), largestMessage()} {
		m.Region = "region.v2_x-1"
		m.IssuedAt = t0.Add(-1500*time.Microsecond - 7) // sub-millisecond: truncated on the wire
		b := seal(t, c, m)
		assert.LessOrEqual(t, len(b), hint.MaxBytes)
		got, err := c.Open(b)
		require.NoError(t, err, m.Kind)
		want := m
		want.IssuedAt = t0.Add(-2 * time.Millisecond)
		assert.Equal(t, want, got)
		assert.Equal(t, time.UTC, got.IssuedAt.Location())
		assert.Equal(t, b, seal(t, c, got))
	}
}

func TestSealRefusesInvalidMessages(t *testing.T) {
	c := newCodec(t, secret, t0)
	for name, mutate := range map[string]func(*hint.Message){
		"zero kind":               func(m *hint.Message) { m.Kind = 0 },
		"unknown kind":            func(m *hint.Message) { m.Kind = 3 },
		"empty region":            func(m *hint.Message) { m.Region = "" },
		"long region":             func(m *hint.Message) { m.Region = string(bytes.Repeat([]byte("a"), hint.MaxRegionBytes+1)) },
		"upper-case region":       func(m *hint.Message) { m.Region = "Items" },
		"region starting with -":  func(m *hint.Message) { m.Region = "-items" },
		"region with a colon":     func(m *hint.Message) { m.Region = "items:7" },
		"zero sender":             func(m *hint.Message) { m.Sender = [16]byte{} },
		"zero time":               func(m *hint.Message) { m.IssuedAt = time.Time{} },
		"before 1970":             func(m *hint.Message) { m.IssuedAt = time.Unix(0, -1) },
		"zero location":           func(m *hint.Message) { m.Location = [hint.LocationBytes]byte{} },
		"no scope":                func(m *hint.Message) { m.Scope = nil },
		"long scope":              func(m *hint.Message) { m.Scope = make([]byte, hint.MaxScopeBytes+1) },
		"region hint + location":  func(m *hint.Message) { m.Kind = hint.RegionInvalidated; m.Scope = nil },
		"region hint + scope":     func(m *hint.Message) { m.Kind = hint.RegionInvalidated; m.Location = [32]byte{} },
		"region hint + empty one": func(m *hint.Message) { *m = regionMessage(); m.Scope = []byte{} }, // allowed, see below
	} {
		m := keyMessage()
		mutate(&m)
		_, err := c.Seal(m)
		if name == "region hint + empty one" {
			require.NoError(t, err, "an empty non-nil scope is no scope")
			continue
		}
		require.ErrorIs(t, err, hint.ErrInvalid, name)
		var he *hint.Error
		require.ErrorAs(t, err, &he, name)
		assert.NotEmpty(t, he.Reason)
	}
	// The edges of the bounds are valid.
	m := largestMessage()
	m.IssuedAt = time.Unix(0, 0)
	_, err := c.Seal(m)
	require.NoError(t, err)
}

// Every single-bit change anywhere in a hint is refused: in the magic as
// not a hint, in the version as another version, anywhere else by the tag.
func TestEveryBitFlipFails(t *testing.T) {
	c := newCodec(t, secret, t0)
	for _, m := range []hint.Message{keyMessage(), regionMessage()} {
		b := seal(t, c, m)
		for i := range len(b) * 8 {
			f := bytes.Clone(b)
			f[i/8] ^= 1 << (i % 8)
			_, err := c.Open(f)
			switch {
			case i/8 < 4:
				require.ErrorIs(t, err, hint.ErrMalformed, "bit %d", i)
			case i/8 == 4:
				require.ErrorIs(t, err, hint.ErrUnknownVersion, "bit %d", i)
			default:
				require.ErrorIs(t, err, hint.ErrForged, "bit %d", i)
			}
		}
	}
}

func TestOtherSecretIsForged(t *testing.T) {
	b := seal(t, newCodec(t, otherSecret, t0), keyMessage())
	_, err := newCodec(t, secret, t0).Open(b)
	require.ErrorIs(t, err, hint.ErrForged)
	assert.NotErrorIs(t, err, hint.ErrStale)
	// One byte apart is another secret. (Appending zero bytes would not be:
	// HMAC pads a key shorter than its block with zeros, a property of
	// HMAC that random secrets never meet.)
	near := bytes.Clone(secret)
	near[len(near)-1] ^= 1
	_, err = newCodec(t, near, t0).Open(seal(t, newCodec(t, secret, t0), keyMessage()))
	require.ErrorIs(t, err, hint.ErrForged)
}

func TestOpenShortAndLongInput(t *testing.T) {
	c := newCodec(t, secret, t0)
	for _, b := range [][]byte{nil, {}, {0xC5}, []byte("\xc5HNT"), []byte(`{"kind":"key"}`)} {
		_, err := c.Open(b)
		require.ErrorIs(t, err, hint.ErrMalformed, "%x", b)
	}
	_, err := c.Open(append([]byte("\xc5HNT\x01"), make([]byte, 4096)...))
	require.ErrorIs(t, err, hint.ErrMalformed)
}

// The window includes its edges on both sides, to the nanosecond of the
// receiver's clock.
func TestWindowEdges(t *testing.T) {
	b := seal(t, newCodec(t, secret, t0), keyMessage()) // issued at t0
	for _, tc := range []struct {
		now  time.Time
		want error
	}{
		{t0, nil},
		{t0.Add(window), nil},
		{t0.Add(window + time.Nanosecond), hint.ErrStale},
		{t0.Add(-window), nil},
		{t0.Add(-window - time.Nanosecond), hint.ErrFuture},
		{t0.Add(24 * time.Hour), hint.ErrStale},
		{time.Time{}, hint.ErrFuture},
	} {
		_, err := newCodec(t, secret, tc.now).Open(b)
		if tc.want == nil {
			require.NoError(t, err, "now %s", tc.now)
			continue
		}
		require.ErrorIs(t, err, tc.want, "now %s", tc.now)
		assert.ErrorIs(t, err, hint.ErrStale, "both sides match ErrStale")
	}
	_, err := newCodec(t, secret, t0.Add(time.Hour)).Open(b)
	assert.NotErrorIs(t, err, hint.ErrFuture, "a stale hint is not from the future")
}

func TestNewCodecBounds(t *testing.T) {
	clock := func() time.Time { return t0 }
	for name, tc := range map[string]struct {
		secret []byte
		window time.Duration
		clock  func() time.Time
	}{
		"short secret":  {secret[:31], window, clock},
		"long secret":   {make([]byte, hint.MaxSecretBytes+1), window, clock},
		"no secret":     {nil, window, clock},
		"short window":  {secret, hint.MinWindow - time.Nanosecond, clock},
		"long window":   {secret, hint.MaxWindow + time.Nanosecond, clock},
		"no window":     {secret, 0, clock},
		"no clock":      {secret, window, nil},
		"negative span": {secret, -window, clock},
	} {
		c, err := hint.NewCodec(tc.secret, tc.window, tc.clock)
		require.ErrorIs(t, err, hint.ErrInvalid, name)
		assert.Nil(t, c, name)
	}
	for _, w := range []time.Duration{hint.MinWindow, hint.MaxWindow} {
		c, err := hint.NewCodec(make([]byte, hint.MaxSecretBytes), w, clock)
		require.NoError(t, err)
		assert.Equal(t, w, c.Window())
	}
}

// The secret, and the key derived from it, never reach fmt, slog or an
// error.
func TestSecretNeverPrinted(t *testing.T) {
	c := newCodec(t, secret, t0)
	forbidden := []string{string(secret), hex.EncodeToString(secret), string(macKey(secret)), hex.EncodeToString(macKey(secret)),
		fmt.Sprintf("%v", macKey(secret)), fmt.Sprintf("%x", secret[:8]), fmt.Sprintf("%v", secret[:8])}
	var out []string
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		out = append(out, fmt.Sprintf(verb, c))
	}
	out = append(out, c.String(), c.GoString())
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("codec", "codec", c)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("codec", "codec", c)
	out = append(out, logs.String())
	for _, name := range []string{"tamper_tag", "other_secret", "stale", "signed_region", "too_long"} {
		_, err := c.Open(readHex(t, name))
		require.Error(t, err)
		out = append(out, err.Error())
	}
	_, err := hint.NewCodec(secret[:31], window, time.Now)
	out = append(out, err.Error())
	for _, s := range out {
		for _, f := range forbidden {
			assert.NotContains(t, s, f)
		}
	}
	assert.Equal(t, "hint.Codec(v1 hmac-sha256 window=30s key=***)", fmt.Sprintf("%+v", c))
	assert.Contains(t, logs.String(), `"key":"***"`)
	var nilCodec *hint.Codec
	assert.Equal(t, "hint.Codec(nil)", fmt.Sprint(nilCodec))
}

func TestOpenKeepsNoReferenceToInput(t *testing.T) {
	c := newCodec(t, secret, t0)
	b := seal(t, c, keyMessage())
	m, err := c.Open(b)
	require.NoError(t, err)
	clear(b)
	assert.Equal(t, keyMessage(), m)
}

func TestCodecIsSafeForConcurrentUse(t *testing.T) {
	c := newCodec(t, secret, t0)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				m := keyMessage()
				m.Scope = []byte{byte(i), byte(j)}
				b, err := c.Seal(m)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := c.Open(b)
				if err != nil || !bytes.Equal(got.Scope, m.Scope) {
					t.Errorf("round trip: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestCategoriesAndKinds(t *testing.T) {
	names := map[string]bool{}
	for _, c := range hint.Categories() {
		require.True(t, c.Valid())
		assert.False(t, names[c.String()])
		names[c.String()] = true
		assert.Equal(t, "cache hint: "+c.String(), c.Error())
		assert.Equal(t, c == hint.ErrFuture || c == hint.ErrStale, errors.Is(c, hint.ErrStale), c)
	}
	assert.Len(t, names, 6)
	assert.Equal(t, "INVALID_CATEGORY", hint.Category(0).String())
	assert.False(t, hint.Category(7).Valid())
	assert.Equal(t, "KEY_INVALIDATED", hint.KeyInvalidated.String())
	assert.Equal(t, "REGION_INVALIDATED", hint.RegionInvalidated.String())
	assert.Equal(t, "INVALID_KIND", hint.Kind(0).String())
	assert.False(t, hint.Kind(0).Valid())
	err := error(&hint.Error{Category: hint.ErrForged, Reason: "tag mismatch"})
	assert.Equal(t, "cache hint: FORGED: tag mismatch", err.Error())
	assert.NotErrorIs(t, err, hint.ErrMalformed)
}

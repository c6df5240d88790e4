package envelope_test

import (
	"bytes"
	"compress/flate"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/envelope"
)

func category(t *testing.T, err error) envelope.Category {
	t.Helper()
	var ee *envelope.Error
	require.ErrorAs(t, err, &ee)
	return ee.Category
}

func deflate(t testing.TB, p []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, err := flate.NewWriter(&b, flate.BestCompression)
	require.NoError(t, err)
	_, err = w.Write(p)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	return b.Bytes()
}

func base() envelope.Envelope {
	return envelope.Envelope{
		CodecID: "example.item", PayloadVersion: 1,
		WrittenAt: t0, SoftExpiresAt: t0.Add(time.Second), HardExpiresAt: t0.Add(time.Minute),
		Payload: []byte("value"),
	}
}

func TestCategoriesAreClosedAndMatchTheirCodes(t *testing.T) {
	codes := map[envelope.Category]error{
		envelope.Corrupt:         envelope.ErrCorrupt,
		envelope.FutureVersion:   envelope.ErrSchemaMismatch,
		envelope.RetiredVersion:  envelope.ErrSchemaMismatch,
		envelope.UnknownEnvelope: envelope.ErrSchemaMismatch,
		envelope.TooLarge:        envelope.ErrTooLarge,
		envelope.Invalid:         envelope.ErrInvalid,
	}
	sentinels := []error{envelope.ErrCorrupt, envelope.ErrSchemaMismatch, envelope.ErrTooLarge, envelope.ErrInvalid}
	require.Len(t, envelope.Categories(), len(codes))
	for _, c := range envelope.Categories() {
		assert.True(t, c.Valid())
		err := error(&envelope.Error{Category: c, Reason: "r"})
		wrapped := errors.Join(errors.New("context"), err)
		for _, s := range sentinels {
			assert.Equal(t, s == codes[c], errors.Is(wrapped, s), "%s vs %v", c, s)
		}
		for _, other := range envelope.Categories() {
			assert.Equal(t, other == c, errors.Is(wrapped, other), "%s vs %s", c, other)
		}
		assert.Contains(t, err.Error(), c.String())
		assert.Equal(t, strings.TrimPrefix(codes[c].Error(), "cache envelope: "), c.Code())
	}
	assert.False(t, envelope.Category(0).Valid())
	assert.Equal(t, "INVALID_CATEGORY", envelope.Category(0).String())
	assert.Equal(t, "INVALID_CATEGORY", envelope.Category(99).Code())
}

func TestLimitsAreMandatory(t *testing.T) {
	require.NoError(t, lim.Validate())
	for name, mut := range map[string]func(*envelope.Limits){
		"zero":            func(l *envelope.Limits) { *l = envelope.Limits{} },
		"encoded small":   func(l *envelope.Limits) { l.MaxEncodedBytes = 10 },
		"encoded cap":     func(l *envelope.Limits) { l.MaxEncodedBytes = envelope.CapEncodedBytes + 1 },
		"codec id zero":   func(l *envelope.Limits) { l.MaxCodecIDBytes = 0 },
		"codec id cap":    func(l *envelope.Limits) { l.MaxCodecIDBytes = 256 },
		"payload zero":    func(l *envelope.Limits) { l.MaxPayloadBytes = 0 },
		"payload cap":     func(l *envelope.Limits) { l.MaxPayloadBytes = envelope.CapPayloadBytes + 1 },
		"ratio zero":      func(l *envelope.Limits) { l.MaxCompressionRatio = 0 },
		"ratio cap":       func(l *envelope.Limits) { l.MaxCompressionRatio = envelope.CapCompressionRatio + 1 },
		"negative ratio":  func(l *envelope.Limits) { l.MaxCompressionRatio = -1 },
		"negative encode": func(l *envelope.Limits) { l.MaxEncodedBytes = -1 },
	} {
		l := lim
		mut(&l)
		err := l.Validate()
		assert.ErrorIs(t, err, envelope.ErrInvalid, name)
		_, err = envelope.Encode(base(), l)
		assert.ErrorIs(t, err, envelope.ErrInvalid, name)
		_, err = envelope.Decode(readHex(t, "v2_positive"), l)
		assert.ErrorIs(t, err, envelope.ErrInvalid, name)
	}
}

func TestEncodeRejects(t *testing.T) {
	cases := map[string]struct {
		mut  func(*envelope.Envelope)
		want envelope.Category
	}{
		"empty codec id":        {func(e *envelope.Envelope) { e.CodecID = "" }, envelope.Invalid},
		"codec id charset":      {func(e *envelope.Envelope) { e.CodecID = "a b" }, envelope.Invalid},
		"codec id non-ascii":    {func(e *envelope.Envelope) { e.CodecID = "café" }, envelope.Invalid},
		"codec id too long":     {func(e *envelope.Envelope) { e.CodecID = strings.Repeat("a", 65) }, envelope.TooLarge},
		"negative with payload": {func(e *envelope.Envelope) { e.Negative = true }, envelope.Invalid},
		"negative compressed":   {func(e *envelope.Envelope) { e.Negative, e.Payload, e.Compressed = true, nil, true }, envelope.Invalid},
		"no written-at":         {func(e *envelope.Envelope) { e.WrittenAt = time.Time{} }, envelope.Invalid},
		"no hard expiry":        {func(e *envelope.Envelope) { e.HardExpiresAt = time.Time{} }, envelope.Invalid},
		"before 1970":           {func(e *envelope.Envelope) { e.WrittenAt = time.Unix(-1, 0) }, envelope.Invalid},
		"past 2^53 ms":          {func(e *envelope.Envelope) { e.HardExpiresAt = time.UnixMilli(1 << 53) }, envelope.Invalid},
		"hard before written":   {func(e *envelope.Envelope) { e.HardExpiresAt = t0.Add(-time.Millisecond) }, envelope.Invalid},
		"soft before written":   {func(e *envelope.Envelope) { e.SoftExpiresAt = t0.Add(-time.Millisecond) }, envelope.Invalid},
		"soft after hard":       {func(e *envelope.Envelope) { e.SoftExpiresAt = t0.Add(time.Hour) }, envelope.Invalid},
		"payload too large":     {func(e *envelope.Envelope) { e.Payload = make([]byte, lim.MaxPayloadBytes+1) }, envelope.TooLarge},
	}
	for name, c := range cases {
		e := base()
		c.mut(&e)
		_, err := envelope.Encode(e, lim)
		assert.Equal(t, c.want, category(t, err), name)
	}
	// The encoded size bound is separate from the payload bound.
	l := lim
	l.MaxPayloadBytes, l.MaxEncodedBytes = 1000, 1000
	e := base()
	e.Payload = make([]byte, 1000)
	_, err := envelope.Encode(e, l)
	assert.ErrorIs(t, err, envelope.ErrTooLarge)
	e.Payload = make([]byte, 1000-(4+1+1+12+4+1+8+8+8+4+16))
	_, err = envelope.Encode(e, l)
	assert.NoError(t, err, "exactly at the bound")
	// Boundaries that are allowed.
	e = base()
	e.SoftExpiresAt, e.HardExpiresAt = t0, t0
	_, err = envelope.Encode(e, lim)
	assert.NoError(t, err, "written = soft = hard")
	e.WrittenAt, e.SoftExpiresAt, e.HardExpiresAt = time.UnixMilli(0), time.Time{}, time.UnixMilli(1<<53-1)
	_, err = envelope.Encode(e, lim)
	assert.NoError(t, err, "epoch 0 to 2^53-1 ms")
}

func TestRoundTripKeepsEveryField(t *testing.T) {
	for _, e := range []envelope.Envelope{
		base(),
		{CodecID: "x", WrittenAt: t0, HardExpiresAt: t0},
		{CodecID: "a.b/c:d@e+f-g_h", PayloadVersion: 1<<32 - 1, HasSourceRevision: true, SourceRevision: 1<<64 - 1,
			WrittenAt: t0, HardExpiresAt: t0.Add(time.Hour), Payload: []byte{0}},
		{CodecID: "neg", Negative: true, HasSourceRevision: true, WrittenAt: t0, HardExpiresAt: t0.Add(time.Second)},
	} {
		b, err := envelope.Encode(e, lim)
		require.NoError(t, err)
		got, err := envelope.Decode(b, lim)
		require.NoError(t, err)
		e.EnvelopeVersion = 2
		assert.Equal(t, e, got)
		again, err := envelope.Encode(got, lim)
		require.NoError(t, err)
		assert.Equal(t, b, again)
	}
}

func TestEncodeTruncatesToMillis(t *testing.T) {
	e := base()
	e.WrittenAt = t0.Add(999 * time.Microsecond)
	b, err := envelope.Encode(e, lim)
	require.NoError(t, err)
	got, err := envelope.Decode(b, lim)
	require.NoError(t, err)
	assert.Equal(t, t0, got.WrittenAt)
}

func TestCompressionIsKeptOnlyWhenItPays(t *testing.T) {
	random := make([]byte, 4096)
	_, _ = rand.Read(random)
	zeros := make([]byte, 16<<10) // compresses ~500:1, above the 64:1 limit
	text := compressiblePayload()
	for name, c := range map[string]struct {
		payload []byte
		want    bool
	}{
		"random (does not shrink)":  {random, false},
		"zeros (ratio above limit)": {zeros, false},
		"text":                      {text, true},
	} {
		e := base()
		e.Payload, e.Compressed = c.payload, true
		b, err := envelope.Encode(e, lim)
		require.NoError(t, err, name)
		got, err := envelope.Decode(b, lim)
		require.NoError(t, err, name)
		assert.Equal(t, c.want, got.Compressed, name)
		assert.Equal(t, c.payload, got.Payload, name)
		if c.want {
			assert.Less(t, len(b), len(c.payload)/4, name)
		}
	}
	assert.False(t, envelope.ShouldCompress(100, 0), "threshold 0 is off")
	assert.False(t, envelope.ShouldCompress(100, 100))
	assert.True(t, envelope.ShouldCompress(101, 100))
}

func TestDecodeRejectsEveryPrefix(t *testing.T) {
	for _, name := range []string{"v2_positive", "v2_negative", "v2_compressed", "v1"} {
		b := readHex(t, name)
		for n := 0; n < len(b); n++ {
			_, err := envelope.Decode(b[:n], lim)
			want := envelope.Corrupt
			if n == 0 {
				want = envelope.UnknownEnvelope
			}
			assert.Equal(t, want, category(t, err), "%s[:%d]", name, n)
		}
	}
}

func TestDecodeCorrupt(t *testing.T) {
	u32 := func(v uint32) *uint32 { return &v }
	z := deflate(t, []byte(strings.Repeat("abc", 100)))
	for name, r := range map[string]rawV2{
		"negative with payload":   {flags: 1, hard: 1, stored: []byte("x")},
		"negative compressed":     {flags: 3, hard: 1, decodedLen: 300, stored: z},
		"compressed empty":        {flags: 2, hard: 1, decodedLen: 1},
		"compressed zero decoded": {flags: 2, hard: 1, decodedLen: 0, stored: z},
		"reserved flag":           {flags: 0x10, hard: 1},
		"v1 with revision flag":   {version: 1, flags: 4, hard: 1},
		"hard before written":     {written: 2, hard: 1},
		"soft before written":     {flags: 8, written: 2, soft: 1, hard: 3},
		"soft after hard":         {flags: 8, soft: 4, hard: 3},
		"time past 2^53":          {hard: 1 << 53},
		"codec id charset":        {codecID: "a\x00b", hard: 1},
		"length longer":           {hard: 1, storedLen: u32(2), stored: []byte("x")},
		"length shorter":          {hard: 1, storedLen: u32(0), stored: []byte("x")},
		"deflate shorter":         {flags: 2, hard: 1, decodedLen: 301, stored: z},
		"deflate longer":          {flags: 2, hard: 1, decodedLen: 299, stored: z},
		"deflate trailing bytes":  {flags: 2, hard: 1, decodedLen: 300, stored: append(bytes.Clone(z), 0)},
		"deflate garbage":         {flags: 2, hard: 1, decodedLen: 4, stored: []byte{0xff, 0xff, 0xff, 0xff}},
		"deflate not final block": {flags: 2, hard: 1, decodedLen: 300, stored: z[:len(z)-1]},
		"codec id length zero":    {codecID: "\x00", hard: 1},
		"v1 compressed garbage":   {version: 1, flags: 2, hard: 1, decodedLen: 4, stored: []byte{1, 2}},
	} {
		b := r.bytes()
		if name == "codec id length zero" {
			b[5] = 0 // an id length of zero, the rest shifted
		}
		_, err := envelope.Decode(b, lim)
		assert.Equal(t, envelope.Corrupt, category(t, err), "%s: %v", name, err)
	}
	// The same builder produces valid envelopes when the fields are valid.
	e, err := envelope.Decode(rawV2{flags: 2 | 4 | 8, revision: 9, written: 1, soft: 2, hard: 3, decodedLen: 300, stored: z}.bytes(), lim)
	require.NoError(t, err)
	assert.Equal(t, strings.Repeat("abc", 100), string(e.Payload))
	assert.True(t, e.Compressed)
}

func TestDecodeTooLargeReadsNothingPastTheBound(t *testing.T) {
	l := lim
	l.MaxCodecIDBytes = 8
	_, err := envelope.Decode(rawV2{codecID: "longer.than.8", hard: 1}.bytes(), l)
	assert.Equal(t, envelope.TooLarge, category(t, err), "codec id")

	_, err = envelope.Decode(make([]byte, lim.MaxEncodedBytes+1), lim)
	assert.Equal(t, envelope.TooLarge, category(t, err), "the bounded read's extra byte")

	l = lim
	l.MaxPayloadBytes = 10
	_, err = envelope.Decode(rawV2{hard: 1, stored: make([]byte, 11)}.bytes(), l)
	assert.Equal(t, envelope.TooLarge, category(t, err), "payload")
	_, err = envelope.Decode(rawV2{flags: 2, hard: 1, decodedLen: 11, stored: []byte{1}}.bytes(), l)
	assert.Equal(t, envelope.TooLarge, category(t, err), "declared decoded size")
	_, err = envelope.Decode(rawV2{flags: 2, hard: 1, decodedLen: 1 << 31, stored: []byte{1}}.bytes(), lim)
	assert.Equal(t, envelope.TooLarge, category(t, err), "declared decoded size 2 GiB")

	l = lim
	l.MaxCompressionRatio = 4
	z := deflate(t, make([]byte, 1000))
	_, err = envelope.Decode(rawV2{flags: 2, hard: 1, decodedLen: 1000, stored: z}.bytes(), l)
	assert.Equal(t, envelope.TooLarge, category(t, err), "ratio %d:1", 1000/len(z))
}

func TestDecodeSchemaMismatch(t *testing.T) {
	for v := 3; v < 256; v++ {
		_, err := envelope.Decode(rawV2{version: byte(v), hard: 1}.bytes(), lim)
		assert.Equal(t, envelope.FutureVersion, category(t, err), "version %d", v)
		assert.ErrorIs(t, err, envelope.ErrSchemaMismatch)
	}
	for _, b := range [][]byte{
		[]byte("x"), []byte(`{"json":true}`), []byte("plain text value"), {0x1f, 0x8b, 8, 0}, {0xC5, 'C', 'A', 'X', 2},
	} {
		_, err := envelope.Decode(b, lim)
		assert.Equal(t, envelope.UnknownEnvelope, category(t, err), "%q", b)
		assert.False(t, errors.Is(err, envelope.ErrCorrupt))
	}
}

func TestDecodeAliasesUncompressedPayload(t *testing.T) {
	b := readHex(t, "v2_positive")
	e, err := envelope.Decode(b, lim)
	require.NoError(t, err)
	assert.Equal(t, len(e.Payload), cap(e.Payload), "capacity ends at the payload: an append never writes into the input")
	assert.Same(t, &b[len(b)-len(e.Payload)], &e.Payload[0])
}

func TestState(t *testing.T) {
	e := base() // soft +1 s, hard +1 min
	for _, c := range []struct {
		at   time.Duration
		want envelope.Freshness
	}{
		{-time.Hour, envelope.Fresh},
		{0, envelope.Fresh},
		{time.Second - time.Millisecond, envelope.Fresh},
		{time.Second - time.Microsecond, envelope.Fresh}, // millisecond precision, like the wire
		{time.Second, envelope.Stale},
		{time.Minute - time.Millisecond, envelope.Stale},
		{time.Minute, envelope.Expired},
		{24 * time.Hour, envelope.Expired},
	} {
		assert.Equal(t, c.want, e.State(t0.Add(c.at)), "%v", c.at)
	}
	e.SoftExpiresAt = time.Time{}
	assert.Equal(t, envelope.Fresh, e.State(t0.Add(time.Minute-time.Millisecond)), "no soft expiry: fresh until hard")
	assert.Equal(t, envelope.Expired, e.State(t0.Add(time.Minute)))
	e.SoftExpiresAt = e.HardExpiresAt
	assert.Equal(t, envelope.Fresh, e.State(t0.Add(time.Minute-time.Millisecond)), "soft = hard: no stale window")
	assert.Equal(t, envelope.Expired, e.State(t0.Add(time.Minute)))
	assert.Equal(t, "FRESH", envelope.Fresh.String())
	assert.Equal(t, "STALE", envelope.Stale.String())
	assert.Equal(t, "EXPIRED", envelope.Expired.String())
	assert.Equal(t, "INVALID_FRESHNESS", envelope.Freshness(0).String())
}

func TestTombstone(t *testing.T) {
	id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	ts := envelope.NewTombstone(id)
	require.Len(t, ts, envelope.TombstoneLen)
	assert.Equal(t, append([]byte{0xC5, 'T', 'M', 'B', 1}, id[:]...), ts)
	assert.True(t, envelope.IsTombstone(ts))
	for name, b := range map[string][]byte{
		"short":     ts[:envelope.TombstoneLen-1],
		"long":      append(append([]byte(nil), ts...), 0),
		"version 2": append([]byte{0xC5, 'T', 'M', 'B', 2}, id[:]...),
		"envelope":  append([]byte{0xC5, 'C', 'A', 'P', 1}, id[:]...),
		"empty":     nil,
	} {
		assert.False(t, envelope.IsTombstone(b), name)
	}
	// An entry decoder never reads a tombstone as an entry.
	_, err := envelope.Decode(ts, envelope.Limits{MaxEncodedBytes: 1 << 10, MaxCodecIDBytes: 64, MaxPayloadBytes: 1 << 10, MaxCompressionRatio: 8})
	assert.ErrorIs(t, err, envelope.UnknownEnvelope)
}

package envelope_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/envelope"
)

// TestMemoDecodesAsDecode: an envelope decoded through a memo, the first
// time and again from the memo, decodes exactly as Decode does.
func TestMemoDecodesAsDecode(t *testing.T) {
	m := envelope.NewMemo(4)
	for _, e := range []envelope.Envelope{base(),
		{CodecID: "neg", Negative: true, WrittenAt: t0, HardExpiresAt: t0.Add(time.Second)},
		{CodecID: "z", WrittenAt: t0, HardExpiresAt: t0.Add(time.Minute), Payload: []byte(strings.Repeat("abc", 200)), Compressed: true},
	} {
		b, err := envelope.Encode(e, lim)
		require.NoError(t, err)
		want, err := envelope.Decode(b, lim)
		require.NoError(t, err)
		for range 3 {
			got, err := m.Decode(b, lim)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		}
	}
	var none *envelope.Memo
	b, err := envelope.Encode(base(), lim)
	require.NoError(t, err)
	_, err = none.Decode(b, lim)
	require.NoError(t, err, "a nil memo decodes and remembers nothing")
}

// TestMemoChecksEveryChangedByte: once an envelope is remembered, a copy
// with any one byte changed is still checked in full (against its digest,
// or its structure), never taken as the remembered one; and an envelope
// whose digest fails is never remembered.
func TestMemoChecksEveryChangedByte(t *testing.T) {
	m := envelope.NewMemo(4)
	b, err := envelope.Encode(base(), lim)
	require.NoError(t, err)
	_, err = m.Decode(b, lim)
	require.NoError(t, err)
	for i := range b {
		bad := bytes.Clone(b)
		bad[i] ^= 0x01
		_, err := m.Decode(bad, lim)
		require.Error(t, err, "byte %d flipped", i)
		_, plain := envelope.Decode(bad, lim)
		assert.Equal(t, category(t, plain), category(t, err), "byte %d: the memo answers as Decode", i)
	}
	// Past the header, only the digest can catch a flipped payload bit,
	// and it must again and again.
	bad := bytes.Clone(b)
	bad[len(bad)-1] ^= 0x80
	for range 3 {
		_, err := m.Decode(bad, lim)
		require.Error(t, err)
		assert.Equal(t, envelope.Corrupt, category(t, err))
		assert.Contains(t, err.Error(), "digest")
	}
	_, err = m.Decode(b, lim)
	require.NoError(t, err, "the remembered envelope still decodes")
}

// TestMemoRunsEveryOtherCheck: the memo skips only the digest; limits
// and the checks after the digest still apply to a remembered envelope.
func TestMemoRunsEveryOtherCheck(t *testing.T) {
	m := envelope.NewMemo(4)
	b, err := envelope.Encode(base(), lim)
	require.NoError(t, err)
	_, err = m.Decode(b, lim)
	require.NoError(t, err)
	tight := lim
	tight.MaxEncodedBytes = len(b) - 1
	_, err = m.Decode(b, tight)
	assert.Equal(t, envelope.TooLarge, category(t, err))
	_, err = m.Decode(b, envelope.Limits{})
	assert.Equal(t, envelope.Invalid, category(t, err))
}

package hint_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/cache/hint"
)

var (
	secret      = []byte("golden-hint-secret-0123456789abc") // 32 bytes, the minimum
	otherSecret = []byte("another-hint-secret-0123456789ab")
	t0          = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sender      = [16]byte{0x5e, 0x4d, 0xe2, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d}
)

const window = 30 * time.Second

// newCodec returns a Codec whose clock stands at now.
func newCodec(t testing.TB, s []byte, now time.Time) *hint.Codec {
	t.Helper()
	c, err := hint.NewCodec(s, window, func() time.Time { return now })
	require.NoError(t, err)
	return c
}

func seal(t testing.TB, c *hint.Codec, m hint.Message) []byte {
	t.Helper()
	b, err := c.Seal(m)
	require.NoError(t, err)
	return b
}

// macKey and sign are an independent implementation of the tag documented
// in doc.go, so the vectors check the construction, not only the code.
func macKey(s []byte) []byte {
	m := hmac.New(sha256.New, s)
	m.Write([]byte("caphost/cache/hint/v1 mac key"))
	return m.Sum(nil)
}

// sign returns frame followed by its tag under s.
func sign(s, frame []byte) []byte {
	m := hmac.New(sha256.New, macKey(s))
	m.Write(frame)
	return m.Sum(append([]byte(nil), frame...))
}

func keyMessage() hint.Message {
	return hint.Message{
		Kind: hint.KeyInvalidated, Region: "items", Sender: sender, IssuedAt: t0,
		Location: sha256.Sum256([]byte("entry location of item:7")),
		Scope:    []byte{0xb1, 0x94, 0x6a, 0xc9, 0x24, 0x92, 0xd2, 0x34, 0x7c, 0x62, 0x35, 0xb4, 0xd2, 0x61, 0x11, 0x84},
	}
}

func regionMessage() hint.Message {
	return hint.Message{Kind: hint.RegionInvalidated, Region: "catalog", Sender: sender, IssuedAt: t0}
}

// largestMessage fills every bounded field.
func largestMessage() hint.Message {
	m := keyMessage()
	m.Region = "r" + strings.Repeat("egion.of_max-length", 4)[:hint.MaxRegionBytes-1]
	m.Scope = []byte(strings.Repeat("g", hint.MaxScopeBytes))
	return m
}

// Offsets of the v1 layout for keyMessage ("items": 5 bytes).
const (
	offVersion   = 4
	offKind      = 5
	offSender    = 6
	offIssuedAt  = 22
	offRegionLen = 30
	offRegion    = 31
	offLocation  = offRegion + 5
	offScopeLen  = offLocation + 32
	offScope     = offScopeLen + 1
)

package webhook

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/plugins/transport"
)

// FuzzVerify: a receiver's check of an untrusted signature header never
// panics, refuses with ErrSignature only, and accepts only what Sign
// produced for that body.
func FuzzVerify(f *testing.F) {
	body := []byte(`{"intent_id":"a"}`)
	f.Add(Sign([]byte(secret), 1_700_000_000, body), body)
	f.Add("t=1700000000,v1=00", body)
	f.Add("t=+1700000000,v1="+Sign([]byte(secret), 1_700_000_000, body)[17:], body)
	f.Add("v1=x,t=1", []byte(nil))
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, header string, b []byte) {
		err := Verify([]byte(secret), header, b, now, time.Hour)
		if err != nil {
			require.True(t, errors.Is(err, ErrSignature))
			return
		}
		ts := header[2 : len(header)-68]
		require.Equal(t, "t="+ts+",v1="+header[len(header)-64:], header)
	})
}

// FuzzRetryAfter: a provider's Retry-After never panics and always yields
// a whole-millisecond hint within transport.MaxRetryAfter.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "Wed, 21 Oct 2015 07:28:00 GMT", "-1", "99999999999999999999", "1e3", ""} {
		f.Add(s)
	}
	now := time.Date(2015, 10, 21, 7, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		d := RetryAfter(v, now)
		require.GreaterOrEqual(t, d, time.Duration(0))
		require.LessOrEqual(t, d, transport.MaxRetryAfter)
		require.Zero(t, d%time.Millisecond)
	})
}

package idempotency

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/internal/redistest"
)

// TestRawScopeNeverReachesRedis drives the middleware, Execute (every
// disposition) and the stateless steps (every transition, and records left
// CLAIMED and EXECUTING) with one principal and variants of one
// idempotency key, then scans the whole keyspace — SCAN, TYPE, and every
// key's value, fields and members — and finds neither raw, nor in hex or
// base64: they reach Redis only as the key builder's HMAC. Operation ids
// are the caller's own and stored as given, so none here contains either.
func TestRawScopeNeverReachesRedis(t *testing.T) {
	rs := redistest.StartStandalone(t)
	const principal, key = "tenant-4e1f-principal", "idem-key-7c2d-client"
	e := newExecutor(t, rs.Addr(), Config{})
	ctx := ctxT(t)
	scopes := 0
	next := func() Scope {
		scopes++
		return Scope{Route: "create-payment", Principal: []byte(principal), Key: fmt.Sprintf("%s-%d", key, scopes)}
	}

	// The middleware: a first request, its replay, the key reused with
	// another body, a handler that marks no effect.
	h := &payments{}
	mw, err := e.Middleware(MiddlewareConfig{Route: "create-payment",
		Principal: func(*http.Request) ([]byte, error) { return []byte(principal), nil }}, h)
	require.NoError(t, err)
	srv := httptest.NewServer(mw)
	t.Cleanup(srv.Close)
	s := next()
	resp, _ := post(t, srv.URL, `"`+s.Key+`"`, `{"amount":5}`)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	resp, _ = post(t, srv.URL, `"`+s.Key+`"`, `{"amount":5}`)
	require.Equal(t, "true", resp.Header.Get(HeaderReplayed))
	resp, _ = post(t, srv.URL, `"`+s.Key+`"`, `{"amount":6}`)
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	resp, _ = post(t, srv.URL, `"`+next().Key+`"`, `{"decline":1}`)
	require.Equal(t, http.StatusPaymentRequired, resp.StatusCode)

	// Execute: completed, failed retryable, abandoned.
	fp := FingerprintOf("POST", "/v1/payments", "", []byte("{}"))
	attempt := func() owner.Attempt {
		a, err := owner.NewAttempt("op-opaque")
		require.NoError(t, err)
		return a
	}
	for _, r := range []Result{Committed([]byte(`{"id":1}`)), RetryableNoEffect(errors.New("declined")), EffectUnknown(errors.New("timed out"))} {
		_, err := e.Execute(ctx, Request{Scope: next(), Fingerprint: fp, Attempt: attempt()}, func(context.Context) Result { return r })
		require.NoError(t, err)
	}

	// The stateless steps: claim, start, renew, complete; claim, release;
	// claim, start, fail; a record left CLAIMED and one left EXECUTING.
	claim := func() (Scope, owner.Attempt, int64) {
		s, a := next(), attempt()
		c, err := e.Claim(ctx, Request{Scope: s, Fingerprint: fp, Attempt: a})
		require.NoError(t, err)
		require.True(t, c.Owned)
		return s, a, c.Attempt
	}
	step := func(res StepResult, err error) {
		t.Helper()
		require.NoError(t, err)
		require.NotEqual(t, StatusIndeterminate, res.Status)
	}
	s, a, n := claim()
	step(e.Start(ctx, s, a, n))
	step(e.Renew(ctx, s, a, n))
	step(e.Complete(ctx, s, a, n, []byte(`{"id":2}`)))
	s, a, n = claim()
	step(e.Release(ctx, s, a, n))
	s, a, n = claim()
	step(e.Start(ctx, s, a, n))
	step(e.Fail(ctx, s, a, n, false))
	claim()
	s, a, n = claim()
	step(e.Start(ctx, s, a, n))

	dump, types := keyspace(ctx, t, rs.Admin())
	assert.Equal(t, map[string]int{"hash": scopes}, types, "one record per scope, and nothing else")
	assert.Contains(t, dump, "op-opaque", "the scan reads every field (the caller's operation id is stored as given)")
	for _, secret := range []string{principal, key} {
		for _, form := range []string{secret, hex.EncodeToString([]byte(secret)), base64.StdEncoding.EncodeToString([]byte(secret)),
			base64.RawURLEncoding.EncodeToString([]byte(secret))} {
			assert.NotContains(t, dump, form)
		}
	}
}

// keyspace scans every key (SCAN, never KEYS) and returns each key with
// its whole value — a hash's fields and values, a string, a list's, set's,
// sorted set's or stream's members — and how many keys each type has.
func keyspace(ctx context.Context, t *testing.T, c *redis.Client) (string, map[string]int) {
	t.Helper()
	var sb strings.Builder
	types := map[string]int{}
	var cursor uint64
	for {
		ks, next, err := c.Scan(ctx, cursor, "*", 100).Result()
		require.NoError(t, err)
		for _, k := range ks {
			typ, err := c.Type(ctx, k).Result()
			require.NoError(t, err)
			types[typ]++
			fmt.Fprintf(&sb, "%s %s\n", typ, k)
			switch typ {
			case "string":
				sb.WriteString(c.Get(ctx, k).Val())
			case "hash":
				for f, v := range c.HGetAll(ctx, k).Val() {
					fmt.Fprintf(&sb, "%s=%s\n", f, v)
				}
			case "list":
				sb.WriteString(strings.Join(c.LRange(ctx, k, 0, -1).Val(), "\n"))
			case "set":
				sb.WriteString(strings.Join(c.SMembers(ctx, k).Val(), "\n"))
			case "zset":
				for _, z := range c.ZRangeWithScores(ctx, k, 0, -1).Val() {
					fmt.Fprintf(&sb, "%v %v\n", z.Member, z.Score)
				}
			case "stream":
				for _, m := range c.XRange(ctx, k, "-", "+").Val() {
					fmt.Fprintf(&sb, "%s %v\n", m.ID, m.Values)
				}
			case "none": // expired between SCAN and TYPE
			default:
				t.Errorf("key %q of unexpected type %s", k, typ)
			}
			sb.WriteString("\n")
		}
		if cursor = next; cursor == 0 {
			return sb.String(), types
		}
	}
}

package envoyrls_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/caphost/caphost/host/ratelimit/envoyrls"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/internal/logtest"
)

// counter reads one series of a counter vector with a single label, or
// of a plain counter with label "".
func (f *fixture) counter(t *testing.T, name, label string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			if (label == "" && len(m.Label) == 0) || (len(m.Label) > 0 && m.Label[0].GetValue() == label) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{%q}", name, label)
	return 0
}

// refused reads caphost_envoy_rls_invalid_descriptors_total{reason}.
func (f *fixture) refused(t *testing.T, r envoyrls.Reason) float64 {
	t.Helper()
	return f.counter(t, "caphost_envoy_rls_invalid_descriptors_total", string(r))
}

// TestOversizedValueAnsweredInBand: a descriptor value over MaxValueBytes
// — Envoy copies values from request headers and the path, so a client
// chooses its size — is answered OVER_LIMIT for that descriptor alone,
// and the per-IP descriptor beside it is still decided and counted. Were
// the whole request refused with a gRPC error, Envoy's default
// failure_mode_deny: false would let it through, per-IP limit and all.
func TestOversizedValueAnsweredInBand(t *testing.T) {
	var logs logtest.Buffer
	f := start(t, envoyrls.Options{Log: slog.New(slog.NewJSONHandler(&logs, nil))}, "per_ip.yaml")
	long := "/" + strings.Repeat("A", rlsconfig.MaxValueBytes)
	rs := inOneWindow(t, func(a int) []*rlsv3.RateLimitResponse {
		ip := fmt.Sprintf("192.0.2.%d", a)
		return []*rlsv3.RateLimitResponse{
			f.call(t, "edge_per_ip", 0, desc("path", long), desc("remote_address", ip)),
			f.call(t, "edge_per_ip", 0, desc("remote_address", ip)),
			f.call(t, "edge_per_ip", 0, desc("path", long), desc("remote_address", ip)),
		}
	})
	// Within the per-IP limit: the oversized descriptor alone makes the
	// request OVER_LIMIT, and the per-IP hit is counted.
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, rs[0].OverallCode)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, rs[0].Statuses[0].Code)
	assert.Nil(t, rs[0].Statuses[0].CurrentLimit, "a refused descriptor was matched to no rule")
	status1(t, rs[0], 1, rlsv3.RateLimitResponse_OK, 2, rlsv3.RateLimitResponse_RateLimit_DAY, 1)
	status1(t, rs[1], 0, rlsv3.RateLimitResponse_OK, 2, rlsv3.RateLimitResponse_RateLimit_DAY, 0)
	// Over the per-IP limit: the per-IP descriptor says so itself.
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, rs[2].OverallCode)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, rs[2].Statuses[0].Code)
	status1(t, rs[2], 1, rlsv3.RateLimitResponse_OVER_LIMIT, 2, rlsv3.RateLimitResponse_RateLimit_DAY, 0)

	// Alone, the oversized descriptor is OVER_LIMIT, and nothing is counted.
	refusedBefore, calls := f.refused(t, envoyrls.ReasonValueTooLong), f.srv.CommandCalls(t, "evalsha")
	r := f.call(t, "edge_per_ip", 0, desc("path", long))
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.OverallCode)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.Statuses[0].Code)
	assert.Equal(t, refusedBefore+1, f.refused(t, envoyrls.ReasonValueTooLong))
	assert.Equal(t, calls, f.srv.CommandCalls(t, "evalsha"), "a refused descriptor counts nothing")

	assert.Contains(t, logs.String(), `"field":"descriptors[0].entries[0].value"`)
	assert.Contains(t, logs.String(), `"detail":"1025 bytes, at most 1024"`)
	assert.NotContains(t, logs.String(), "AAAA", "a refused value is never logged")
}

// TestInvalidDescriptorsInBand: each way a descriptor can be refused is
// answered OVER_LIMIT for that descriptor only, counted under its reason;
// the valid descriptor beside it is decided and counted as usual.
func TestInvalidDescriptorsInBand(t *testing.T) {
	f := start(t, envoyrls.Options{ResponseHeaders: true})
	deep := desc()
	for range envoyrls.MaxEntries + 1 {
		deep.Entries = append(deep.Entries, &commonv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	override := desc("to_number", "1")
	override.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	negative := desc("to_number", "1")
	negative.IsNegativeHits = true
	cases := []struct {
		name   string
		d      *commonv3.RateLimitDescriptor
		reason envoyrls.Reason
	}{
		{"no entries", desc(), envoyrls.ReasonEntries},
		{"deep", deep, envoyrls.ReasonEntries},
		{"empty key", desc("", "v"), envoyrls.ReasonKey},
		{"long key", desc(strings.Repeat("k", rlsconfig.MaxKeyBytes+1), "v"), envoyrls.ReasonKey},
		{"long value", desc("to_number", strings.Repeat("9", rlsconfig.MaxValueBytes+1)), envoyrls.ReasonValueTooLong},
		{"override", override, envoyrls.ReasonLimitOverride},
		{"negative", negative, envoyrls.ReasonNegativeHits},
		{"huge hits", hits(desc("to_number", "1"), math.MaxUint32+1), envoyrls.ReasonHitsTooLarge},
	}
	// Warm the script cache: a first EVALSHA may be answered NOSCRIPT and
	// repeated.
	f.call(t, "messaging", 0, desc("to_number", "warm"))
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			calls, refused := f.srv.CommandCalls(t, "evalsha"), f.refused(t, tc.reason)
			n := fmt.Sprintf("42%d", i)
			r := f.call(t, "messaging", 0, desc("to_number", n), tc.d)
			assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.OverallCode)
			assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.Statuses[1].Code)
			assert.Nil(t, r.Statuses[1].CurrentLimit)
			status1(t, r, 0, rlsv3.RateLimitResponse_OK, 100, rlsv3.RateLimitResponse_RateLimit_DAY, 99)
			assert.Equal(t, calls+1, f.srv.CommandCalls(t, "evalsha"), "only the valid descriptor is counted")
			assert.Equal(t, refused+1, f.refused(t, tc.reason))
			hs := map[string]string{}
			for _, h := range r.ResponseHeadersToAdd {
				hs[h.Key] = h.Value
			}
			assert.Equal(t, "99", hs[envoyrls.HeaderRemaining], "the headers show the descriptor with a limit")
		})
	}
	assert.Equal(t, float64(len(cases)), f.count(t, "invalid"))
	assert.Equal(t, float64(len(cases)), f.counter(t, "caphost_envoy_rls_requests_total", "over_limit"))
	assert.Equal(t, 1.0, f.counter(t, "caphost_envoy_rls_requests_total", "ok"))
	assert.Zero(t, f.counter(t, "caphost_envoy_rls_requests_total", "invalid"))

	// Invalid UTF-8 cannot even cross the wire (protobuf refuses it); a
	// direct caller's is refused like the rest.
	v, err := envoyrls.Validate(&rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*commonv3.RateLimitDescriptor{desc("to_number", "\xff")}})
	require.NoError(t, err)
	require.NotNil(t, v.Refused[0])
	assert.Equal(t, envoyrls.ReasonNotUTF8, v.Refused[0].Reason)
	assert.Equal(t, "descriptors[0].entries[0].value: not valid UTF-8", v.Refused[0].String())
}

// TestTooManyDescriptors: over MaxDescriptors, every descriptor is
// answered OVER_LIMIT and nothing is counted.
func TestTooManyDescriptors(t *testing.T) {
	f := start(t, envoyrls.Options{})
	many := make([]*commonv3.RateLimitDescriptor, envoyrls.MaxDescriptors+1)
	for i := range many {
		many[i] = desc("to_number", "1")
	}
	r := f.call(t, "messaging", 0, many...)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.OverallCode)
	for _, st := range r.Statuses {
		assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, st.Code)
	}
	assert.Zero(t, f.srv.CommandCalls(t, "evalsha"))
	assert.Equal(t, float64(len(many)), f.refused(t, envoyrls.ReasonTooManyDescriptors))
}

// TestRequestErrors: only what belongs to no descriptor, and what Envoy
// never sends, is an InvalidArgument naming the field: no domain, a domain
// no configuration can hold, no descriptors. Nothing is counted.
func TestRequestErrors(t *testing.T) {
	f := start(t, envoyrls.Options{})
	cases := map[string]struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		"no domain":      {&rlsv3.RateLimitRequest{Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}}, "domain: must not be empty"},
		"long domain":    {&rlsv3.RateLimitRequest{Domain: strings.Repeat("d", rlsconfig.MaxDomainBytes+1), Descriptors: []*commonv3.RateLimitDescriptor{desc("a", "b")}}, "domain: 257 bytes, at most 256"},
		"no descriptors": {&rlsv3.RateLimitRequest{Domain: "messaging"}, "descriptors: at least one"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := f.client.ShouldRateLimit(context.Background(), tc.req)
			require.Error(t, err)
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.Contains(t, status.Convert(err).Message(), tc.want)
		})
	}
	assert.Equal(t, float64(len(cases)), f.counter(t, "caphost_envoy_rls_requests_total", "invalid"))
	assert.Zero(t, f.srv.CommandCalls(t, "evalsha"))
}

// TestCheckWithoutCounting: a descriptor hits_addend of 0 asks whether the
// descriptor is over its limit without counting. caphost's limiter cannot
// evaluate without consuming, so on a counted rule the check fails closed
// (OVER_LIMIT with the rule's limit, counted as check_only) — except on a
// shadow rule, which never limits. Where the answer needs no state (no
// rule, unlimited, a limit of 0) it is exact. Nothing is ever counted.
func TestCheckWithoutCounting(t *testing.T) {
	f := start(t, envoyrls.Options{})
	calls := f.srv.CommandCalls(t, "evalsha")

	r := f.call(t, "messaging", 0, hits(desc("to_number", "1"), 0))
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.OverallCode)
	require.NotNil(t, r.Statuses[0].CurrentLimit)
	assert.Equal(t, uint32(100), r.Statuses[0].CurrentLimit.RequestsPerUnit)
	assert.Equal(t, 1.0, f.refused(t, envoyrls.ReasonCheckOnly))

	r = f.call(t, "example6", 0, hits(desc("service", "s", "user", "user-a"), 0))
	assert.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode, "a shadow rule never limits")
	assert.Equal(t, 2.0, f.refused(t, envoyrls.ReasonCheckOnly))

	r = f.call(t, "internal", 0, hits(desc("ldap", "x"), 0), hits(desc("none", "x"), 0))
	assert.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode, "unlimited and no rule need no state")

	r = f.call(t, "edge_proxy_per_ip", 0, hits(desc("remote_address", "50.0.0.5"), 0))
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.OverallCode, "a limit of 0 admits nothing")
	assert.Equal(t, 2.0, f.refused(t, envoyrls.ReasonCheckOnly))

	assert.Equal(t, calls, f.srv.CommandCalls(t, "evalsha"), "a check counts nothing")
}

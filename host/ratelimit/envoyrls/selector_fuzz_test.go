package envoyrls_test

import (
	"context"
	"slices"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/caphost/caphost/host/ratelimit/envoyrls"
)

// FuzzSelectorQuery decodes arbitrary wire bytes as a descriptor and maps
// it as a selector-mapped domain would: a refusal has a selector reason;
// an accepted descriptor had only selector keys, each once, cost 1, and every
// value lands in exactly the field its key names.
func FuzzSelectorQuery(f *testing.F) {
	for _, d := range []*commonv3.RateLimitDescriptor{
		desc("route", "/api", "api-key", "k1"),
		desc("method", "GET", "tenant", "t", "principal", "p", "client-ip", "10.0.0.1"),
		desc("principal-tier", "gold", "api-key-plan", "free", "client-ip-class", "private", "resource-class", "blob"),
		desc("route", "/a", "route", "/b"),
		desc("remote_address", "1.2.3.4"),
	} {
		b, err := proto.Marshal(d)
		require.NoError(f, err)
		f.Add(b, uint8(1))
	}
	f.Fuzz(func(t *testing.T, wire []byte, cost uint8) {
		var d commonv3.RateLimitDescriptor
		if proto.Unmarshal(wire, &d) != nil {
			return
		}
		q, r := envoyrls.SelectorQuery(0, d.Entries, int64(cost))
		if r != nil {
			require.Contains(t, []envoyrls.Reason{envoyrls.ReasonSelectorKey, envoyrls.ReasonCheckOnly}, r.Reason)
			return
		}
		require.NotZero(t, cost, "hits_addend 0 is a check, always refused")
		require.Equal(t, int64(cost), q.Hits, "hits_addend scales the selector's cost")
		got := map[string]string{
			"route": q.Attributes.Route, "method": q.Attributes.Method, "principal-tier": q.Attributes.PrincipalTier,
			"api-key-plan": q.Attributes.APIKeyPlan, "client-ip-class": q.Attributes.ClientIPClass,
			"resource-class": q.Attributes.ResourceClass, "tenant": q.Identity.Tenant, "principal": q.Identity.Principal,
			"api-key": q.Identity.APIKey, "client-ip": q.Identity.ClientIP,
		}
		seen := map[string]bool{}
		for _, e := range d.Entries {
			require.True(t, slices.Contains(envoyrls.SelectorKeys(), e.Key))
			require.False(t, seen[e.Key])
			seen[e.Key] = true
			require.Equal(t, e.Value, got[e.Key])
		}
	})
}

// FuzzRequestID: whatever x-request-id metadata arrives, the id used is
// empty or one printable-ASCII value of at most 120 bytes.
func FuzzRequestID(f *testing.F) {
	f.Add("req-1", "")
	f.Add("has space", "")
	f.Add("a", "a")
	f.Fuzz(func(t *testing.T, a, b string) {
		md := metadata.MD{}
		for _, v := range []string{a, b} {
			if v != "" {
				md.Append(envoyrls.RequestIDHeader, v)
			}
		}
		id := envoyrls.RequestID(metadata.NewIncomingContext(context.Background(), md))
		if id == "" {
			return
		}
		require.Len(t, md.Get(envoyrls.RequestIDHeader), 1)
		require.LessOrEqual(t, len(id), 120)
		for i := 0; i < len(id); i++ {
			require.True(t, id[i] > 0x20 && id[i] < 0x7f)
		}
	})
}

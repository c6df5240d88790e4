package envoyrls_test

import (
	"math"
	"testing"
	"unicode/utf8"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/caphost/caphost/host/ratelimit/envoyrls"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
)

// FuzzValidate decodes arbitrary wire bytes as a RateLimitRequest, as the
// gRPC server does, and validates it: a request-level refusal is always
// InvalidArgument; otherwise every descriptor has a cost or a refusal with
// a known reason, and an accepted descriptor is within every bound
// (entries, key and value bytes, valid UTF-8, costs 0..MaxHits) and can be
// matched without a panic.
func FuzzValidate(f *testing.F) {
	cfg := loadFiles(f, "example2.yaml", "example3.yaml", "example5.yaml", "example6.yaml", "example9.yaml")
	seeds := []*rlsv3.RateLimitRequest{
		{Domain: "messaging", Descriptors: []*commonv3.RateLimitDescriptor{desc("message_type", "marketing", "to_number", "1"), desc("to_number", "1")}},
		{Domain: "example9", HitsAddend: 3, Descriptors: []*commonv3.RateLimitDescriptor{hits(desc("key1", "value7"), 2)}},
		{Domain: "internal", Descriptors: []*commonv3.RateLimitDescriptor{desc("ldap", "")}},
		{Domain: "x", Descriptors: []*commonv3.RateLimitDescriptor{{IsNegativeHits: true, Entries: desc("a", "b").Entries}}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, wire []byte) {
		var req rlsv3.RateLimitRequest
		if proto.Unmarshal(wire, &req) != nil {
			return // the server answers a transport error; nothing reaches Validate
		}
		v, err := envoyrls.Validate(&req)
		if err != nil {
			require.Equal(t, codes.InvalidArgument, status.Code(err))
			require.Nil(t, v.Costs)
			return
		}
		require.NotEmpty(t, req.Domain)
		require.LessOrEqual(t, len(req.Domain), rlsconfig.MaxDomainBytes)
		require.True(t, utf8.ValidString(req.Domain))
		require.Len(t, v.Costs, len(req.Descriptors))
		require.Len(t, v.Refused, len(req.Descriptors))
		for i, d := range req.Descriptors {
			if r := v.Refused[i]; r != nil {
				require.Contains(t, envoyrls.Reasons(), r.Reason)
				require.Zero(t, v.Costs[i])
				continue
			}
			require.LessOrEqual(t, len(req.Descriptors), envoyrls.MaxDescriptors)
			require.GreaterOrEqual(t, v.Costs[i], int64(0))
			require.LessOrEqual(t, v.Costs[i], int64(math.MaxUint32))
			if v.Costs[i] == 0 {
				require.Zero(t, d.GetHitsAddend().GetValue(), "only a descriptor hits_addend of 0 is a check")
			}
			require.Nil(t, d.Limit)
			require.False(t, d.IsNegativeHits)
			require.NotEmpty(t, d.Entries)
			require.LessOrEqual(t, len(d.Entries), envoyrls.MaxEntries)
			es := make([]rlsconfig.Entry, len(d.Entries))
			for j, e := range d.Entries {
				require.NotEmpty(t, e.Key)
				require.LessOrEqual(t, len(e.Key), rlsconfig.MaxKeyBytes)
				require.LessOrEqual(t, len(e.Value), rlsconfig.MaxValueBytes)
				require.True(t, utf8.ValidString(e.Key) && utf8.ValidString(e.Value))
				es[j] = rlsconfig.Entry{Key: e.Key, Value: e.Value}
			}
			if r := cfg.Match(req.Domain, es); r != nil {
				require.Len(t, r.Path, len(es), "a rule matches only at its own depth")
			}
		}
	})
}

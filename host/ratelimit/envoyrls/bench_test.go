package envoyrls_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/caphost/caphost/host/ratelimit/envoyrls"
)

// BenchmarkShouldRateLimit times ShouldRateLimit over a real gRPC
// connection (bufconn) to a private redis-server, one fixed-window
// descriptor per call (the decision envoyproxy/ratelimit makes with INCRBY
// + EXPIRE), serially and from 32 goroutines, and four descriptors per
// call serially, and reports Redis server time per decision (INFO
// commandstats, EVALSHA).
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, bc := range []struct {
		name  string
		par   int
		descs int
	}{{"serial", 0, 1}, {"parallel32", 16, 1}, {"serial/4-descriptors", 0, 4}} {
		b.Run(bc.name, func(b *testing.B) {
			f := start(b, envoyrls.Options{}, "bench.yaml")
			var n atomic.Int64
			req := func() *rlsv3.RateLimitRequest {
				r := &rlsv3.RateLimitRequest{Domain: "bench"}
				for range max(bc.descs, 1) {
					v := strconv.FormatInt(n.Add(1)%64, 10)
					r.Descriptors = append(r.Descriptors, &commonv3.RateLimitDescriptor{
						Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: v}}})
				}
				return r
			}
			// Warm the connection and the script cache, then measure.
			if _, err := f.client.ShouldRateLimit(context.Background(), req()); err != nil {
				b.Fatal(err)
			}
			if err := f.srv.Admin().ConfigResetStat(context.Background()).Err(); err != nil {
				b.Fatal(err)
			}
			one := func() {
				resp, err := f.client.ShouldRateLimit(context.Background(), req())
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
					b.Errorf("%v %v", resp, err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			if bc.par == 0 {
				for b.Loop() {
					one()
				}
			} else {
				b.SetParallelism(bc.par)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						one()
					}
				})
			}
			b.StopTimer()
			b.ReportMetric(f.srv.MicrosPerCall(b, "evalsha"), "redis-µs/decision")
		})
	}
}

// BenchmarkValidate times the bounds check every call pays before any
// decision: four descriptors of two entries, all valid.
func BenchmarkValidate(b *testing.B) {
	req := &rlsv3.RateLimitRequest{Domain: "bench"}
	for i := range 4 {
		req.Descriptors = append(req.Descriptors, &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{
			{Key: "remote_address", Value: "10.0.0." + strconv.Itoa(i)}, {Key: "path", Value: "/v1/orders"}}})
	}
	b.ReportAllocs()
	for b.Loop() {
		v, err := envoyrls.Validate(req)
		if err != nil || v.Refused[3] != nil {
			b.Fatal(err, v.Refused[3])
		}
	}
}

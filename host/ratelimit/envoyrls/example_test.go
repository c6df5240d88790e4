package envoyrls_test

import (
	"context"
	"fmt"
	"net"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"

	"github.com/caphost/caphost/host/ratelimit/envoyrls"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/runtime"
)

// ExampleNewServer serves an envoyproxy/ratelimit configuration on a gRPC
// listener for Envoy. rt is the host's Redis runtime (host.Host.Runtime);
// `caphost serve` does exactly this when server.envoy-rate-limit is
// configured.
func ExampleNewServer() {
	var rt *runtime.Runtime // from host.New(...).Runtime()
	d, err := rlsconfig.Parse("config.yaml", []byte(`
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := rlsconfig.New(d)
	if err != nil {
		fmt.Println(err)
		return
	}
	svc, err := envoyrls.New(rt, cfg, envoyrls.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:8081")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := envoyrls.NewServer(svc)
	go func() { _ = srv.Serve(ln) }()
	_ = srv.Shutdown(context.Background())
}

// ExampleValidate shows the bounds a request must keep. A descriptor
// outside them is refused on its own (ShouldRateLimit answers it
// OVER_LIMIT and counts nothing); only a request without a usable domain
// or without descriptors is a gRPC InvalidArgument.
func ExampleValidate() {
	v, err := envoyrls.Validate(&rlsv3.RateLimitRequest{
		Domain:     "messaging",
		HitsAddend: 3,
		Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "to_number", Value: "2061111111"}}},
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "", Value: "x"}}},
		},
	})
	fmt.Println(v.Costs[0], v.Refused[0], err)
	fmt.Println(v.Refused[1].Reason, v.Refused[1])

	_, err = envoyrls.Validate(&rlsv3.RateLimitRequest{
		Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "x"}}}},
	})
	st := status.Convert(err)
	fmt.Println(st.Code(), st.Message())
	// Output:
	// 3 <nil> <nil>
	// key descriptors[1].entries[0].key: must not be empty
	// InvalidArgument envoyrls: domain: must not be empty
}

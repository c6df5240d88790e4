package envoyrls

import (
	"context"
	"errors"
	"net"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// Server bounds. Envoy keeps one long-lived HTTP/2 connection per
// upstream host and multiplexes its calls on it.
const (
	maxConcurrentStreams = 1024
	connectionTimeout    = 5 * time.Second
	keepaliveMinTime     = 10 * time.Second
)

// Server is the gRPC server of a Service: it owns the transport (message
// size, stream and keepalive bounds) so that callers such as `caphost
// serve` never handle gRPC themselves.
type Server struct {
	g      *grpc.Server
	health *health.Server
}

// HealthService is the service name the gRPC health service reports for
// the rate-limit service (the empty name reports the server as a whole).
const HealthService = "envoy.service.ratelimit.v3.RateLimitService"

// NewServer registers svc as envoy.service.ratelimit.v3.RateLimitService
// on a new gRPC server, beside the standard gRPC health service
// (grpc.health.v1.Health, as envoyproxy/ratelimit serves it) so Envoy's
// grpc_health_check can see the upstream: SERVING from the start, NOT_SERVING
// once Shutdown begins, so Envoy stops sending before the calls in flight
// are drained.
func NewServer(svc *Service) *Server {
	g := grpc.NewServer(
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.ConnectionTimeout(connectionTimeout),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
	)
	rlsv3.RegisterRateLimitServiceServer(g, svc)
	h := health.NewServer()
	h.SetServingStatus(HealthService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, h)
	return &Server{g: g, health: h}
}

// Serve accepts connections on ln until Shutdown; it returns nil after a
// Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	if err := s.g.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Shutdown stops accepting and lets calls in flight finish until ctx ends,
// then closes what is left. It reports ctx's error when it had to cut
// calls short.
func (s *Server) Shutdown(ctx context.Context) error {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.g.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.g.Stop()
		<-done
		return ctx.Err()
	}
}

package envoyrls_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/caphost/caphost/host/ratelimit/envoyrls"
	"github.com/caphost/caphost/internal/redistest"
)

// TestHealthService: the listener serves grpc.health.v1.Health as
// envoyproxy/ratelimit does, so Envoy's grpc_health_check works against
// caphost: SERVING for the server and the rate-limit service, NOT_FOUND
// for any other name, and NOT_SERVING as soon as Shutdown begins — seen
// here on a Watch stream, whose end then lets the drain finish.
func TestHealthService(t *testing.T) {
	srv := redistest.StartStandalone(t)
	svc, err := envoyrls.New(newRuntime(t, srv.Addr()), loadFiles(t, "example2.yaml"),
		envoyrls.Options{Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	gs, conn, served := listen(t, svc)
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	ctx := context.Background()

	for _, name := range []string{"", envoyrls.HealthService} {
		res, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		require.NoError(t, err, name)
		assert.Equal(t, healthpb.HealthCheckResponse_SERVING, res.GetStatus(), name)
	}
	_, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: "other"})
	assert.Error(t, err, "an unknown service is NOT_FOUND")

	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{Service: envoyrls.HealthService})
	require.NoError(t, err)
	first, err := watch.Recv()
	require.NoError(t, err)
	require.Equal(t, healthpb.HealthCheckResponse_SERVING, first.GetStatus())

	shut := make(chan error, 1)
	go func() {
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		shut <- gs.Shutdown(sctx)
	}()
	next, err := watch.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, next.GetStatus(), "draining: Envoy stops sending")
	stopWatch() // the last stream in flight
	assert.NoError(t, <-shut, "the drain finished once the stream ended")
	assert.NoError(t, <-served)
}

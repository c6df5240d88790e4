package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/caphost/caphost/bench/internal/sidecar"
)

// The sidecar rows compare two daemons making the same fixed-window
// decision on one private redis-server, each driven over the network like
// a service would: `caphost serve` (its JSON API and its Envoy
// ShouldRateLimit gRPC listener) and envoyproxy/ratelimit (its /json
// endpoint and the same gRPC API). Nothing is ever denied (limit 10^9 per
// minute over 64 descriptor values), so every op is one counted decision.
// Each (transport, clients) row runs caphost, envoy, caphost again for
// -duration each; the second caphost run over the first is the A/A
// control. Per decision: Redis command time (INFO commandstats of the
// commands the daemon sends: EVALSHA for caphost, INCRBY + EXPIRE for
// envoy), redis-server CPU, and daemon CPU (/proc, user+system).

const sidecarValues = 64

// sidecarDaemon is a launched daemon and the commands it sends per
// decision: their commandstats time is its Redis time (commands a script
// runs are inside the script's time and are listed, not added).
type sidecarDaemon struct {
	*sidecar.Daemon
	topLevel []string
}

const sidecarRules = `domain: bench
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
`

// sidecarPolicy is the rate-limit capability's policy of the HTTP rows.
const sidecarPolicy = `  rate-limit:
    provider: redis
    redis-role: coordination
    policies:
      per-client:
        revision: r1
        algorithm: fixed-window
        limit: 1000000000
        window: 1m
        failure-mode: fail-closed
        subject: [api-key]
`

// startDaemons runs `caphost serve` (HTTP and Envoy gRPC) and
// envoyproxy/ratelimit on redisAddr with the same rule.
func startDaemons(caphostBin, envoyBin, dir, redisAddr string) (ch, ev *sidecarDaemon, err error) {
	rules := []sidecar.File{{Name: "bench.yaml", Body: sidecarRules}}
	c, err := sidecar.Caphost{Bin: caphostBin, Dir: dir, RedisAddr: redisAddr, Rules: rules, Capabilities: sidecarPolicy}.Start()
	if err != nil {
		return nil, nil, err
	}
	e, err := sidecar.Envoy{Bin: envoyBin, Dir: dir, RedisAddr: redisAddr, Rules: rules}.Start()
	if err != nil {
		c.Stop()
		return nil, nil, err
	}
	return &sidecarDaemon{c, []string{"evalsha", "evalsha_ro", "fcall", "fcall_ro"}},
		&sidecarDaemon{e, []string{"incrby", "expire"}}, nil
}

// sidecarOps returns the HTTP and gRPC ops of one daemon, each a counted
// fixed-window decision of one of sidecarValues descriptor values, and a
// closer.
func sidecarOps(d *sidecarDaemon, caphost bool) (httpOp, grpcOp func(context.Context) error, closeFn func(), err error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute}}
	conn, err := grpc.NewClient(d.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, nil, err
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	var n atomic.Int64
	url := "http://" + d.HTTPAddr + "/json"
	if caphost {
		url = "http://" + d.HTTPAddr + "/v1/ratelimit/evaluate"
	}
	httpOp = func(ctx context.Context) error {
		v := strconv.FormatInt(n.Add(1)%sidecarValues, 10)
		var body string
		if caphost {
			body = `{"policy":"per-client","subject":{"api-key":"` + v + `"}}`
		} else {
			body = `{"domain":"bench","descriptors":[{"entries":[{"key":"client","value":"` + v + `"}]}]}`
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		ok := resp.StatusCode == http.StatusOK
		if caphost {
			ok = ok && bytes.Contains(b, []byte(`"allowed":true`))
		} else {
			ok = ok && bytes.Contains(b, []byte(`"overallCode":"OK"`))
		}
		if !ok {
			return fmt.Errorf("%s: HTTP %d %.200s", d.Name, resp.StatusCode, b)
		}
		return nil
	}
	grpcOp = func(ctx context.Context) error {
		v := strconv.FormatInt(n.Add(1)%sidecarValues, 10)
		resp, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bench", Descriptors: []*commonv3.RateLimitDescriptor{
			{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "client", Value: v}}}}})
		if err != nil {
			return err
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			return fmt.Errorf("%s: %v", d.Name, resp.OverallCode)
		}
		return nil
	}
	return httpOp, grpcOp, func() { _ = conn.Close(); hc.CloseIdleConnections() }, nil
}

type sidecarRun struct {
	opsPerSec, p50, p99                    float64 // p50/p99 in µs
	redisMicros, redisCPUMicros, daemonCPU float64 // per decision
	commands                               string  // "name µs/call×calls per decision", most called first
}

// runSidecar measures one daemon's op alone for dur after a warm-up.
func runSidecar(ctx context.Context, plain *redis.Client, d *sidecarDaemon, op func(context.Context) error, clients int, dur time.Duration) (sidecarRun, error) {
	c := contender{name: d.Name, op: op}
	measure(ctx, c, clients, dur/4)
	if err := plain.ConfigResetStat(ctx).Err(); err != nil {
		return sidecarRun{}, err
	}
	rcpu0, err := serverCPU(ctx, plain)
	if err != nil {
		return sidecarRun{}, err
	}
	dcpu0, err := d.CPU()
	if err != nil {
		return sidecarRun{}, err
	}
	s := measure(ctx, c, clients, dur)
	dcpu1, err := d.CPU()
	if err != nil {
		return sidecarRun{}, err
	}
	rcpu1, err := serverCPU(ctx, plain)
	if err != nil {
		return sidecarRun{}, err
	}
	info, err := plain.Info(ctx, "commandstats").Result()
	if err != nil {
		return sidecarRun{}, err
	}
	var (
		usec  int64
		parts []string
	)
	ops := float64(s.ops)
	for _, st := range parseCommandStats(info) {
		if slices.Contains(d.topLevel, st.name) {
			usec += st.usec
		}
		// The stats calls of this very measurement are not the daemon's.
		if st.name != "info" && st.name != "config|resetstat" {
			if st.calls*20 >= s.ops {
				parts = append(parts, fmt.Sprintf("%s %.2fµs×%.2f", st.name, st.usecPerCall, float64(st.calls)/ops))
			}
		}
	}
	slices.Sort(s.lat)
	pct := func(p float64) float64 {
		if len(s.lat) == 0 {
			return 0
		}
		return float64(s.lat[int(p*float64(len(s.lat)-1))].Nanoseconds()) / 1000
	}
	return sidecarRun{opsPerSec: ops / s.elapsed.Seconds(), p50: pct(0.5), p99: pct(0.99),
		redisMicros: float64(usec) / ops, redisCPUMicros: (rcpu1 - rcpu0).Seconds() * 1e6 / ops,
		daemonCPU: (dcpu1 - dcpu0).Seconds() * 1e6 / ops, commands: strings.Join(parts, ", ")}, nil
}

// sidecarRows prints the sidecar comparison.
func sidecarRows(ctx context.Context, caphostBin, envoyBin string, clientsList []int, dur time.Duration) error {
	rd, err := startRedis(ctx)
	if err != nil {
		return err
	}
	defer rd.stop()
	plain := redis.NewClient(&redis.Options{Addr: rd.addr, MaxRetries: -1, DisableIdentity: true})
	defer plain.Close()
	dir, err := os.MkdirTemp("", "caphost-sidecar-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ch, ev, err := startDaemons(caphostBin, envoyBin, dir, rd.addr)
	if err != nil {
		return err
	}
	defer ch.Stop()
	defer ev.Stop()
	cHTTP, cGRPC, cClose, err := sidecarOps(ch, true)
	if err != nil {
		return err
	}
	defer cClose()
	eHTTP, eGRPC, eClose, err := sidecarOps(ev, false)
	if err != nil {
		return err
	}
	defer eClose()

	fmt.Printf("sidecar: fixed window, nothing denied, one private redis-server; %s per run; order caphost, envoy, caphost (A/A)\n", dur)
	fmt.Println("  per decision: redis = INFO commandstats µs of the commands sent (EVALSHA; INCRBY+EXPIRE), rcpu = redis-server CPU µs, dcpu = daemon CPU µs;")
	fmt.Println("  [...] lists every command run about once per decision or more, a script's inner commands included")
	for _, tr := range []struct {
		name       string
		caphost, e func(context.Context) error
	}{{"HTTP JSON", cHTTP, eHTTP}, {"gRPC ShouldRateLimit", cGRPC, eGRPC}} {
		for _, clients := range clientsList {
			a, err := runSidecar(ctx, plain, ch, tr.caphost, clients, dur)
			if err != nil {
				return err
			}
			b, err := runSidecar(ctx, plain, ev, tr.e, clients, dur)
			if err != nil {
				return err
			}
			a2, err := runSidecar(ctx, plain, ch, tr.caphost, clients, dur)
			if err != nil {
				return err
			}
			row := func(name string, r sidecarRun) {
				fmt.Printf("    %-16s %8.0f op/s  p50 %7.1fµs  p99 %8.1fµs  redis %5.1fµs  rcpu %5.1fµs  dcpu %6.1fµs  [%s]\n",
					name, r.opsPerSec, r.p50, r.p99, r.redisMicros, r.redisCPUMicros, r.daemonCPU, r.commands)
			}
			fmt.Printf("  %s, %d clients\n", tr.name, clients)
			row("caphost serve", a)
			row("envoy ratelimit", b)
			row("caphost (A/A)", a2)
			mean := (a.opsPerSec + a2.opsPerSec) / 2
			fmt.Printf("    caphost/envoy throughput %.2f× (mean of both caphost runs; A/A %.2f×), p99 %.2f×, redis µs %.2f×\n",
				mean/b.opsPerSec, a2.opsPerSec/a.opsPerSec, (a.p99+a2.p99)/2/b.p99, (a.redisMicros+a2.redisMicros)/2/b.redisMicros)
		}
	}
	return nil
}

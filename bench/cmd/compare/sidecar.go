package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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

type sidecarDaemon struct {
	name string
	// topLevel are the commands the daemon sends per decision: their
	// commandstats time is its Redis time (commands a script runs are
	// inside the script's time and are listed, not added).
	topLevel []string
	cmd      *exec.Cmd
	httpAddr string
	grpcAddr string
}

func (d *sidecarDaemon) stop() {
	if d == nil || d.cmd == nil || d.cmd.Process == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-done
	}
}

// cpu is the daemon's user+system CPU so far (/proc/<pid>/stat).
func (d *sidecarDaemon) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", d.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 (1-based), in clock ticks (100 Hz on Linux).
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, errors.New("short /proc stat")
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

func waitTCP(addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not listen within %s", addr, limit)
}

func freeAddr() (string, error) {
	p, err := freePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)), nil
}

const sidecarRules = `domain: bench
descriptors:
  - key: client
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
`

// startCaphostServe runs `caphost serve` with the rate-limit capability
// (HTTP) and the Envoy service (gRPC) on redisAddr.
func startCaphostServe(bin, dir, redisAddr string) (*sidecarDaemon, error) {
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	grpcAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`redis:
  deployments:
    main:
      standalone: {endpoint: %q}
      auth: {admin-shared: true}
      client-name: caphost-sidecar-bench
      timeouts: {connect: 1s, command: 1s, acquire: 500ms, shutdown: 2s}
  roles:
    coordination: {deployment: main, required: true, expected-eviction: noeviction}
  programs: {mode: evalsha-managed}
  keys:
    app: bench
    env: bench
    hmac:
      write-version: 1
      versions: {1: "secret://env/BENCH_HMAC"}
capabilities:
  rate-limit:
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
server:
  listen: %q
  envoy-rate-limit:
    listen: %q
    config-files: [rules.yaml]
`, redisAddr, httpAddr, grpcAddr)
	if err := os.WriteFile(filepath.Join(dir, "caphost.yaml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(sidecarRules), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--config", filepath.Join(dir, "caphost.yaml"))
	cmd.Env = append(os.Environ(), "BENCH_HMAC=bench-only-hmac-material-0123456789")
	cmd.Stderr = newCapped(filepath.Join(dir, "caphost.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &sidecarDaemon{name: "caphost serve", topLevel: []string{"evalsha", "evalsha_ro", "fcall", "fcall_ro"}, cmd: cmd, httpAddr: httpAddr, grpcAddr: grpcAddr}
	if err := errors.Join(waitTCP(httpAddr, 20*time.Second), waitTCP(grpcAddr, 20*time.Second)); err != nil {
		d.stop()
		return nil, fmt.Errorf("caphost serve: %w (see %s/caphost.log)", err, dir)
	}
	return d, nil
}

// startEnvoyRatelimit runs envoyproxy/ratelimit (built from the bench
// module: see the Makefile's bench-sidecar) on redisAddr with the same rule.
func startEnvoyRatelimit(bin, dir, redisAddr string) (*sidecarDaemon, error) {
	conf := filepath.Join(dir, "runtime", "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(conf, "bench.yaml"), []byte(sidecarRules), 0o600); err != nil {
		return nil, err
	}
	var addrs [3]string
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		addrs[i] = a
	}
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT="+port(addrs[0]), "GRPC_PORT="+port(addrs[1]), "DEBUG_PORT="+port(addrs[2]),
		"USE_STATSD=false", "LOG_LEVEL=warn", "BACKEND_TYPE=redis",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+filepath.Join(dir, "runtime"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
	)
	cmd.Stderr = newCapped(filepath.Join(dir, "envoy.log"))
	cmd.Stdout = cmd.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &sidecarDaemon{name: "envoy ratelimit", topLevel: []string{"incrby", "expire"}, cmd: cmd, httpAddr: addrs[0], grpcAddr: addrs[1]}
	if err := errors.Join(waitTCP(addrs[0], 20*time.Second), waitTCP(addrs[1], 20*time.Second)); err != nil {
		d.stop()
		return nil, fmt.Errorf("envoy ratelimit: %w (see %s/envoy.log)", err, dir)
	}
	return d, nil
}

// newCapped is a log file for a daemon's output.
func newCapped(path string) io.Writer {
	f, err := os.Create(path)
	if err != nil {
		return io.Discard
	}
	return f
}

// sidecarOps returns the HTTP and gRPC ops of one daemon, each a counted
// fixed-window decision of one of sidecarValues descriptor values, and a
// closer.
func sidecarOps(d *sidecarDaemon, caphost bool) (httpOp, grpcOp func(context.Context) error, closeFn func(), err error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute}}
	conn, err := grpc.NewClient(d.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, nil, err
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	var n atomic.Int64
	url := "http://" + d.httpAddr + "/json"
	if caphost {
		url = "http://" + d.httpAddr + "/v1/ratelimit/evaluate"
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
			return fmt.Errorf("%s: HTTP %d %.200s", d.name, resp.StatusCode, b)
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
			return fmt.Errorf("%s: %v", d.name, resp.OverallCode)
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
	c := contender{name: d.name, op: op}
	measure(ctx, c, clients, dur/4)
	if err := plain.ConfigResetStat(ctx).Err(); err != nil {
		return sidecarRun{}, err
	}
	rcpu0, err := serverCPU(ctx, plain)
	if err != nil {
		return sidecarRun{}, err
	}
	dcpu0, err := d.cpu()
	if err != nil {
		return sidecarRun{}, err
	}
	s := measure(ctx, c, clients, dur)
	dcpu1, err := d.cpu()
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
	ch, err := startCaphostServe(caphostBin, dir, rd.addr)
	if err != nil {
		return err
	}
	defer ch.stop()
	ev, err := startEnvoyRatelimit(envoyBin, dir, rd.addr)
	if err != nil {
		return err
	}
	defer ev.stop()
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

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/bench/internal/sidecar"
	"github.com/caphost/caphost/host/httpjson"
	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/internal/redistest"
)

// settings are one scenario's knobs (flags in main.go).
type settings struct {
	bin      string        // the caphost binary
	clients  int           // keep-alive HTTP clients
	rate     int           // decisions per second, all clients together
	subjects int           // distinct api-key subjects
	limit    int           // the fail-closed policy's limit per subject and window
	warmup   time.Duration // traffic before the kill
	steady   time.Duration // traffic after recovery, to see readiness stay put
	deadline time.Duration // give up this long after the kill
	verbose  io.Writer
}

// topology is what differs between Sentinel and Cluster: starting the
// servers, the deployment's YAML block, and which process dies and how its
// recovery shows.
type topology interface {
	name() string
	yaml() string
	// kill kills the primary with SIGKILL and returns when it was sent and
	// a function that blocks until Redis has recovered on its own, and
	// returns when.
	kill(ctx context.Context) (time.Time, func() (time.Time, error))
}

// run is one scenario: servers, caphost serve, traffic, kill, timeline.
func run(ctx context.Context, s settings, start func(h *harness) topology) (timeline, error) {
	h := newHarness(s.verbose)
	defer h.close()
	var tl timeline
	err := h.guard(func() error {
		topo := start(h)
		listen, err := sidecar.FreeAddr()
		if err != nil {
			return err
		}
		srv, err := startServe(h, s.bin, topo, s.limit, listen)
		if err != nil {
			return err
		}
		base := "http://" + listen
		if err := waitReady(ctx, base, 30*time.Second); err != nil {
			return fmt.Errorf("%w\n%s", err, srv.tail())
		}
		tctx, stop := context.WithCancel(ctx)
		defer stop()
		tr := startTraffic(tctx, s, base)
		rp := startReadiness(tctx, base)
		select {
		case <-time.After(s.warmup):
		case <-ctx.Done():
			return ctx.Err()
		}
		killed, recovered := topo.kill(ctx)
		recoveredAt, err := recovered()
		if err != nil {
			return err
		}
		// Traffic runs until decisions and readiness have both recovered,
		// then s.steady longer.
		until := time.Now().Add(s.deadline)
		for time.Now().Before(until) {
			now := computeTimeline(killed, recoveredAt, tr.snapshot(), rp.snapshot(), s.limit)
			if (now.failed == 0 || now.evaluates > 0) && (now.down < 0 || now.ready > 0) &&
				time.Since(killed.Add(max(now.evaluates, now.ready))) > s.steady {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		stop()
		tr.wait()
		rp.wait()
		tl = computeTimeline(killed, recoveredAt, tr.snapshot(), rp.snapshot(), s.limit)
		if tl.failed > 0 && tl.evaluates == 0 {
			return fmt.Errorf("decisions did not recover within %s of the kill\n%s", s.deadline, srv.tail())
		}
		return nil
	})
	return tl, err
}

// serve is a running `caphost serve`.
type serve struct {
	cmd     *exec.Cmd
	logPath string
}

func (s *serve) tail() string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return ""
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return "--- caphost serve log tail ---\n" + string(b)
}

const configTemplate = `redis:
  deployments:
    main:
%s
      auth: {admin-shared: true}
      client-name: caphost-failover
      timeouts: {connect: 500ms, command: 500ms, acquire: 100ms, shutdown: 2s}
  roles:
    coordination: {deployment: main, required: true, expected-eviction: noeviction}
  programs: {mode: evalsha-managed}
  keys:
    app: bench
    env: failover
    hmac:
      write-version: 1
      versions: {1: "secret://env/FAILOVER_HMAC"}
capabilities:
  rate-limit:
    provider: redis
    redis-role: coordination
    policies:
      per-key:
        revision: r1
        algorithm: fixed-window
        limit: %d
        window: 1h
        failure-mode: fail-closed
        subject: [api-key]
server:
  listen: %q
`

// startServe writes the configuration and starts caphost serve in a
// process group of its own, stopped (SIGTERM, then SIGKILL) at cleanup.
func startServe(h *harness, bin string, topo topology, limit int, listen string) (*serve, error) {
	dir := h.TempDir()
	path := filepath.Join(dir, "caphost.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(configTemplate, topo.yaml(), limit, listen)), 0o600); err != nil {
		return nil, err
	}
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "serve.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve", "--config", path, "--drain-timeout", "2s")
	cmd.Env = append(os.Environ(), "FAILOVER_HMAC="+hex.EncodeToString(key[:]))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(done) }()
	h.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	return &serve{cmd: cmd, logPath: logPath}, nil
}

func waitReady(ctx context.Context, base string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if ready(ctx, http.DefaultClient, base) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("caphost serve not ready within %s", limit)
}

func ready(ctx context.Context, c *http.Client, base string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// traffic is the steady rate-limit load: s.clients goroutines sharing one
// keep-alive transport, each paced to its share of s.rate.
type traffic struct {
	mu    sync.Mutex
	calls []decision
	wg    sync.WaitGroup
}

// evaluateBodyLimit bounds an evaluate answer read by the client.
const evaluateBodyLimit = 16 << 10

func startTraffic(ctx context.Context, s settings, base string) *traffic {
	tr := &traffic{}
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: s.clients, MaxConnsPerHost: s.clients},
	}
	interval := time.Duration(s.clients) * time.Second / time.Duration(s.rate)
	var seq sync.Mutex
	next := 0
	for range s.clients {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				seq.Lock()
				subject := next % s.subjects
				next++
				seq.Unlock()
				d := evaluate(ctx, client, base, subject)
				if ctx.Err() != nil {
					return // cut short by the end of the run: not a failure
				}
				tr.mu.Lock()
				tr.calls = append(tr.calls, d)
				tr.mu.Unlock()
			}
		}()
	}
	return tr
}

func (tr *traffic) snapshot() []decision {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return append([]decision(nil), tr.calls...)
}

func (tr *traffic) wait() { tr.wg.Wait() }

// evaluate sends one decision request. The answer is decoded strictly
// (host/httpjson: exact member names, no duplicates, valid UTF-8, bounded).
func evaluate(ctx context.Context, c *http.Client, base string, subject int) decision {
	d := decision{start: time.Now(), subject: subject}
	defer func() { d.end = time.Now() }()
	body := fmt.Sprintf(`{"policy":"per-key","subject":{"api-key":"subject-%02d"}}`, subject)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/ratelimit/evaluate", strings.NewReader(body))
	if err != nil {
		d.end = time.Now()
		return d
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		d.end = time.Now()
		return d
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, evaluateBodyLimit+1))
	_ = resp.Body.Close()
	d.end = time.Now()
	if err != nil || resp.StatusCode != http.StatusOK {
		return d
	}
	var ans ratelimit.EvaluateResponse
	if e := httpjson.Decode(raw, evaluateBodyLimit, &ans); e != nil {
		return d
	}
	d.evaluated = ans.Kind == "evaluated"
	d.allowed = d.evaluated && ans.Allowed
	d.window = ans.Reset
	return d
}

// readiness polls /readyz every 25 ms on a connection of its own.
type readiness struct {
	mu     sync.Mutex
	probes []probe
	done   chan struct{}
}

func startReadiness(ctx context.Context, base string) *readiness {
	rp := &readiness{done: make(chan struct{})}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	go func() {
		defer close(rp.done)
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ok := ready(ctx, client, base)
			if ctx.Err() != nil {
				return
			}
			rp.mu.Lock()
			rp.probes = append(rp.probes, probe{at: time.Now(), ready: ok})
			rp.mu.Unlock()
		}
	}()
	return rp
}

func (rp *readiness) snapshot() []probe {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return append([]probe(nil), rp.probes...)
}

func (rp *readiness) wait() { <-rp.done }

// sentinelTopology is 1 primary, 2 replicas and 3 Sentinels, quorum 2
// (redistest.StartSentinel: down-after-milliseconds 1000).
type sentinelTopology struct {
	h   *harness
	sen *redistest.Sentinel
}

func startSentinel(h *harness) topology {
	return &sentinelTopology{h: h, sen: redistest.StartSentinel(h)}
}

func (s *sentinelTopology) name() string { return "sentinel" }

func (s *sentinelTopology) yaml() string {
	return fmt.Sprintf("      sentinel: {master-name: %s, endpoints: [%s]}", s.sen.MasterName(),
		strings.Join(s.sen.SentinelAddrs(), ", "))
}

// kill subscribes to +switch-master on every Sentinel first: the recovery
// time is the first announcement.
func (s *sentinelTopology) kill(ctx context.Context) (time.Time, func() (time.Time, error)) {
	switched := make(chan time.Time, len(s.sen.Sentinels()))
	for _, n := range s.sen.Sentinels() {
		ps := n.Admin().Subscribe(ctx, "+switch-master")
		if _, err := ps.Receive(ctx); err != nil {
			s.h.Fatalf("subscribe +switch-master: %v", err)
		}
		s.h.Cleanup(func() { _ = ps.Close() })
		ch := ps.Channel()
		go func() {
			if _, ok := <-ch; ok {
				switched <- time.Now()
			}
		}()
	}
	old := s.sen.Primary()
	killed := time.Now()
	old.Kill()
	return killed, func() (time.Time, error) {
		select {
		case at := <-switched:
			return at, nil
		case <-time.After(60 * time.Second):
			return time.Time{}, errors.New("no +switch-master within 60 s of the kill")
		}
	}
}

// clusterTopology is 3 primaries and 3 replicas, cluster-node-timeout 1 s.
type clusterTopology struct {
	h *harness
	c *redistest.Cluster
}

func startCluster(h *harness) topology {
	return &clusterTopology{h: h, c: redistest.StartCluster(h, redistest.WithConfig("cluster-node-timeout", "1000"))}
}

func (c *clusterTopology) name() string { return "cluster" }

func (c *clusterTopology) yaml() string {
	return fmt.Sprintf("      cluster: {seeds: [%s]}", strings.Join(c.c.Seeds(), ", "))
}

// kill kills the first primary; the recovery time is when one of the
// replicas first answers ROLE master (polled every 10 ms).
func (c *clusterTopology) kill(ctx context.Context) (time.Time, func() (time.Time, error)) {
	old := c.c.Primaries()[0]
	replicas := c.c.Replicas()
	killed := time.Now()
	old.Kill()
	return killed, func() (time.Time, error) {
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			for _, r := range replicas {
				if isMaster(ctx, r.Admin()) {
					return time.Now(), nil
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Time{}, errors.New("no replica promoted within 60 s of the kill")
	}
}

func isMaster(ctx context.Context, c *redis.Client) bool {
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	vals, err := c.Do(ctx, "ROLE").Slice()
	if err != nil || len(vals) == 0 {
		return false
	}
	role, _ := vals[0].(string)
	return role == "master"
}

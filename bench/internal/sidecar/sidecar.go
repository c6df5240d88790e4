// Package sidecar launches the two Envoy rate-limit daemons the bench
// module compares, each as its own process on a caller's Redis: `caphost
// serve` with its Envoy ShouldRateLimit gRPC listener, and
// envoyproxy/ratelimit's service binary (built from the bench module:
// `go build github.com/envoyproxy/ratelimit/src/service_cmd`, a tool of
// bench/go.mod). Both read the same envoyproxy/ratelimit descriptor files.
// cmd/compare measures them; envoycompat compares their decisions.
package sidecar

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// File is one envoyproxy/ratelimit descriptor file: its name and YAML.
type File struct{ Name, Body string }

// Daemon is a running daemon: its process, listeners and log file.
type Daemon struct {
	Name     string
	HTTPAddr string // caphost's HTTP API or envoyproxy/ratelimit's /json
	GRPCAddr string // envoy.service.ratelimit.v3 ShouldRateLimit
	LogPath  string
	cmd      *exec.Cmd
	log      *os.File
}

// Stop sends SIGTERM, waits up to 10 s, then kills. It is safe on nil.
func (d *Daemon) Stop() {
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
	if d.log != nil {
		_ = d.log.Close()
	}
}

// LogTail is the last n bytes of the daemon's output, for a failure message.
func (d *Daemon) LogTail(n int64) string {
	b, err := os.ReadFile(d.LogPath)
	if err != nil {
		return err.Error()
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return string(b)
}

// CPU is the daemon's user+system CPU so far (/proc/<pid>/stat).
func (d *Daemon) CPU() (time.Duration, error) {
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

// FreeAddr is a loopback host:port nothing listens on right now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func freeAddrs(n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		a, err := FreeAddr()
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

// waitTCP waits until addr accepts a connection.
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

func writeFiles(dir string, files []File) ([]string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	names := make([]string, len(files))
	for i, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), []byte(f.Body), 0o600); err != nil {
			return nil, err
		}
		names[i] = f.Name
	}
	return names, nil
}

// start runs cmd with its output in dir/name.log and waits for addrs.
func start(d *Daemon, cmd *exec.Cmd, dir, logName string, addrs ...string) (*Daemon, error) {
	d.LogPath = filepath.Join(dir, logName)
	f, err := os.Create(d.LogPath)
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, err
	}
	d.cmd, d.log = cmd, f
	var errs []error
	for _, a := range addrs {
		errs = append(errs, waitTCP(a, 20*time.Second))
	}
	if err := errors.Join(errs...); err != nil {
		d.Stop()
		return nil, fmt.Errorf("%s: %w (see %s)", d.Name, err, d.LogPath)
	}
	return d, nil
}

// Caphost is how to run `caphost serve`.
type Caphost struct {
	Bin, Dir  string // the binary; a directory for its configuration and log
	RedisAddr string
	// Rules are the descriptor files of server.envoy-rate-limit.
	Rules []File
	// Capabilities, when set, is the YAML of the capabilities section,
	// indented by two spaces (the bench's HTTP rows need a rate-limit
	// policy).
	Capabilities string
	// ResponseHeaders sets server.envoy-rate-limit.response-headers.
	ResponseHeaders bool
}

// Start runs `caphost serve` on c.RedisAddr and waits for its HTTP and
// gRPC listeners.
func (c Caphost) Start() (*Daemon, error) {
	addrs, err := freeAddrs(2)
	if err != nil {
		return nil, err
	}
	names, err := writeFiles(c.Dir, c.Rules)
	if err != nil {
		return nil, err
	}
	caps := ""
	if c.Capabilities != "" {
		caps = "capabilities:\n" + c.Capabilities
	}
	cfg := fmt.Sprintf(`redis:
  deployments:
    main:
      standalone: {endpoint: %q}
      auth: {admin-shared: true}
      client-name: caphost-sidecar
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
%sserver:
  listen: %q
  envoy-rate-limit:
    listen: %q
    config-files: [%s]
    response-headers: %t
`, c.RedisAddr, caps, addrs[0], addrs[1], strings.Join(names, ", "), c.ResponseHeaders)
	if err := os.WriteFile(filepath.Join(c.Dir, "caphost.yaml"), []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(c.Bin, "serve", "--config", filepath.Join(c.Dir, "caphost.yaml"))
	cmd.Env = append(os.Environ(), "BENCH_HMAC=bench-only-hmac-material-0123456789")
	return start(&Daemon{Name: "caphost serve", HTTPAddr: addrs[0], GRPCAddr: addrs[1]}, cmd, c.Dir, "caphost.log", addrs...)
}

// Envoy is how to run envoyproxy/ratelimit.
type Envoy struct {
	Bin, Dir  string // the binary; a directory for its runtime tree and log
	RedisAddr string
	// Rules are written to its runtime directory (ratelimit/config).
	Rules []File
	// Env adds settings (envoyproxy/ratelimit's environment variables).
	Env []string
}

// Start runs envoyproxy/ratelimit with the Redis backend on e.RedisAddr,
// without statsd or a runtime watch, and waits for its HTTP and gRPC
// listeners.
func (e Envoy) Start() (*Daemon, error) {
	runtime := filepath.Join(e.Dir, "runtime")
	if _, err := writeFiles(filepath.Join(runtime, "ratelimit", "config"), e.Rules); err != nil {
		return nil, err
	}
	addrs, err := freeAddrs(3)
	if err != nil {
		return nil, err
	}
	port := func(a string) string { _, p, _ := net.SplitHostPort(a); return p }
	cmd := exec.Command(e.Bin)
	cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"PORT="+port(addrs[0]), "GRPC_PORT="+port(addrs[1]), "DEBUG_PORT="+port(addrs[2]),
		"USE_STATSD=false", "LOG_LEVEL=warn", "BACKEND_TYPE=redis",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+e.RedisAddr,
		"RUNTIME_ROOT="+runtime, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
	)
	cmd.Env = append(cmd.Env, e.Env...)
	return start(&Daemon{Name: "envoy ratelimit", HTTPAddr: addrs[0], GRPCAddr: addrs[1]}, cmd, e.Dir, "envoy.log", addrs[:2]...)
}

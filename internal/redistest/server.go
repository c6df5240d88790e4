package redistest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// adminUser is the harness's own full-rights ACL user.
	adminUser = "admin"
	// discoveryUser is the limited sentinel-discovery ACL user created on sentinels.
	discoveryUser = "discovery"
	// adminClientName tags harness connections so ConnectedClients can ignore them.
	adminClientName = "redistest-admin"

	readyTimeout   = 10 * time.Second
	startAttempts  = 5
	logTailBytes   = 4096
	commandTimeout = 5 * time.Second
)

// kind selects the config template for a process.
type kind int

const (
	kindStandalone kind = iota
	kindCluster
	kindSentinel
)

// deployment is what all processes of one Start* call share: binary, options,
// generated secrets and certificates.
type deployment struct {
	bin       string
	o         options
	adminPass string
	discPass  string
	tls       *TLSMaterial
}

func newDeployment(t testing.TB, opts []Option) *deployment {
	t.Helper()
	d := &deployment{bin: Binary(t), o: buildOptions(opts)}
	if err := d.o.validate(); err != nil {
		t.Fatal(err)
	}
	d.adminPass = randomHex(t)
	d.discPass = randomHex(t)
	if d.o.tls {
		m, err := generateTLS(t.TempDir())
		if err != nil {
			t.Fatalf("redistest: generate TLS material: %v", err)
		}
		d.tls = m
	}
	return d
}

func randomHex(t testing.TB) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("redistest: random: %v", err)
	}
	return hex.EncodeToString(b[:])
}

// Server is one redis-server (or sentinel) process owned by a test.
type Server struct {
	d       *deployment
	kind    kind
	dir     string
	conf    string
	logPath string
	extra   []string // role-specific conf lines (replicaof, sentinel monitor ...)

	port    int
	busPort int // cluster bus port, kindCluster only

	admin *redis.Client

	mu   sync.Mutex
	proc *process
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// exited reports whether the process ended and was reaped, after which
// its pid may belong to another process. os.Process knows (through a
// pidfd where the kernel has one) even before done is closed.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
	}
	return errors.Is(p.cmd.Process.Signal(syscall.Signal(0)), os.ErrProcessDone)
}

// StartStandalone starts one standalone redis-server and registers its cleanup.
func StartStandalone(t testing.TB, opts ...Option) *Server {
	t.Helper()
	d := newDeployment(t, opts)
	s := d.newServer(t, kindStandalone, nil)
	if err := s.start(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	return s
}

// newServer prepares (but does not start) a process in its own temp dir and
// registers cleanup. Call it from the test goroutine; start may run anywhere.
func (d *deployment) newServer(t testing.TB, k kind, extra []string) *Server {
	t.Helper()
	dir := t.TempDir()
	s := &Server{
		d:       d,
		kind:    k,
		dir:     dir,
		conf:    filepath.Join(dir, "redis.conf"),
		logPath: filepath.Join(dir, "redis.log"),
		extra:   extra,
	}
	t.Cleanup(func() {
		s.Kill()
		if s.admin != nil {
			_ = s.admin.Close()
		}
	})
	return s
}

// Addr returns "127.0.0.1:port" (the TLS port when WithTLS).
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Port returns the client port (the TLS port when WithTLS).
func (s *Server) Port() int { return s.port }

// Dir returns the server's private working directory.
func (s *Server) Dir() string { return s.dir }

// Admin returns the authenticated harness admin client (TLS-aware). Use it for
// assertions only; its connections are named "redistest-admin".
func (s *Server) Admin() *redis.Client { return s.admin }

// AdminUser returns the harness admin credentials: ("admin", password) with
// WithACL, ("", "") otherwise (the default user needs no password then).
func (s *Server) AdminUser() (user, pass string) { return s.d.adminCreds() }

func (d *deployment) adminCreds() (string, string) {
	if !d.o.acl {
		return "", ""
	}
	return adminUser, d.adminPass
}

// TLS returns the generated certificates, or nil without WithTLS.
func (s *Server) TLS() *TLSMaterial { return s.d.tls }

// LogTail returns the last few KiB of the server log, for failure messages.
func (s *Server) LogTail() string { return tailFile(s.logPath, logTailBytes) }

func (d *deployment) clientOptions(addr string) *redis.Options {
	user, pass := d.adminCreds()
	o := &redis.Options{
		Addr:            addr,
		Username:        user,
		Password:        pass,
		ClientName:      adminClientName,
		DisableIdentity: true, // Redis 7.0 has no CLIENT SETINFO
		MaxRetries:      -1,
		DialTimeout:     2 * time.Second,
		ReadTimeout:     commandTimeout,
		WriteTimeout:    commandTimeout,
		PoolSize:        4,
	}
	if d.tls != nil {
		o.TLSConfig = d.tls.Config()
	}
	return o
}

// start picks ports (unless fixed), writes the config, launches the process
// and waits for PING. Bind races with other processes are retried on new ports.
func (s *Server) start(ctx context.Context, pickPorts bool) error {
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		if pickPorts {
			p, err := freePort()
			if err != nil {
				return err
			}
			s.port = p
			if s.kind == kindCluster {
				if s.busPort, err = freePort(); err != nil {
					return err
				}
			}
		}
		// A restart keeps the config on disk: Redis and Sentinel rewrite it
		// (CONFIG REWRITE after a failover, sentinel state), and that state
		// must survive like it would on a real host.
		if pickPorts {
			if err := os.WriteFile(s.conf, []byte(s.render()), 0o600); err != nil {
				return fmt.Errorf("redistest: write config: %w", err)
			}
		}
		if s.admin == nil {
			s.admin = redis.NewClient(s.d.clientOptions(s.Addr()))
		}
		err := s.launchAndWait(ctx)
		if err == nil {
			return nil
		}
		lastErr = err
		if !pickPorts || !strings.Contains(s.LogTail(), "Address already in use") {
			break
		}
		// The admin client is bound to the old address; rebuild it for the new port.
		_ = s.admin.Close()
		s.admin = nil
	}
	return lastErr
}

func (s *Server) launchAndWait(ctx context.Context) error {
	lf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("redistest: open log: %w", err)
	}
	args := []string{s.conf}
	if s.kind == kindSentinel {
		args = append(args, "--sentinel")
	}
	cmd := exec.Command(s.d.bin, args...)
	cmd.Dir = s.dir
	cmd.Stdout = lf
	cmd.Stderr = lf
	// Own process group (so a kill reaches everything) and SIGKILL when the
	// test binary dies, so no server outlives the test run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return fmt.Errorf("redistest: start %s: %w", s.d.bin, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), log: lf}
	go func() {
		_ = cmd.Wait()
		_ = lf.Close()
		close(p.done)
	}()
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()

	if err := s.waitReady(ctx, p); err != nil {
		s.Kill()
		return fmt.Errorf("%w\n--- %s log tail ---\n%s", err, s.Addr(), s.LogTail())
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var lastErr error
	for {
		select {
		case <-p.done:
			return fmt.Errorf("redistest: redis-server on %s exited during start-up", s.Addr())
		default:
		}
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		lastErr = s.admin.Ping(pctx).Err()
		if lastErr == nil {
			lastErr = s.checkOwnProcess(pctx, p)
		}
		pcancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: redis-server on %s not ready after %v: %v", s.Addr(), readyTimeout, lastErr)
		case <-p.done:
			return fmt.Errorf("redistest: redis-server on %s exited during start-up", s.Addr())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// checkOwnProcess makes sure the server answering on s's port is the
// process this Server started. Ports are picked free and then bound by
// redis-server, so another test process can win the same port in between;
// our redis-server then exits with "Address already in use" (and start
// picks a new port), but until it does, a ping would be answered by the
// other test's server.
func (s *Server) checkOwnProcess(ctx context.Context, p *process) error {
	info, err := s.admin.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	want := strconv.Itoa(p.cmd.Process.Pid)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if v == want {
				return nil
			}
			return fmt.Errorf("redistest: %s is answered by pid %s, not by this redis-server (pid %s): the port is taken", s.Addr(), v, want)
		}
	}
	return fmt.Errorf("redistest: %s: INFO server has no process_id", s.Addr())
}

// Kill sends SIGKILL to the process group and waits for the process to exit.
// It is a no-op when the server is not running, and sends nothing to a
// process that already exited: its pid (and so its group id) was freed
// when it was reaped, and on a busy machine (pid_max 32768, several test
// runs) the kernel hands that number to another process, another run's
// redis-server included, which a signal would then hit.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p == nil || p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// Restart starts the server again on the same port, directory and config file
// (including anything Redis rewrote into it, e.g. after a sentinel failover;
// cluster state comes back from nodes.conf) and waits until it answers PING.
// A running server is killed first. The dataset starts empty: no persistence.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.start(context.Background(), false); err != nil {
		t.Fatal(err)
	}
}

// Pause stops the process with SIGSTOP: connections stay open but nothing is answered.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc != nil && !s.proc.exited() {
		_ = syscall.Kill(s.proc.cmd.Process.Pid, sig)
	}
}

// CommandCalls returns how many times the server received command, from INFO
// commandstats: executed calls plus rejected_calls (refused before execution,
// e.g. by ACL), so 0 proves the command never reached the server. Names are
// lower case, subcommands joined by "|": "keys", "config|set", "flushall".
// The harness's own commands (info, client|list, ping ...) are counted too.
func (s *Server) CommandCalls(t testing.TB, command string) int64 {
	t.Helper()
	n, err := commandCalls(s.admin, command)
	if err != nil {
		t.Fatalf("redistest: %s: %v", s.Addr(), err)
	}
	return n
}

func commandCalls(c *redis.Client, command string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO commandstats: %w", err)
	}
	return parseCommandCalls(info, command)
}

// parseCommandCalls extracts calls+rejected_calls for one command from an
// INFO commandstats reply; an absent command has 0 calls.
func parseCommandCalls(info, command string) (int64, error) {
	fields, err := commandStat(info, command)
	if err != nil || fields == "" {
		return 0, err
	}
	var total int64
	for _, field := range strings.Split(fields, ",") {
		k, v, ok := strings.Cut(field, "=")
		if !ok || (k != "calls" && k != "rejected_calls") {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 || total > math.MaxInt64-n {
			return 0, fmt.Errorf("bad commandstats field %q", field)
		}
		total += n
	}
	return total, nil
}

// CommandStats are one command's counters from INFO commandstats.
type CommandStats struct {
	// Calls counts the calls that reached the command's implementation,
	// failed ones included (an EVALSHA answered NOSCRIPT is a call).
	Calls int64
	// Rejected counts calls refused before execution: ACL, a cluster
	// redirection or TRYAGAIN, MIN-REPLICAS, OOM, a wrong arity.
	Rejected int64
	// Failed counts calls that ran and replied with an error.
	Failed int64
}

// CommandStats returns command's counters (all 0 for a command never
// received): unlike CommandCalls it tells a call refused before execution
// (Rejected) from one that executed (Calls).
func (s *Server) CommandStats(t testing.TB, command string) CommandStats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	info, err := s.admin.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatalf("redistest: %s: INFO commandstats: %v", s.Addr(), err)
	}
	st, err := parseCommandStats(info, command)
	if err != nil {
		t.Fatalf("redistest: %s: %v", s.Addr(), err)
	}
	return st
}

// parseCommandStats extracts calls, rejected_calls and failed_calls for
// one command; other fields are ignored, a malformed or negative count of
// these three fails.
func parseCommandStats(info, command string) (CommandStats, error) {
	var st CommandStats
	fields, err := commandStat(info, command)
	if err != nil || fields == "" {
		return st, err
	}
	for _, field := range strings.Split(fields, ",") {
		k, v, ok := strings.Cut(field, "=")
		var dst *int64
		switch {
		case !ok:
			continue
		case k == "calls":
			dst = &st.Calls
		case k == "rejected_calls":
			dst = &st.Rejected
		case k == "failed_calls":
			dst = &st.Failed
		default:
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return CommandStats{}, fmt.Errorf("bad commandstats field %q", field)
		}
		*dst = n
	}
	return st, nil
}

// MicrosPerCall returns the server's own time per executed call of command
// (usec_per_call in INFO commandstats; 0 for a command never called), for
// benchmarks that report server time beside client time. Reset the
// counters with CONFIG RESETSTAT on Admin before measuring.
func (s *Server) MicrosPerCall(t testing.TB, command string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	info, err := s.admin.Info(ctx, "commandstats").Result()
	if err == nil {
		var us float64
		if us, err = parseMicrosPerCall(info, command); err == nil {
			return us
		}
	}
	t.Fatalf("redistest: %s: INFO commandstats: %v", s.Addr(), err)
	return 0
}

// parseMicrosPerCall extracts usec_per_call for one command from an INFO
// commandstats reply; an absent command has 0.
func parseMicrosPerCall(info, command string) (float64, error) {
	fields, err := commandStat(info, command)
	if err != nil || fields == "" {
		return 0, err
	}
	for _, field := range strings.Split(fields, ",") {
		if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
			us, err := strconv.ParseFloat(v, 64)
			if err != nil || us < 0 {
				return 0, fmt.Errorf("bad commandstats field %q", field)
			}
			return us, nil
		}
	}
	return 0, fmt.Errorf("no usec_per_call for %s", command)
}

// commandStat returns the fields of command's line in an INFO
// commandstats reply ("calls=1,usec=5,..."), or "" when it has none.
func commandStat(info, command string) (string, error) {
	prefix := "cmdstat_" + strings.ToLower(command) + ":"
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if fields, ok := strings.CutPrefix(line, prefix); ok {
			return fields, nil
		}
	}
	return "", sc.Err()
}

// ConnectedClients returns the number of client connections other than the
// harness's own admin connections, replication links and sentinel links.
func (s *Server) ConnectedClients(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	list, err := s.admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatalf("redistest: %s: CLIENT LIST: %v", s.Addr(), err)
	}
	return countClients(list)
}

func countClients(list string) int {
	n := 0
	for _, line := range strings.Split(list, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		var name, flags string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "name="); ok {
				name = v
			} else if v, ok := strings.CutPrefix(f, "flags="); ok {
				flags = v
			}
		}
		if name == adminClientName || strings.HasPrefix(name, "sentinel-") ||
			strings.ContainsAny(flags, "SM") {
			continue
		}
		n++
	}
	return n
}

// render produces redis.conf for this process.
func (s *Server) render() string {
	d := s.d
	var b strings.Builder
	line := func(parts ...string) { b.WriteString(strings.Join(parts, " ")); b.WriteByte('\n') }
	line("bind", "127.0.0.1")
	line("protected-mode", "no")
	line("daemonize", "no")
	line("logfile", `""`)
	line("dir", strconv.Quote(s.dir))
	if d.tls != nil {
		line("port", "0")
		line("tls-port", strconv.Itoa(s.port))
		line("tls-cert-file", strconv.Quote(d.tls.serverCertFile))
		line("tls-key-file", strconv.Quote(d.tls.serverKeyFile))
		line("tls-ca-cert-file", strconv.Quote(d.tls.CAFile))
		line("tls-auth-clients", "optional")
		line("tls-replication", "yes")
		if s.kind == kindCluster {
			line("tls-cluster", "yes")
		}
	} else {
		line("port", strconv.Itoa(s.port))
	}
	if s.kind != kindSentinel {
		line("save", `""`)
		line("appendonly", "no")
		// The default 5 s diskless-sync delay would dominate replica start-up.
		line("repl-diskless-sync-delay", "0")
	}
	if d.o.acl {
		line("user", "default", "off")
		line("user", adminUser, "on", ">"+d.adminPass, "~*", "&*", "+@all")
		if s.kind == kindSentinel {
			// A discovery-only user for clients (go-redis FailoverClient) and
			// the admin user for sentinel-to-sentinel traffic.
			line("user", discoveryUser, "on", ">"+d.discPass, "-@all", "&*",
				"+ping", "+hello", "+auth", "+client|setname", "+client|getname",
				"+sentinel|get-master-addr-by-name", "+sentinel|sentinels",
				"+sentinel|replicas", "+sentinel|slaves", "+sentinel|master",
				"+subscribe", "+psubscribe", "+unsubscribe", "+punsubscribe", "+role")
			line("sentinel", "sentinel-user", adminUser)
			line("sentinel", "sentinel-pass", d.adminPass)
		} else {
			for _, u := range d.o.users {
				parts := []string{"user", u.Name, "on"}
				if u.Password == "" {
					parts = append(parts, "nopass")
				} else {
					parts = append(parts, ">"+u.Password)
				}
				line(append(parts, u.Rules...)...)
			}
			line("masteruser", adminUser)
			line("masterauth", d.adminPass)
		}
	}
	if s.kind == kindCluster {
		line("cluster-enabled", "yes")
		line("cluster-config-file", "nodes.conf")
		line("cluster-node-timeout", "2000")
		line("cluster-port", strconv.Itoa(s.busPort))
	}
	if s.kind != kindSentinel {
		for _, x := range d.o.extra {
			line(x.name, x.value)
		}
	}
	for _, x := range s.extra {
		line(x)
	}
	return b.String()
}

// freePort asks the kernel for a free loopback port. The port is released
// before the server binds it, so start retries on "Address already in use".
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: pick free port: %w", err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	if port == 6379 {
		// Never hand out the shared server's port, however unlikely.
		return freePort()
	}
	return port, nil
}

func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	off := st.Size() - n
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	k, _ := f.ReadAt(buf, off) // a short read still yields a useful tail
	return string(buf[:k])
}

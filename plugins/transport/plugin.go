package transport

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Config is one out-of-process transport.
type Config struct {
	// Name identifies the transport in logs and metric labels: 1..32 bytes
	// of [a-z0-9-].
	Name string
	// Path is the plugin binary; it must be absolute.
	Path string
	// SHA256 is the binary's expected digest, 64 hex digits. go-plugin
	// checks it before every launch (the first one and each restart); a
	// mismatch refuses the launch.
	SHA256 string
	// CallTimeout bounds one Deliver call (default 10s). The plugin gets
	// the deadline minus a small margin, so its own verdict arrives first.
	CallTimeout time.Duration
	// Settings are this transport's own settings (URL, HMAC secret, SMTP
	// host, directory…), sent to the plugin over the wire after launch,
	// never through its environment or arguments. Bounded: see
	// ValidateSettings.
	Settings map[string]string
	// BackoffMin and BackoffMax bound the restart backoff (defaults 100ms
	// and 30s): the delay doubles from BackoffMin with each restart and
	// returns to BackoffMin once the plugin answers a call.
	BackoffMin, BackoffMax time.Duration
	// HealthInterval is how often the supervisor checks that the process
	// is alive and answers gRPC health (default 2s); HealthTimeout bounds
	// one check (default 2s).
	HealthInterval, HealthTimeout time.Duration
	// StartTimeout bounds one launch, handshake included (default 10s).
	StartTimeout time.Duration
	// WedgedAfter is how many consecutive calls an instance may leave
	// unanswered past the host's deadline before the supervisor restarts
	// it as wedged (default 3). A plugin's own deadline ends a margin
	// before the host's, so a healthy plugin always answers in time, even
	// to say it timed out; one that does not is stuck inside Deliver
	// while its gRPC health service still answers SERVING.
	WedgedAfter int
	// Logger receives the host side's lines and the plugin's own log
	// lines, bounded and sanitised; nil discards them.
	Logger *slog.Logger
	// Observer receives restarts, launches and calls (and the connect
	// broker's refusals when it is a BrokerObserver); nil ignores them.
	Observer Observer

	// testNamespaces, a test's: "shared" launches the plugin without
	// asking for namespaces of its own, "refused" makes the tests'
	// plugin ask for ones the kernel refuses.
	testNamespaces string
}

// Errors of Launch, matched with errors.Is.
var (
	ErrConfig           = errors.New("transport: invalid config")
	ErrChecksumMismatch = errors.New("transport: plugin binary checksum mismatch")
	ErrLaunch           = errors.New("transport: plugin did not start")
	ErrSettingsRefused  = errors.New("transport: plugin refused its settings")
	ErrClosed           = errors.New("transport: plugin closed")
)

func (c *Config) withDefaults() (Config, []byte, error) {
	cfg := *c
	bad := func(format string, args ...any) (Config, []byte, error) {
		return Config{}, nil, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	if !ValidName(cfg.Name) {
		return bad("name: 1..32 bytes of [a-z0-9-]")
	}
	if !filepath.IsAbs(cfg.Path) {
		return bad("%s: path must be absolute", cfg.Name)
	}
	sum, err := hex.DecodeString(cfg.SHA256)
	if err != nil || len(sum) != sha256.Size {
		return bad("%s: sha256 must be 64 hex digits", cfg.Name)
	}
	if err := ValidateSettings(cfg.Settings); err != nil {
		return bad("%s: %w", cfg.Name, err)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.CallTimeout, 10*time.Second)
	def(&cfg.BackoffMin, 100*time.Millisecond)
	def(&cfg.BackoffMax, 30*time.Second)
	def(&cfg.HealthInterval, 2*time.Second)
	def(&cfg.HealthTimeout, 2*time.Second)
	def(&cfg.StartTimeout, 10*time.Second)
	for _, d := range []time.Duration{cfg.CallTimeout, cfg.BackoffMin, cfg.BackoffMax, cfg.HealthInterval, cfg.HealthTimeout, cfg.StartTimeout} {
		if d < 0 {
			return bad("%s: negative duration", cfg.Name)
		}
	}
	if cfg.WedgedAfter == 0 {
		cfg.WedgedAfter = 3
	}
	if cfg.WedgedAfter < 0 {
		return bad("%s: negative wedged-after", cfg.Name)
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		return bad("%s: backoff max below min", cfg.Name)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	// The settings map is copied: the caller may not change a running
	// plugin's settings behind its back.
	settings := make(map[string]string, len(cfg.Settings))
	for k, v := range cfg.Settings {
		settings[k] = v
	}
	cfg.Settings = settings
	return cfg, sum, nil
}

// MaxNameBytes bounds a transport name.
const MaxNameBytes = 32

// ValidName reports whether name can name a transport (Config.Name, a
// metric label): 1..MaxNameBytes bytes of [a-z0-9-].
func ValidName(name string) bool { return validToken(name, MaxNameBytes, false) }

// instance is one running plugin process.
type instance struct {
	client *plugin.Client
	broker *broker
	conn   *grpc.ClientConn
	pid    int
	// overdue counts consecutive calls left unanswered past the host's
	// deadline; any reply resets it (see Config.WedgedAfter).
	overdue atomic.Int32
}

// kill ends the process and its broker (whose goroutines end with the
// process anyway, at its end of the socket pair).
func (i *instance) kill() {
	i.client.Kill()
	i.broker.close()
}

// Plugin is a transport running as a go-plugin process. It implements
// Transport; a supervisor goroutine health-checks the process and restarts
// it with bounded exponential backoff when it dies, stops answering its
// health check, or leaves Config.WedgedAfter calls in a row unanswered.
type Plugin struct {
	cfg Config
	sum []byte
	log *slog.Logger

	mu     sync.Mutex
	cur    *instance // nil while (re)starting
	closed bool

	// failures counts restarts since the plugin last answered a call; it
	// sets the next backoff. Deliver resets it, the supervisor raises it.
	failures atomic.Int32
	// sandbox is what the latest configured process reported.
	sandbox atomic.Pointer[SandboxLevel]
	// pathsWarned: the host said once that this plugin's sandbox does not
	// hide paths.
	pathsWarned atomic.Bool
	kick        chan struct{}
	done        chan struct{}
	wg          sync.WaitGroup
}

var _ Transport = (*Plugin)(nil)

// Launch verifies the binary's checksum, starts the plugin process with a
// minimal environment (go-plugin's handshake variables only: no Redis
// address, none of caphost's secrets), hands it cfg.Settings, and starts
// the supervisor. A checksum mismatch, a failed start or refused settings
// leave nothing running and return an error (ErrChecksumMismatch,
// ErrLaunch, ErrSettingsRefused).
func Launch(ctx context.Context, cfg Config) (*Plugin, error) {
	c, sum, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Plugin{cfg: c, sum: sum, log: c.Logger.With(slog.String("transport", c.Name)),
		kick: make(chan struct{}, 1), done: make(chan struct{})}
	inst, err := p.start(ctx)
	c.Observer.Launched(c.Name, err)
	if err != nil {
		return nil, err
	}
	p.cur = inst
	p.wg.Add(1)
	go p.supervise()
	return p, nil
}

// start launches one instance and configures it. The process is asked
// to run in namespaces of its own (isolate, enterNamespaces); where it
// could not, p says so once, as a warning: its sandbox does not hide
// paths (SandboxLevel.Paths), and the plugin logs why.
func (p *Plugin) start(ctx context.Context) (*instance, error) {
	inst, err := p.spawn()
	if err != nil {
		return nil, err
	}
	level, dial, err := p.configure(ctx, inst)
	if err != nil {
		inst.kill()
		return nil, err
	}
	inst.broker.freeze(ctx, dial)
	inst.broker.start()
	p.sandbox.Store(&level)
	if level.Sockets && !level.Paths && !p.pathsWarned.Swap(true) {
		p.log.Warn("transport plugin sandbox does not hide paths: it runs without a root of its own (see the plugin's reason)",
			slog.String("restricted", level.Restricted()))
	}
	return inst, nil
}

// spawn launches one process. Each gets a fresh broker socket pair, its
// end passed as descriptor 3 (exec.Cmd.ExtraFiles, which go-plugin
// leaves as they are).
func (p *Plugin) spawn() (*instance, error) {
	b, child, err := newBroker(p.log)
	switch {
	case err != nil && brokerRequired:
		return nil, fmt.Errorf("%w: %s: %w", ErrLaunch, p.cfg.Name, err)
	case err != nil:
		// No sandbox needs it here (say, macOS, without unix
		// SOCK_SEQPACKET): the plugin dials for itself.
		b, child = nil, nil
	}
	if o, ok := p.cfg.Observer.(BrokerObserver); ok && b != nil {
		b.onRefuse = func(reason string) { o.BrokerRefused(p.cfg.Name, reason) }
	}
	cmd := exec.Command(p.cfg.Path)
	switch p.cfg.testNamespaces {
	case "shared":
	case "refused":
		cmd.Env = append(cmd.Env, "CAPHOST_TRANSPORT_TEST_REFUSE_NAMESPACES=1")
		isolate(cmd)
	default:
		isolate(cmd)
	}
	if child != nil { // nil where there is no broker (not unix)
		cmd.ExtraFiles = []*os.File{child}
	}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  handshake(),
		Plugins:          plugin.PluginSet{pluginKey: &grpcPlugin{}},
		Cmd:              cmd,
		SecureConfig:     &plugin.SecureConfig{Checksum: p.sum, Hash: sha256.New()},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		SkipHostEnv:      true,
		StartTimeout:     p.cfg.StartTimeout,
		Logger:           newLogBridge(p.log, p.cfg.Name),
		GRPCDialOptions: []grpc.DialOption{grpc.WithDefaultCallOptions(
			grpc.MaxCallRecvMsgSize(MaxReplyBytes+1<<10), grpc.MaxCallSendMsgSize(maxRequestBytes+1<<10))},
	})
	rpc, err := client.Client()
	// The child has its copy (or never started): the host keeps none, so
	// the broker reads end of file when the process is gone.
	if child != nil {
		_ = child.Close()
	}
	inst := &instance{client: client, broker: b}
	if err != nil {
		inst.kill()
		if errors.Is(err, plugin.ErrChecksumsDoNotMatch) {
			return nil, fmt.Errorf("%w: %s", ErrChecksumMismatch, p.cfg.Name)
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrLaunch, p.cfg.Name, err)
	}
	raw, err := rpc.Dispense(pluginKey)
	conn, ok := raw.(*grpc.ClientConn)
	if err != nil || !ok {
		inst.kill()
		return nil, fmt.Errorf("%w: %s: dispense: %v", ErrLaunch, p.cfg.Name, err)
	}
	inst.conn = conn
	if rc := client.ReattachConfig(); rc != nil {
		inst.pid = rc.Pid
	}
	return inst, nil
}

// configure sends the settings and returns the sandbox the plugin
// reported and the broker targets it declared, each of whose hosts a
// setting must name (hostInSettings): a plugin names only servers its
// operator configured.
func (p *Plugin) configure(ctx context.Context, inst *instance) (SandboxLevel, []string, error) {
	req, err := encodeConfigure(p.cfg.Settings)
	if err != nil {
		return SandboxLevel{}, nil, fmt.Errorf("%w: %s: %w", ErrLaunch, p.cfg.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.StartTimeout)
	defer cancel()
	out := new(wrapperspb.BytesValue)
	if err := inst.conn.Invoke(ctx, methodConfigure, wrapperspb.Bytes(req), out); err != nil {
		return SandboxLevel{}, nil, fmt.Errorf("%w: %s: configure: %w", ErrLaunch, p.cfg.Name, err)
	}
	w, err := decodeConfigured(out.GetValue())
	if err != nil {
		return SandboxLevel{}, nil, fmt.Errorf("%w: %s: configure: %w", ErrLaunch, p.cfg.Name, err)
	}
	if !w.OK {
		return SandboxLevel{}, nil, fmt.Errorf("%w: %s: setting %s: %s", ErrSettingsRefused, p.cfg.Name, w.Key, w.Code)
	}
	for i, t := range w.Dial {
		if !hostInSettings(t, p.cfg.Settings) {
			p.log.Warn("transport broker refused a dial target", slog.Int("target", i), slog.String("reason", "not-in-settings"))
			return SandboxLevel{}, nil, fmt.Errorf("%w: %s: sandbox: dial target %d not in the settings", ErrLaunch, p.cfg.Name, i)
		}
	}
	return w.level(), w.Dial, nil
}

// hostInSettings: target's host is one a setting names, in the form a
// setting gives it: a value that is the host or the whole target, or a
// URL whose host it is (case-insensitive, a trailing dot ignored). Not a
// substring: "a.example" does not name "example".
func hostInSettings(target string, settings map[string]string) bool {
	host, _, err := net.SplitHostPort(target)
	if err != nil || host == "" {
		return false
	}
	same := func(a, b string) bool {
		return a != "" && strings.EqualFold(strings.TrimSuffix(a, "."), strings.TrimSuffix(b, "."))
	}
	for _, v := range settings {
		if same(v, host) || same(v, target) {
			return true
		}
		if u, err := url.Parse(v); err == nil && u.Host != "" && same(u.Hostname(), host) {
			return true
		}
	}
	return false
}

// Name returns the configured transport name.
func (p *Plugin) Name() string { return p.cfg.Name }

// Sandboxed returns the sandbox the plugin's process reported when it
// was last configured (at launch or at its latest restart): the zero
// SandboxLevel when it runs unconfined.
func (p *Plugin) Sandboxed() SandboxLevel {
	if l := p.sandbox.Load(); l != nil {
		return *l
	}
	return SandboxLevel{}
}

// Deliver hands m to the plugin process. Classification:
//   - not handed over (closed, restarting, connection not usable, m
//     invalid, ctx already done): RejectedDefinite;
//   - handed over and then the call failed (plugin died, deadline or
//     cancellation, any gRPC error): Indeterminate, never retried here;
//   - otherwise the plugin's own verdict, strictly validated: a malformed
//     reply is Indeterminate and logged with ErrInvalidReply.
func (p *Plugin) Deliver(ctx context.Context, m Message) Receipt {
	start := time.Now()
	r := p.deliver(ctx, m)
	p.cfg.Observer.Delivered(p.cfg.Name, r.Outcome, time.Since(start))
	return r
}

func (p *Plugin) deliver(ctx context.Context, m Message) Receipt {
	definite := func(code string) Receipt { return Receipt{Outcome: RejectedDefinite, Code: code} }
	if err := ValidateMessage(m); err != nil {
		p.log.Warn("transport message refused", slog.Any("error", err))
		return definite("message-invalid")
	}
	p.mu.Lock()
	inst, closed := p.cur, p.closed
	p.mu.Unlock()
	switch {
	case closed:
		return definite("plugin-closed")
	case inst == nil:
		return definite("plugin-unavailable")
	case ctx.Err() != nil:
		return definite("canceled-before-send")
	}
	if s := inst.conn.GetState(); s == connectivity.TransientFailure || s == connectivity.Shutdown {
		p.poke()
		return definite("plugin-unreachable")
	}
	req, err := encodeMessage(m)
	if err != nil {
		return definite("message-invalid")
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.CallTimeout)
	defer cancel()
	out := new(wrapperspb.BytesValue)
	// From here on the request may reach the plugin: every failure is
	// Indeterminate.
	if err := inst.conn.Invoke(ctx, methodDeliver, wrapperspb.Bytes(req), out); err != nil {
		p.poke()
		// The server side may end the stream on the propagated deadline a
		// moment before this side's timer fires: its status says so.
		switch code := status.Code(err); {
		case errors.Is(ctx.Err(), context.DeadlineExceeded) || code == codes.DeadlineExceeded:
			inst.overdue.Add(1)
			return Receipt{Outcome: Indeterminate, Code: "timeout-after-send"}
		case ctx.Err() != nil:
			// codes.Canceled alone is the connection being closed under
			// the call (the supervisor replacing a dead plugin), not the
			// caller: that is plugin-lost-after-send below.
			return Receipt{Outcome: Indeterminate, Code: "canceled-after-send"}
		}
		return Receipt{Outcome: Indeterminate, Code: "plugin-lost-after-send"}
	}
	inst.overdue.Store(0)
	r, err := DecodeReceipt(out.GetValue())
	if err != nil {
		p.log.Error("transport plugin reply refused", slog.Any("error", err))
		return Receipt{Outcome: Indeterminate, Code: "plugin-reply-invalid"}
	}
	p.failures.Store(0)
	return r
}

// poke asks the supervisor to check the process now.
func (p *Plugin) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Close stops the supervisor and the plugin process. Calls in flight end
// Indeterminate; later calls are RejectedDefinite ("plugin-closed").
func (p *Plugin) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	inst := p.cur
	p.cur = nil
	p.mu.Unlock()
	close(p.done)
	p.wg.Wait()
	if inst != nil {
		inst.kill()
	}
	return nil
}

// supervise health-checks the current instance every HealthInterval (or
// at once when a call failed) and replaces it when it is gone.
func (p *Plugin) supervise() {
	defer p.wg.Done()
	tick := time.NewTicker(p.cfg.HealthInterval)
	defer tick.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-tick.C:
		case <-p.kick:
		}
		p.mu.Lock()
		inst, closed := p.cur, p.closed
		p.mu.Unlock()
		if closed || inst == nil {
			// Close won the race against this tick; only the supervisor
			// ever clears cur otherwise.
			return
		}
		cause, ok := p.check(inst)
		if ok {
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return
		}
		p.cur = nil
		p.mu.Unlock()
		inst.kill()
		if !p.restart(cause) {
			return
		}
	}
}

func (p *Plugin) check(inst *instance) (RestartCause, bool) {
	if inst.client.Exited() {
		return CauseExited, false
	}
	if int(inst.overdue.Load()) >= p.cfg.WedgedAfter {
		return CauseWedged, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.HealthTimeout)
	defer cancel()
	res, err := grpc_health_v1.NewHealthClient(inst.conn).Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: plugin.GRPCServiceName})
	if err == nil && res.GetStatus() == grpc_health_v1.HealthCheckResponse_SERVING {
		return "", true
	}
	// A dead process fails the health call at once, a moment before
	// go-plugin has reaped it: give the exit a short grace so the cause
	// (a metric label) says "exited" when that is what happened.
	for range 5 {
		if inst.client.Exited() {
			return CauseExited, false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return CauseUnhealthy, false
}

// backoff is the delay before restart number n (0-based) since the plugin
// last answered: BackoffMin doubled n times, at most BackoffMax.
func (p *Plugin) backoff(n int32) time.Duration {
	d := p.cfg.BackoffMin
	for i := int32(0); i < n && d < p.cfg.BackoffMax; i++ {
		d *= 2
	}
	return min(d, p.cfg.BackoffMax)
}

// restart relaunches until an instance is up or the plugin is closed; it
// reports false when closed.
func (p *Plugin) restart(cause RestartCause) bool {
	for {
		n := p.failures.Add(1) - 1
		delay := p.backoff(n)
		p.log.Warn("transport plugin restarting", slog.String("cause", string(cause)), slog.Duration("delay", delay))
		p.cfg.Observer.Restarting(p.cfg.Name, cause, delay)
		t := time.NewTimer(delay)
		select {
		case <-p.done:
			t.Stop()
			return false
		case <-t.C:
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-p.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		inst, err := p.start(ctx)
		cancel()
		if err != nil {
			select {
			case <-p.done: // Close cut the launch short: not a failure to report
				return false
			default:
			}
			p.cfg.Observer.Launched(p.cfg.Name, err)
			p.log.Error("transport plugin relaunch failed", slog.Any("error", err))
			cause = CauseLaunchFailed
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			inst.kill()
			return false
		}
		p.cur = inst
		p.mu.Unlock()
		// Reported once calls can reach the new instance.
		p.cfg.Observer.Launched(p.cfg.Name, nil)
		p.log.Info("transport plugin restarted")
		return true
	}
}

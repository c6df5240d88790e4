package transport

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

// Factory builds a transport from its settings inside the plugin process.
// It is called once per plugin process, by the host's Configure call,
// before any Deliver, with the process's Env.
type Factory func(settings map[string]string, env Env) (Transport, error)

// SettingError is a factory's refusal of one setting; Code is a bounded
// machine code ([a-z0-9.-]) such as "missing" or "not-absolute". The host
// reports Key and Code, never the value.
type SettingError struct{ Key, Code string }

func (e *SettingError) Error() string { return "transport: setting " + e.Key + ": " + e.Code }

// Serve runs a transport plugin: the whole main of a transport binary. It
// returns only when the host ends the plugin process; run by hand (without
// the host's handshake) it prints a notice and exits with status 1.
//
// The process confines itself once the host has configured it: see
// Sandbox. Before that, on Linux and when the host asks, it starts its
// own image again in a user and mount namespace of its own, which then
// serves, and only waits for it (see enterNamespaces). Its transport's
// connections go through the host's connect broker (the Env passed to
// f), on the descriptor the host passed as 3. Name resolution in a
// sandbox with its own sockets (Sandbox.ConnectTCP) uses Go's own
// resolver, never the C library's, whose modules the sandbox would not
// let it load.
func Serve(f Factory) {
	// First: the process that serves may be a new one, in namespaces of
	// its own.
	ns, nsErr := enterNamespaces()
	env := pluginEnv()
	go exitWithParent(os.Getppid(), time.Second)
	net.DefaultResolver.PreferGo = true
	// JSON lines on stderr: the host parses them, bounds them and logs
	// them through its own slog.Logger.
	log := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Info})
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: handshake(),
		Plugins:         plugin.PluginSet{pluginKey: &grpcPlugin{srv: &server{factory: f, env: env, ns: ns, nsErr: nsErr, log: log}}},
		GRPCServer: func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, grpc.MaxRecvMsgSize(maxRequestBytes+1<<10))...)
		},
		Logger: log,
	})
}

// server is the plugin side of the wire.
type server struct {
	factory Factory
	env     Env
	// ns names the host's namespaces (envNamespaces) when the plugin
	// runs in new ones; "" when not, and nsErr says why.
	ns    string
	nsErr error
	log   hclog.Logger
	mu    sync.Mutex
	impl  Transport
}

// replyMargin is how much of the host's deadline the plugin keeps for
// itself: its own verdict (say, "connection refused" → definite) must
// reach the host before the host's deadline turns the call Indeterminate.
func replyMargin(remaining time.Duration) time.Duration {
	return min(250*time.Millisecond, remaining/10)
}

func (s *server) configure(_ context.Context, req []byte) ([]byte, error) {
	reply := func(w wireConfigured) ([]byte, error) { return jsonMarshal(w) }
	settings, err := decodeConfigure(req)
	if err != nil {
		return reply(wireConfigured{Key: "settings", Code: "invalid"})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.impl != nil {
		return reply(wireConfigured{Key: "settings", Code: "already-configured"})
	}
	impl, err := s.factory(settings, s.env)
	if err != nil {
		var se *SettingError
		if errors.As(err, &se) && validToken(se.Key, MaxSettingKeyBytes, true) && ValidCode(se.Code) {
			return reply(wireConfigured{Key: se.Key, Code: se.Code})
		}
		return reply(wireConfigured{Key: "settings", Code: "refused"})
	}
	// Confined before the first Deliver can run and before the host
	// hears OK: from here on the transport reaches only what it declared.
	var sb Sandbox
	if d, ok := impl.(Sandboxed); ok {
		sb = d.Sandbox()
	}
	level, shown, err := confine(sb, s.ns)
	if err != nil {
		s.log.Error("transport sandbox not applied", "error", err.Error())
		_ = impl.Close()
		return reply(wireConfigured{Key: "sandbox", Code: "not-applied"})
	}
	if shown != nil && s.nsErr != nil {
		shown = s.nsErr
	}
	if shown != nil {
		s.log.Warn("transport sandbox does not hide paths: the plugin can tell which paths outside its grants exist",
			"reason", shown.Error())
	}
	if level.complete() {
		s.log.Info("transport sandbox applied", "landlock_abi", level.LandlockABI,
			"restricted", level.Restricted(), "tcp_connect", sb.ports(), "dial_targets", len(sb.Dial))
	} else {
		s.log.Warn("transport sandbox incomplete: this kernel cannot restrict all of files, TCP ports and sockets",
			"landlock_abi", level.LandlockABI, "restricted", level.Restricted(), "tcp_connect", sb.ports(),
			"dial_targets", len(sb.Dial))
	}
	s.impl = impl
	return reply(configuredOK(level, sb.Dial))
}

func (s *server) deliver(ctx context.Context, req []byte) ([]byte, error) {
	s.mu.Lock()
	impl := s.impl
	s.mu.Unlock()
	if impl == nil {
		return encodeReceipt(Receipt{Outcome: RejectedDefinite, Code: "plugin-not-configured"})
	}
	m, err := decodeMessage(req)
	if err != nil {
		return encodeReceipt(Receipt{Outcome: RejectedDefinite, Code: "request-invalid"})
	}
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, dl.Add(-replyMargin(time.Until(dl))))
		defer cancel()
	}
	r := impl.Deliver(ctx, m)
	if ValidateReceipt(r) != nil {
		// A transport bug: the send may still have happened.
		r = Receipt{Outcome: Indeterminate, Code: "plugin-receipt-invalid"}
	}
	return encodeReceipt(r)
}

// exitWithParent ends the plugin when the host that started it is gone
// (the process is re-parented): go-plugin does not, and a host killed
// with SIGKILL would otherwise leave its transports running.
func exitWithParent(ppid int, every time.Duration) {
	for range time.Tick(every) {
		if os.Getppid() != ppid {
			os.Exit(0)
		}
	}
}

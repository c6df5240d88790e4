//go:build transporttest

package transport

import (
	"context"
	"net"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
)

// ServeTestPlugin serves the tests' plugin. For settings that build
// returns a Transport (or an error) for, it is served exactly as Serve
// serves a real transport: configured, confined to its Sandbox, its
// receipts validated. For any other settings (build returns nil, nil) its
// Deliver reply bytes are whatever reply returns, unvalidated: the
// misbehaving plugin. Only builds with the transporttest tag contain it.
func ServeTestPlugin(build Factory, reply func(ctx context.Context, settings map[string]string, req []byte) []byte) {
	ns, nsErr := enterNamespaces()
	env := pluginEnv()
	net.DefaultResolver.PreferGo = true
	log := hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Info})
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: handshake(),
		Plugins:         plugin.PluginSet{pluginKey: &grpcPlugin{srv: &rawServer{build: build, env: env, ns: ns, nsErr: nsErr, reply: reply, log: log}}},
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          log,
	})
}

type rawServer struct {
	build    Factory
	env      Env
	ns       string
	nsErr    error
	reply    func(ctx context.Context, settings map[string]string, req []byte) []byte
	log      hclog.Logger
	mu       sync.Mutex
	settings map[string]string
	real     *server // set when build made a transport
}

func (s *rawServer) configure(ctx context.Context, req []byte) ([]byte, error) {
	settings, err := decodeConfigure(req)
	if err != nil {
		return jsonMarshal(wireConfigured{Key: "settings", Code: "invalid"})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if impl, err := s.build(settings, s.env); impl != nil || err != nil {
		s.real = &server{factory: func(map[string]string, Env) (Transport, error) { return impl, err }, ns: s.ns, nsErr: s.nsErr, log: s.log}
		return s.real.configure(ctx, req)
	}
	s.settings = settings
	return jsonMarshal(wireConfigured{OK: true})
}

func (s *rawServer) deliver(ctx context.Context, req []byte) ([]byte, error) {
	s.mu.Lock()
	settings, real := s.settings, s.real
	s.mu.Unlock()
	if real != nil {
		return real.deliver(ctx, req)
	}
	return s.reply(ctx, settings, req), nil
}

//go:build transporttest

package transport

import (
	"context"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
)

// ServeTestPlugin serves a plugin whose Deliver reply bytes are whatever
// reply returns, unvalidated: the tests' misbehaving plugin. Only builds
// with the transporttest tag contain it.
func ServeTestPlugin(reply func(ctx context.Context, settings map[string]string, req []byte) []byte) {
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: handshake(),
		Plugins:         plugin.PluginSet{pluginKey: &grpcPlugin{srv: &rawServer{reply: reply}}},
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          hclog.New(&hclog.LoggerOptions{Output: os.Stderr, JSONFormat: true, Level: hclog.Info}),
	})
}

type rawServer struct {
	reply    func(ctx context.Context, settings map[string]string, req []byte) []byte
	mu       sync.Mutex
	settings map[string]string
}

func (s *rawServer) configure(_ context.Context, req []byte) ([]byte, error) {
	settings, err := decodeConfigure(req)
	if err != nil {
		return jsonMarshal(wireConfigured{Key: "settings", Code: "invalid"})
	}
	s.mu.Lock()
	s.settings = settings
	s.mu.Unlock()
	return jsonMarshal(wireConfigured{OK: true})
}

func (s *rawServer) deliver(ctx context.Context, req []byte) ([]byte, error) {
	s.mu.Lock()
	settings := s.settings
	s.mu.Unlock()
	return s.reply(ctx, settings, req), nil
}

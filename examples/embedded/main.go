// Command embedded is a net/http service that embeds caphost as a library:
// host.New builds the host from a configuration, GET /hello is protected by
// the rate-limit middleware, caphost's /readyz, /livez and /metrics are
// mounted next to it, and SIGINT or SIGTERM drains the server and then
// closes the host.
//
// The configuration is the file given with -config (caphost.yaml next to
// this file) or, without -config, the same configuration built in code
// (builtinConfig). Both need a Redis with the two ACL users caphost.yaml
// lists:
//
//	export HELLO_APP_PASS=… HELLO_ADMIN_PASS=… HELLO_KEY_V1=$(openssl rand -hex 32)
//	go run ./examples/embedded -config examples/embedded/caphost.yaml
//	curl -i http://127.0.0.1:8081/hello
//
// Every answer of /hello carries RateLimit-Limit, RateLimit-Remaining and
// RateLimit-Reset; once a client has spent its tokens it gets 429 with
// Retry-After (seconds).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"testing/fstest"
	"time"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/ratelimit"
)

func main() {
	configFile := flag.String("config", "", "caphost configuration file (default: the configuration built in code)")
	redisAddr := flag.String("redis", "127.0.0.1:6379", "Redis host:port of the configuration built in code")
	listen := flag.String("listen", "127.0.0.1:8081", "HTTP listen address")
	flag.Parse()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, *configFile, *redisAddr, *listen); err != nil {
		// A *policy.ValidationError lists every configuration problem at once.
		log.Error("exiting", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, configFile, redisAddr, listen string) error {
	var (
		cfg *config.Config
		err error
	)
	if configFile != "" {
		cfg, err = config.Load(ctx, configFile)
	} else {
		cfg, err = builtinConfig(ctx, redisAddr)
	}
	if err != nil {
		return err
	}
	h, err := host.New(ctx, cfg, host.WithLogger(log))
	if err != nil {
		return err
	}
	serveErr := serve(ctx, log, h, listen)
	// The server has drained: no request can reach the limiter any more.
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := h.Close(closeCtx); err != nil {
		return errors.Join(serveErr, fmt.Errorf("closing caphost: %w", err))
	}
	log.Info("caphost closed")
	return serveErr
}

// serve runs the HTTP server until ctx is cancelled, then shuts it down
// gracefully.
func serve(ctx context.Context, log *slog.Logger, h *host.Host, listen string) error {
	lim, sel, err := h.RateLimit()
	if err != nil {
		return err
	}
	// The client is the TCP peer; behind a proxy, set TrustedProxies and
	// ClientIPHeaders so X-Forwarded-For is believed from the proxy only.
	limit := ratelimit.Middleware(lim, sel, &ratelimit.HeaderExtractor{}, ratelimit.MiddlewareOptions{Log: log})

	mux := http.NewServeMux()
	mux.Handle("/hello", limit(http.HandlerFunc(hello)))
	ops := h.Handler()
	for _, p := range []string{"GET /readyz", "GET /livez", "GET /metrics"} {
		mux.Handle(p, ops)
	}

	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	log.Info("listening", "addr", ln.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutCtx)
}

// hello only runs for allowed requests; the middleware has already set the
// RateLimit-* headers.
func hello(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintln(w, "hello")
}

// builtinConfig is caphost.yaml built in code, for a service that keeps its
// configuration in Go. It is a Go value marshalled to JSON, which is YAML,
// so config.Load decodes, resolves and validates it exactly as it does the
// file. Secrets stay references (here to environment variables).
// fstest.MapFS is the standard library's in-memory fs.FS (it does not pull
// in package testing).
func builtinConfig(ctx context.Context, redisAddr string, opts ...config.Option) (*config.Config, error) {
	type m = map[string]any
	doc := m{
		"redis": m{
			"deployments": m{"main": m{
				"standalone":  m{"endpoint": redisAddr},
				"client-name": "hello",
				"auth": m{
					"default": "secret://hello-app@env/HELLO_APP_PASS",
					"admin":   "secret://hello-admin@env/HELLO_ADMIN_PASS",
				},
				"timeouts": m{"connect": "1s", "command": "250ms", "acquire": "100ms", "shutdown": "5s"},
			}},
			"roles":    m{"coordination": m{"deployment": "main", "required": true, "expected-eviction": "noeviction"}},
			"programs": m{"mode": "evalsha-managed"},
			"keys": m{"app": "hello", "env": "dev", "hmac": m{
				"write-version": 1,
				"versions":      m{"1": "secret://env/HELLO_KEY_V1"},
			}},
		},
		"capabilities": m{"rate-limit": m{
			"provider":   "redis",
			"redis-role": "coordination",
			"policies": m{"hello": m{
				"revision": "r1", "algorithm": "token-bucket",
				"capacity": 5, "refill-tokens": 5, "refill-period": "1m",
				"subject": []string{"client-ip"},
			}},
			"routes": []m{{"route": "/hello", "policies": []m{{"policy": "hello"}}}},
		}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	const name = "builtin.json"
	return config.Load(ctx, name, append(opts, config.WithFS(fstest.MapFS{name: {Data: b}}))...)
}

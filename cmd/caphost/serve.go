package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/host/ratelimit/envoyrls"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/policy"
)

// HTTP server bounds of `caphost serve`. Reads and writes are generous
// enough for a 64 MiB guest upload on a slow link, but finite.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 2 * time.Minute
	writeTimeout      = 2 * time.Minute
	idleTimeout       = 90 * time.Second
	maxHeaderBytes    = 64 << 10
	defaultDrain      = 15 * time.Second
)

// errDrainTimeout means in-flight requests were still running when the
// drain timeout expired and their connections were closed.
var errDrainTimeout = errors.New("drain timeout expired with requests in flight")

func newServeCmd(loadOpts []config.Option) *cobra.Command {
	var (
		file  string
		drain time.Duration
	)
	cmd := &cobra.Command{
		Use:   "serve --config FILE [--drain-timeout D]",
		Short: "Run the caphost daemon (sidecar HTTP API, admin, health, metrics)",
		Long: "serve loads the configuration, assembles the host and serves on server.listen:\n" +
			"  POST /v1/ratelimit/evaluate   the rate-limit capability (JSON)\n" +
			"  POST /v1/concurrency/{acquire,renew,release}   concurrency permits (JSON)\n" +
			"  GET|PUT|DELETE /v1/cache/{region}/{key}, DELETE /v1/cache/{region}   the cache capability\n" +
			"  POST /v1/lease/{acquire,inspect,renew,release}   efficiency leases (JSON)\n" +
			"  POST /v1/idempotency/{claim,inspect,start,renew,complete,fail,release}   idempotent execution (JSON)\n" +
			"  POST /v1/fenced-lease/{acquire,inspect,renew,release}   fenced leases, tokens (resource-epoch, counter) (JSON)\n" +
			"  GET  /admin/guests            guest slots (needs server.admin-token)\n" +
			"  PUT  /admin/guests/{name}     hot-swap a guest module (needs server.admin-token)\n" +
			"  POST /admin/guests/{name}/rollback, GET /admin/capabilities   (need server.admin-token)\n" +
			"  GET  /livez /readyz /metrics  operations\n" +
			"With server.envoy-rate-limit it also serves Envoy's rate-limit gRPC API\n" +
			"(envoy.service.ratelimit.v3.RateLimitService) on its own listener; SIGHUP re-reads\n" +
			"its descriptor files (a bad file is logged and the previous rules keep serving).\n" +
			"Without descriptor files SIGHUP only logs that nothing needed reloading.\n" +
			"Logs are JSON on stderr. SIGINT or SIGTERM stops accepting, drains in-flight requests\n" +
			"for at most --drain-timeout, then drains and closes Redis. Exit 0 after a clean shutdown.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError{errors.New("--config is required")}
			}
			if drain <= 0 {
				return usageError{errors.New("--drain-timeout must be > 0")}
			}
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			if err := hardenProcess(); err != nil {
				return fmt.Errorf("mark the process non-dumpable: %w", err)
			}
			// The driver's own lines (dial failures, broken pools) would
			// otherwise be plain text on the process's stderr.
			host.RouteRedisDriverLogs(log)
			cfg, err := config.Load(cmd.Context(), file, loadOpts...)
			var verr *policy.ValidationError
			if errors.As(err, &verr) {
				for _, p := range verr.Problems {
					fmt.Fprintln(cmd.ErrOrStderr(), p.String())
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%d problem(s) in %s\n", len(verr.Problems), file)
				return errProblems
			}
			if err != nil {
				return err
			}
			opts := httpapi.Options{AdminToken: cfg.Server.AdminToken, Log: log}
			if err := opts.Validate(); err != nil {
				return fmt.Errorf("server.admin-token: %w", err)
			}
			return serve(cmd.Context(), cfg, opts, log, drain)
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "configuration file (YAML)")
	cmd.Flags().DurationVar(&drain, "drain-timeout", defaultDrain, "how long in-flight requests may finish after SIGTERM (and Redis may drain after that)")
	return cmd
}

// serve runs until ctx ends, then shuts down in order: stop accepting and
// drain in-flight HTTP requests, then close the host (which drains the
// runtime and closes Redis). Redis closes last so draining requests can
// still reach it.
func serve(ctx context.Context, cfg *config.Config, opts httpapi.Options, log *slog.Logger, drain time.Duration) error {
	h, err := host.New(ctx, cfg, host.WithLogger(log), host.WithStartupHandshake())
	if err != nil {
		return err
	}
	// Shutdown work must outlive the signal that triggered it.
	bg := context.WithoutCancel(ctx)
	closeHost := func() error {
		cctx, cancel := context.WithTimeout(bg, drain)
		defer cancel()
		return h.Close(cctx)
	}
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return errors.Join(fmt.Errorf("listen %s: %w", cfg.Server.Listen, err), closeHost())
	}
	rls, rlsSvc, rlsLn, err := startEnvoyRLS(h, cfg, log)
	if err != nil {
		return errors.Join(err, ln.Close(), closeHost())
	}
	srv := &http.Server{
		Handler:           httpapi.New(h, opts),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		// Request contexts deliberately do not derive from ctx: the signal
		// must not cancel the requests the drain lets finish.
	}
	// SIGHUP reloads what is reloadable, whatever is configured: its
	// default action would end the process. Registered before the
	// "serving" line, so a HUP sent after it never kills the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String(), "admin", !opts.AdminToken.IsZero(), "config", cfg.Source)
	var rlsServed chan error // nil (never ready) without the Envoy service
	if rls != nil {
		rlsServed = make(chan error, 1)
		go func() { rlsServed <- rls.Serve(rlsLn) }()
		log.Info("serving envoy rate-limit service", "addr", rlsLn.Addr().String())
	}

	var errs []error
	for {
		select {
		case <-hup:
			reload(cfg, rlsSvc, log)
			continue
		case err := <-served:
			// The listener failed on its own; nothing is draining.
			sctx, cancel := context.WithTimeout(bg, drain)
			defer cancel()
			return errors.Join(fmt.Errorf("serve: %w", err), stopEnvoyRLS(sctx, rls, rlsServed), closeHost())
		case err := <-rlsServed:
			// Serve returns only on a listener failure before any Shutdown.
			err = errors.Join(errors.New("envoy rate-limit service stopped"), err)
			log.Error("envoy rate-limit service failed", "error", err.Error())
			errs = append(errs, err)
			rls, rlsServed = nil, nil
		case err := <-h.StartupFailed(): // redis.startup.on-failure ends startup
			log.Error("redis startup handshake failed", "error", err.Error())
			errs = append(errs, err)
		case <-ctx.Done():
		}
		break
	}
	log.Info("shutting down", "drain_timeout", drain.String())
	sctx, cancel := context.WithTimeout(bg, drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("drain timeout expired; closing remaining connections")
		errs = append(errs, errDrainTimeout)
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("serve: %w", err))
	}
	if err := stopEnvoyRLS(sctx, rls, rlsServed); err != nil {
		errs = append(errs, err)
	}
	if err := closeHost(); err != nil {
		errs = append(errs, fmt.Errorf("close: %w", err))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	log.Info("stopped cleanly")
	return nil
}

// reload answers a SIGHUP: it re-reads the Envoy rate-limit service's
// descriptor files when it has some, and otherwise says that nothing
// needed reloading (the rest of the configuration is read at start only;
// guests are swapped through the admin API).
func reload(cfg *config.Config, rlsSvc *envoyrls.Service, log *slog.Logger) {
	if rlsSvc == nil || len(cfg.Server.EnvoyRateLimit.ConfigFiles) == 0 {
		log.Info("SIGHUP: nothing to reload (no server.envoy-rate-limit.config-files); still serving")
		return
	}
	// ReloadFiles logs and counts the outcome; a refused file leaves the
	// previous rules serving, so serve goes on either way.
	_ = rlsSvc.ReloadFiles(cfg.Server.EnvoyRateLimit.ConfigFiles)
}

// startEnvoyRLS builds the Envoy rate-limit service and binds its listener
// when server.envoy-rate-limit is configured (all nil otherwise).
func startEnvoyRLS(h *host.Host, cfg *config.Config, log *slog.Logger) (*envoyrls.Server, *envoyrls.Service, net.Listener, error) {
	e := cfg.Server.EnvoyRateLimit
	if e == nil {
		return nil, nil, nil, nil
	}
	rt, err := h.Runtime()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("server.envoy-rate-limit: %w", err)
	}
	var sel *envoyrls.SelectorMapping
	if len(e.SelectorDomains) > 0 {
		// The rate-limit capability's limiter and selector (its rate-policy
		// guest when configured) answer these domains.
		lim, s, err := h.RateLimit()
		if err != nil {
			return nil, nil, nil, fmt.Errorf("server.envoy-rate-limit.selector-domains: %w", err)
		}
		sel = &envoyrls.SelectorMapping{Limiter: lim, Selector: s, Domains: e.SelectorDomains}
	}
	svc, err := envoyrls.New(rt, e.Descriptors, envoyrls.Options{
		Selector:       sel,
		Policies:       rlsconfig.PolicyOptions{Algorithm: e.Algorithm, FailureMode: e.FailureMode},
		LocalEmergency: e.LocalEmergency,
		RedisRole:      e.RedisRole, AttemptTimeout: e.AttemptTimeout, ResponseHeaders: e.ResponseHeaders, ShadowMode: e.ShadowMode,
		HeaderNames: envoyrls.HeaderNames{Limit: e.HeaderLimit, Remaining: e.HeaderRemaining, Reset: e.HeaderReset},
		Log:         log, Registerer: h.Registry(),
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("server.envoy-rate-limit: %w", err)
	}
	ln, err := net.Listen("tcp", e.Listen)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listen %s: %w", e.Listen, err)
	}
	return envoyrls.NewServer(svc), svc, ln, nil
}

// stopEnvoyRLS drains the Envoy rate-limit service within ctx and waits
// for its Serve to return (no-op when it is not running).
func stopEnvoyRLS(ctx context.Context, s *envoyrls.Server, served <-chan error) error {
	if s == nil {
		return nil
	}
	var errs []error
	if err := s.Shutdown(ctx); err != nil {
		errs = append(errs, errDrainTimeout)
	}
	if err := <-served; err != nil {
		errs = append(errs, fmt.Errorf("envoy rate-limit service: %w", err))
	}
	return errors.Join(errs...)
}

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/config"
)

// probeTimeout bounds the whole probe: an operator command must not hang on
// an unreachable deployment.
const probeTimeout = 30 * time.Second

// quietLogger keeps library logs off the operator's terminal; the CLI
// prints its own bounded report.
func quietLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// withHost assembles a host for a CLI action and always closes it.
func withHost(ctx context.Context, cfg *config.Config, errOut io.Writer, fn func(ctx context.Context, h *host.Host) error) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	h, err := host.New(ctx, cfg, host.WithLogger(quietLogger(errOut)))
	if err != nil {
		return err
	}
	defer func() { _ = h.Close(context.Background()) }()
	return fn(ctx, h)
}

// probe runs the Redis startup probe for `caphost check --probe` and prints
// one line per check.
func probe(ctx context.Context, cfg *config.Config, out io.Writer) error {
	if len(cfg.Redis.Roles) == 0 {
		fmt.Fprintln(out, "probe: no Redis role is selected (use --role or --all-roles)")
		return errProblems
	}
	return withHost(ctx, cfg, out, func(ctx context.Context, h *host.Host) error {
		rep, err := h.Probe(ctx)
		for _, d := range rep.Deployments {
			fmt.Fprintf(out, "probe %s (%s; roles %v):\n", d.Deployment, d.Topology, d.Roles)
			for _, c := range d.Checks {
				if c.Class != "" { // failed: say whether to fix or to wait
					c.Detail = string(c.Class) + ": " + c.Detail
				}
				fmt.Fprintf(out, "  %-7s %-17s %s\n", c.Status, c.Name, c.Detail)
			}
		}
		if err != nil {
			fmt.Fprintln(out, "probe: FAILED")
			return errProblems
		}
		fmt.Fprintln(out, "probe: ok")
		return nil
	})
}

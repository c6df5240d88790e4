package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/policy"
)

func newCapabilitiesCmd(loadOpts []config.Option) *cobra.Command {
	var (
		file   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "capabilities --config FILE [--json]",
		Short: "Show every capability's actual state, readiness, guarantees and guests",
		Long: "capabilities assembles the host the configuration describes — exactly as `caphost serve`\n" +
			"does, without serving — and prints each capability this host implements: disabled, or\n" +
			"its descriptor (provider, backing role, readiness claimed and effective, guarantees and\n" +
			"explicit non-guarantees, failure mode), the guests plugged into it and whether its backing\n" +
			"role is serving right now; then every guest kind with its card's readiness.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if file == "" {
				return usageError{errors.New("--config is required")}
			}
			cfg, err := loadConfig(cmd.Context(), file, loadOpts, cmd.OutOrStdout())
			if err != nil {
				return err
			}
			return withHost(cmd.Context(), cfg, cmd.ErrOrStderr(), func(ctx context.Context, h *host.Host) error {
				caps, kinds := h.Capabilities(ctx), h.GuestKinds()
				if asJSON {
					enc := json.NewEncoder(cmd.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(struct {
						Capabilities []capability.Status `json:"capabilities"`
						GuestKinds   []host.GuestKind    `json:"guest-kinds"`
					}{caps, kinds})
				}
				printCapabilities(cmd.OutOrStdout(), caps, kinds)
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "configuration file (YAML)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (the shape of GET /admin/capabilities)")
	return cmd
}

// loadConfig loads the file and prints every problem to out (exit 1).
func loadConfig(ctx context.Context, file string, opts []config.Option, out io.Writer) (*config.Config, error) {
	cfg, err := config.Load(ctx, file, opts...)
	var verr *policy.ValidationError
	if errors.As(err, &verr) {
		for _, p := range verr.Problems {
			fmt.Fprintln(out, p.String())
		}
		fmt.Fprintf(out, "%d problem(s) in %s\n", len(verr.Problems), file)
		return nil, errProblems
	}
	return cfg, err
}

func printCapabilities(w io.Writer, caps []capability.Status, kinds []host.GuestKind) {
	fmt.Fprintln(w, "capabilities:")
	for _, s := range caps {
		if s.Descriptor == nil {
			fmt.Fprintf(w, "  %-12s %-9s (implementation claims %s)\n", s.Capability, s.State, s.Claimed)
			continue
		}
		d := s.Descriptor
		state := string(s.State)
		if s.Reason != "" {
			state += " (" + s.Reason + ")"
		}
		fmt.Fprintf(w, "  %-12s %-9s readiness %s (claimed %s)  provider %s  role %s (%s)  %s\n",
			s.Capability, state, s.Readiness, s.Claimed, d.Provider, d.Role, d.Impact, d.Implementation)
		for _, dg := range s.Downgrades {
			fmt.Fprintf(w, "      capped at %s: %s\n", dg.Cap, dg.Reason)
		}
		fmt.Fprintf(w, "      guarantees:     %s\n", joinStrings(d.Guarantees))
		fmt.Fprintf(w, "      non-guarantees: %s\n", joinStrings(d.NonGuarantees))
		fmt.Fprintf(w, "      failure mode:   %s (overrides: %s)  multi-instance: %t\n", d.FailureMode, joinStrings(d.FailureOverrides), d.MultiInstance)
		if len(s.Guests) > 0 {
			fmt.Fprintf(w, "      guests:         %s\n", strings.Join(s.Guests, ", "))
		}
	}
	fmt.Fprintln(w, "guest kinds:")
	for _, k := range kinds {
		by := "nothing consumes it in this host"
		if len(k.ConsumedBy) > 0 {
			by = "consumed by " + strings.Join(k.ConsumedBy, ", ")
		}
		fmt.Fprintf(w, "  %-12s %s  %s\n", k.Kind, k.Readiness, by)
	}
}

func joinStrings[T ~string](xs []T) string {
	if len(xs) == 0 {
		return "none"
	}
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

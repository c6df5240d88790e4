package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/policy"
)

func newProgramsCmd(loadOpts []config.Option) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "programs",
		Short: "List, verify and deploy the Lua / Redis Function program catalog",
	}
	cmd.AddCommand(newProgramsListCmd(), newProgramsVerifyCmd(loadOpts), newProgramsDeployCmd(loadOpts))
	return cmd
}

func newProgramsListCmd() *cobra.Command {
	var verbose bool
	cmd := &cobra.Command{
		Use:   "list [--config FILE] [-v]",
		Short: "List the embedded programs: ids, digests, statuses (needs no Redis)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pc, err := host.Programs()
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "program set %s v%d — %d programs; Functions library %s (digest %s)\n",
				pc.Set, pc.Version, len(pc.Programs), pc.Library, short(pc.LibraryDigest))
			for _, p := range pc.Programs {
				fmt.Fprintf(out, "  %-36s sha1 %s  keys %-24s statuses %s\n",
					p.ID, short(p.SHA1), strings.Join(p.Keys, ","), strings.Join(p.Statuses, "|"))
				if verbose {
					fmt.Fprintf(out, "      function %s  sha256 %s  clock %s  retry %s\n      args %s\n      acl %s\n",
						p.Function, p.SHA256, p.Clock, p.RetrySafety, strings.Join(p.Args, ", "), strings.Join(p.ACL, " "))
				}
			}
			return nil
		},
	}
	cmd.Flags().String("config", "", "accepted for symmetry; the catalog is embedded in the binary")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print functions, full digests, arguments and ACL commands")
	return cmd
}

// loadForRedis loads the configuration selecting every declared role: an
// operator action on programs concerns every deployment in the file.
func loadForRedis(cmd *cobra.Command, file string, loadOpts []config.Option) (*config.Config, error) {
	if file == "" {
		return nil, usageError{errors.New("--config is required")}
	}
	opts := append(append([]config.Option(nil), loadOpts...), config.WithAllRoles())
	cfg, err := config.Load(cmd.Context(), file, opts...)
	var verr *policy.ValidationError
	if errors.As(err, &verr) {
		for _, p := range verr.Problems {
			fmt.Fprintln(cmd.OutOrStdout(), p.String())
		}
		return nil, errProblems
	}
	return cfg, err
}

func newProgramsVerifyCmd(loadOpts []config.Option) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "verify --config FILE",
		Short: "Check every primary holds the exact program set for the configured mode",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadForRedis(cmd, file, loadOpts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			return withHost(cmd.Context(), cfg, cmd.ErrOrStderr(), func(ctx context.Context, h *host.Host) error {
				sts, err := h.VerifyPrograms(ctx)
				if err != nil {
					return err
				}
				failed := false
				for _, s := range sts {
					state := "ok"
					if !s.OK {
						state, failed = "NOT OK", true
					}
					fmt.Fprintf(out, "deployment %s (%s): %s\n", s.Deployment, s.Mode, state)
					for _, n := range s.Nodes {
						switch {
						case n.OK:
							fmt.Fprintf(out, "  %s: complete\n", n.Addr)
						case len(n.Missing) > 0:
							fmt.Fprintf(out, "  %s: %d missing: %s\n", n.Addr, len(n.Missing), strings.Join(n.Missing, ", "))
						default:
							fmt.Fprintf(out, "  %s: %s\n", n.Addr, n.Detail)
						}
					}
					if s.Err != nil && len(s.Nodes) == 0 {
						fmt.Fprintf(out, "  cannot verify: %v\n", s.Err)
					}
				}
				if failed {
					fmt.Fprintln(out, "run `caphost programs deploy --config FILE` to provision them")
					return errProblems
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "configuration file (YAML)")
	return cmd
}

func newProgramsDeployCmd(loadOpts []config.Option) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "deploy --config FILE",
		Short: "Provision the catalog: FUNCTION LOAD (functions-provisioned) or SCRIPT LOAD (evalsha-managed)",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := loadForRedis(cmd, file, loadOpts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			return withHost(cmd.Context(), cfg, cmd.ErrOrStderr(), func(ctx context.Context, h *host.Host) error {
				if err := h.DeployPrograms(ctx); err != nil {
					return err
				}
				pc, err := host.Programs()
				if err != nil {
					return err
				}
				switch h.ProgramMode() {
				case "functions-provisioned":
					fmt.Fprintf(out, "deployed library %s (%s v%d, digest %s) on every primary\n", pc.Library, pc.Set, pc.Version, short(pc.LibraryDigest))
				default:
					fmt.Fprintf(out, "loaded %d scripts on every primary\n", len(pc.Programs))
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&file, "config", "c", "", "configuration file (YAML)")
	return cmd
}

func short(hex string) string {
	if len(hex) > 12 {
		return hex[:12]
	}
	return hex
}

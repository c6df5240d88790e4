package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/lease/fenced"
)

func newFenceCmd(loadOpts []config.Option) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fence",
		Short: "Operator steps of fenced leases",
	}
	cmd.AddCommand(newFenceProvisionCmd(loadOpts))
	return cmd
}

// newFenceProvisionCmd is step 2 of provisioning for services that do not
// embed the Go client (whose Client.Activate runs it): create a resource's
// Redis fence counter from the registration row the protected store holds.
func newFenceProvisionCmd(loadOpts []config.Option) *cobra.Command {
	var (
		file, purpose, resource, digest string
		epoch                           uint64
		watermark                       int64
	)
	cmd := &cobra.Command{
		Use:   "provision --config FILE --purpose P --resource ID --epoch N --digest HEX [--high-watermark N]",
		Short: "Create a resource's fence counter from its durable registration (never lowers or replaces one)",
		Long: `Create the Redis fence counter of one resource at the registration's high watermark, as the
protected store records it (resource id, resource epoch, registration digest, and the largest
counter it has admitted in that epoch). Repeating it is safe: an existing counter of the same
registration at or above the watermark answers ALREADY_SAME. It never lowers or replaces a counter:
REGISTRATION_CONFLICT (another registration's counter) and REGRESSION (the counter is below the
watermark: Redis lost increments) exit 1 and change nothing. With
capabilities.fenced-lease.replication set, the counter must also be acknowledged by that many
replicas: NOT_REPLICATED exits 1 (the counter is on the primary only; repeat once the replicas are
back). Mark the registration ACTIVE in the protected store only after PROVISIONED or ALREADY_SAME.`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := fence.ParseDigest(digest)
			switch {
			case purpose == "" || resource == "":
				return usageError{errors.New("--purpose and --resource are required")}
			case epoch == 0 || epoch > fence.MaxEpoch:
				return usageError{fmt.Errorf("--epoch must be within 1..%d", fence.MaxEpoch)}
			case err != nil:
				return usageError{fmt.Errorf("--digest: %w", err)}
			case watermark < 0:
				return usageError{errors.New("--high-watermark must not be negative")}
			}
			cfg, err := loadForRedis(cmd, file, loadOpts)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			return withHost(cmd.Context(), cfg, cmd.ErrOrStderr(), func(ctx context.Context, h *host.Host) error {
				c, err := h.FencedLease()
				if err != nil {
					return err
				}
				if !c.AcceptsPurpose(purpose) {
					return usageError{fmt.Errorf("--purpose %q is not on capabilities.fenced-lease.purposes", purpose)}
				}
				kind, tok, err := c.Provision(ctx, purpose, fence.Registration{Resource: resource, Epoch: epoch,
					Digest: d, State: fence.Pending, HighWatermark: watermark})
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "%s: counter at epoch %d, %d\n", kind, tok.Epoch, tok.Counter)
				switch kind {
				case fenced.ProvisionConflict:
					fmt.Fprintln(out, "the counter belongs to another registration of this resource: nothing changed")
					return errProblems
				case fenced.ProvisionRegression:
					fmt.Fprintln(out, "the counter is below the high watermark (Redis lost increments): nothing changed;"+
						" retire the registration and provision a new epoch")
					return errProblems
				case fenced.ProvisionNotReplicated:
					fmt.Fprintln(out, "the counter is on the primary but fewer replicas than capabilities.fenced-lease.replication.acks"+
						" acknowledged it: keep the registration PENDING and run provision again once the replicas are back")
					return errProblems
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVarP(&file, "config", "c", "", "configuration file (YAML) with a capabilities.fenced-lease block")
	f.StringVar(&purpose, "purpose", "", "the lease purpose (a slug on capabilities.fenced-lease.purposes)")
	f.StringVar(&resource, "resource", "", "the resource id, as in the protected store")
	f.Uint64Var(&epoch, "epoch", 0, "the registration's resource epoch")
	f.StringVar(&digest, "digest", "", "the registration digest: 64 lower-case hex digits")
	f.Int64Var(&watermark, "high-watermark", 0, "the largest counter the protected store admitted in this epoch")
	return cmd
}

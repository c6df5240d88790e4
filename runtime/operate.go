package runtime

import (
	"context"
	"fmt"

	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/programs"
)

// ProgramsStatus is the program-catalog state of one deployment.
type ProgramsStatus struct {
	Deployment string
	Report     programs.Report
	// Err is nil when every primary holds the exact set for the mode.
	Err error
}

// VerifyPrograms checks the program catalog on every primary of every
// selected deployment, in the configured mode (see programs.Verify).
func (r *Runtime) VerifyPrograms(ctx context.Context) []ProgramsStatus {
	out := make([]ProgramsStatus, 0, len(r.deps))
	for _, d := range r.deps {
		rep, err := programs.Verify(ctx, r.progs, r.mode, d.client(policy.LaneAdmin), d.client(policy.LaneScript))
		out = append(out, ProgramsStatus{Deployment: d.id, Report: rep, Err: err})
	}
	return out
}

// DeployPrograms provisions the catalog on every primary of every selected
// deployment. functions-provisioned: FUNCTION LOAD REPLACE of the versioned
// library on the admin lane. evalsha-managed: SCRIPT LOAD of every embedded
// source on the script lane (otherwise loaded lazily on NOSCRIPT). It is an
// operator action, never part of a request path.
func (r *Runtime) DeployPrograms(ctx context.Context) error {
	for _, d := range r.deps {
		var err error
		switch r.mode {
		case policy.ProgramsFunctionsProvisioned:
			err = programs.Deploy(ctx, r.progs, d.client(policy.LaneAdmin))
		case policy.ProgramsEvalshaManaged:
			err = programs.LoadScripts(ctx, r.progs, d.client(policy.LaneScript))
		default:
			err = fmt.Errorf("%w: %q", programs.ErrMode, r.mode)
		}
		if err != nil {
			return fmt.Errorf("deployment %s: %w", d.id, err)
		}
	}
	return nil
}

// ProgramMode returns the configured program mode.
func (r *Runtime) ProgramMode() policy.ProgramMode { return r.mode }

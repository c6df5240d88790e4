package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/caphost/caphost/host/config"

	"github.com/spf13/cobra"
)

// Exit codes of the CLI.
const (
	exitOK      = 0
	exitInvalid = 1 // configuration problems (or any failed check)
	exitUsage   = 2 // bad flags or arguments
)

// errProblems marks a failure whose details were already printed, so run
// does not print it a second time.
var errProblems = errors.New("problems reported")

// usageError marks a command-line mistake (exit 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// run executes the CLI with args and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runWith(ctx, args, stdout, stderr)
}

// runWith is run with extra configuration options applied to every load
// (tests inject the environment with config.WithEnv).
func runWith(ctx context.Context, args []string, stdout, stderr io.Writer, loadOpts ...config.Option) int {
	root := newRootCmd(stdout, stderr, loadOpts)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errProblems):
		return exitInvalid
	}
	fmt.Fprintf(stderr, "caphost: %v\n", err)
	var u usageError
	if errors.As(err, &u) {
		return exitUsage
	}
	return exitInvalid
}

func newRootCmd(stdout, stderr io.Writer, loadOpts []config.Option) *cobra.Command {
	root := &cobra.Command{
		Use:           "caphost",
		Short:         "WebAssembly-pluggable capability host for Go services",
		SilenceUsage:  true,
		SilenceErrors: true, // run prints errors once, in one format
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newVersionCmd(), newCheckCmd(loadOpts), newCapabilitiesCmd(loadOpts), newProgramsCmd(loadOpts), newGuestCmd(), newFenceCmd(loadOpts), newServeCmd(loadOpts))
	return root
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the caphost version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "caphost %s\n", version())
			return nil
		},
	}
}

// version reports the module version stamped by the Go toolchain
// ("(devel)" for a working-tree build).
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usageError{err}
	}
	return nil
}

// Command caphost is the caphost operator CLI and daemon entry point.
//
// This package owns the command tree (cobra) and its output formats; the
// work is done by the host packages. main stays tiny so that run can be
// tested in-process.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

package main

import (
	"context"
	"errors"
	"io"

	"github.com/caphost/caphost/host/config"
)

// probe checks the selected Redis deployments for `caphost check --probe`.
// PLACEHOLDER until the lead adds probe.go with the real startup probe; this
// file must then be deleted (the two definitions would clash).
func probe(_ context.Context, _ *config.Config, _ io.Writer) error {
	return errors.New("--probe: Redis probe not wired yet")
}

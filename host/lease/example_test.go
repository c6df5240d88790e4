package lease_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// exampleRuntime is a Redis runtime whose coordination role is addr.
func exampleRuntime(ctx context.Context, addr string) (*runtime.Runtime, error) {
	return runtime.New(ctx, redistest.ExampleConfig(addr, policy.RoleCoordination), runtime.WithLogger(slog.New(slog.DiscardHandler)))
}

// Hold runs a job while the lease is held: one replica of many does the
// nightly clean-up; the others find the lease contended and skip it.
func ExampleClient_Hold() {
	addr, stop := redistest.ForExample()
	defer stop()
	ctx := context.Background()
	rt, err := exampleRuntime(ctx, addr)
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)
	leases, err := lease.New(rt, lease.Config{}, lease.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	defer leases.Close(ctx)

	// Mint the attempt before the first send and keep it: a retry after a
	// lost reply must repeat the same attempt.
	mine, _ := lease.NewAttempt("cleanup-2026-12-05")
	req := lease.Request{Purpose: "nightly-cleanup", Resource: []byte("orders"), TTL: 30 * time.Second, Attempt: mine}
	got, err := leases.Hold(ctx, req, func(ctx context.Context, h *lease.Handle) error {
		// Another replica tries meanwhile.
		theirs, _ := lease.NewAttempt("cleanup-2026-12-05")
		other, _ := leases.Acquire(ctx, lease.Request{Purpose: "nightly-cleanup", Resource: []byte("orders"),
			TTL: 30 * time.Second, Attempt: theirs})
		fmt.Println("other replica:", other.Kind)
		fmt.Println("usable for a 10 s step:", h.UsableFor(10*time.Second))
		return nil // the clean-up; stop as soon as ctx ends (the lease was lost)
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("this replica:", got.Kind, "then", got.Handle.State())
	// Output:
	// other replica: CONTENDED
	// usable for a 10 s step: true
	// this replica: ACQUIRED then RELEASED
}

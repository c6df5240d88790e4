package main

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/host/idempotency"
	"github.com/caphost/caphost/host/owner"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// idempotencyRows time one idempotent request end to end: caphost's
// Executor.Execute (claim, start, the action, complete: three round trips,
// owner-checked, with a separate processing lease and replay TTL) against
// the minimal record a hand-rolled implementation keeps — SET NX PX to
// claim, SET XX PX to store the response: two round trips and none of the
// owner, attempt, fingerprint or lost-reply handling. The left column is
// that floor, not a peer library: no Go library implements the protocol.
func idempotencyRows(ctx context.Context, rt *runtime.Runtime, plain *redis.Client, o runOpts,
	want func(string) bool, row func(string, []result), stats func([]contender, int)) error {
	labels := []string{"idempotent request, 1 gor.", "idempotent request, 32 gor.",
		"  idempotency A/A control, 1", "  idempotency A/A control, 32"}
	wanted := false
	for _, l := range labels {
		wanted = wanted || want(l)
	}
	if !wanted {
		return nil
	}
	exec, err := idempotency.New(rt, idempotency.Config{Role: policy.RoleCoordination}, idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	var seq atomic.Uint64
	response := []byte(`{"payment":"pay-1","status":"captured"}`)
	fp := idempotency.FingerprintOf("POST", "/v1/payments", "", []byte(`{"amount":500}`))
	ours := contender{"caphost Execute (claim+start+complete)", func(ctx context.Context) error {
		a, err := owner.NewAttempt("bench")
		if err != nil {
			return err
		}
		req := idempotency.Request{Scope: idempotency.Scope{Route: "bench", Principal: []byte("tenant"),
			Key: strconv.FormatUint(seq.Add(1), 36)}, Fingerprint: fp, Attempt: a}
		ex, err := exec.Execute(ctx, req, func(context.Context) idempotency.Result { return idempotency.Committed(response) })
		if err == nil && (ex.Kind != idempotency.Executed || !ex.Recorded) {
			err = fmt.Errorf("caphost idempotency: %v (recorded %v): the row would measure the wrong thing", ex.Kind, ex.Recorded)
		}
		return err
	}}
	floorOn := func(name string, c *redis.Client) contender {
		return contender{name, func(ctx context.Context) error {
			k := "bench:idem:" + strconv.FormatUint(seq.Add(1), 36)
			ok, err := c.SetNX(ctx, k, "claimed", 30*time.Second).Result()
			if err != nil || !ok {
				return fmt.Errorf("floor claim: %v %v", ok, err)
			}
			return c.SetXX(ctx, k, response, 24*time.Hour).Err()
		}}
	}
	floor := floorOn("SET NX PX + SET XX PX (floor)", plain)
	twin := redis.NewClient(plain.Options())
	defer twin.Close()
	floorTwin := floorOn("SET NX PX + SET XX PX (floor, twin)", twin)
	for _, g := range []int{1, 32} {
		label := fmt.Sprintf("idempotent request, %d gor.", g)
		if want(label) {
			cs := []contender{floor, ours}
			row(label, compare(ctx, cs, g, o.dur, o.slice, o.rounds))
			stats(cs, g)
		}
		if label := fmt.Sprintf("  idempotency A/A control, %d", g); o.control && want(label) {
			row(label, compare(ctx, []contender{floor, floorTwin}, g, o.dur, o.slice, o.rounds))
		}
	}
	fmt.Println(`idempotency rows: left = a hand-rolled floor (SET NX PX to claim, SET XX PX to store; two round trips,
  no owner, attempt, fingerprint, lease or lost-reply handling), right = caphost host/idempotency Execute: claim,
  start, the action (returns a 39-byte response), complete — three round trips per request, each an
  owner-checked program; every op is checked to be EXECUTED and recorded. Not a peer comparison.`)
	return nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/host/lease/fenced"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// leaseTTL is every lease row's TTL: long enough that no lease expires
// while it is held.
const leaseTTL = 10 * time.Second

// leaseRows compares one acquire + release of an uncontended lease (a new
// resource per op, as a job runner locking distinct jobs would) between
// caphost's efficiency lease and the two Go lock libraries users pick:
// github.com/bsm/redislock (SET NX PX, then a release script) and
// github.com/go-redsync/redsync/v4 on one Redis (the same, via its
// mutex). bsm/redislock's opt-in fencing tokens are not in v0.9.4, the
// newest version the module proxy serves, so there is no fenced peer row.
func leaseRows(ctx context.Context, rt *runtime.Runtime, plain *redis.Client, o runOpts,
	want func(string) bool, row func(string, []result), stats func([]contender, int)) error {
	labels := []string{"lease acq+rel vs redislock, 1 gor.", "lease acq+rel vs redislock, 32 gor.",
		"lease acq+rel vs redsync, 1 gor.", "lease acq+rel vs redsync, 32 gor.",
		"fenced lease acq+rel vs redislock, 1 gor.", "fenced lease acq+rel vs redislock, 32 gor.",
		"  lease A/A control, 1", "  lease A/A control, 32"}
	wanted := false
	for _, l := range labels {
		wanted = wanted || want(l)
	}
	if !wanted {
		return nil
	}
	leases, err := lease.New(rt, lease.Config{Role: policy.RoleCoordination}, lease.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	defer leases.Close(ctx)
	var seq atomic.Uint64
	next := func(prefix string) string { return prefix + strconv.FormatUint(seq.Add(1), 36) }

	ours := contender{"caphost lease Acquire+Release", func(ctx context.Context) error {
		a, err := lease.NewAttempt("bench")
		if err != nil {
			return err
		}
		got, err := leases.Acquire(ctx, lease.Request{Purpose: "bench", Resource: []byte(next("r")), TTL: leaseTTL, Attempt: a})
		if err != nil {
			return err
		}
		if got.Kind != lease.Acquired {
			return fmt.Errorf("caphost lease: %v, not acquired: the row would measure the wrong thing", got.Kind)
		}
		kind, err := got.Handle.Release(ctx)
		if err == nil && kind != lease.ReleaseDone {
			err = fmt.Errorf("caphost lease release: %v", kind)
		}
		return err
	}}
	lockOp := func(name string, c *redis.Client) contender {
		locker := redislock.New(c)
		return contender{name, func(ctx context.Context) error {
			l, err := locker.Obtain(ctx, next("bench:redislock:"), leaseTTL, nil)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}}
	}
	rs := redsync.New(goredis.NewPool(plain))
	syncOp := contender{"redsync Lock+Unlock", func(ctx context.Context) error {
		m := rs.NewMutex(next("bench:redsync:"), redsync.WithExpiry(leaseTTL), redsync.WithTries(1))
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		ok, err := m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock found no lock")
		}
		return err
	}}
	fencedOp, err := fencedContender(ctx, rt)
	if err != nil {
		return err
	}
	twin := redis.NewClient(plain.Options())
	defer twin.Close()
	groups := []struct {
		label string
		cs    []contender
		ctl   bool
	}{
		{"lease acq+rel vs redislock", []contender{lockOp("bsm/redislock Obtain+Release", plain), ours}, false},
		{"lease acq+rel vs redsync", []contender{syncOp, ours}, false},
		{"fenced lease acq+rel vs redislock", []contender{lockOp("bsm/redislock Obtain+Release", plain), fencedOp}, false},
		{"  lease A/A control", []contender{lockOp("bsm/redislock Obtain+Release", plain),
			lockOp("bsm/redislock Obtain+Release (twin)", twin)}, true},
	}
	for _, gr := range groups {
		if gr.ctl && !o.control {
			continue
		}
		for _, g := range []int{1, 32} {
			label := fmt.Sprintf("%s, %d gor.", gr.label, g)
			if gr.ctl {
				label = fmt.Sprintf("%s, %d", gr.label, g)
			}
			if !want(label) {
				continue
			}
			row(label, compare(ctx, gr.cs, g, o.dur, o.slice, o.rounds))
			if !gr.ctl {
				stats(gr.cs, g)
			}
		}
	}
	fmt.Println(`lease rows: left column = the peer, right = caphost host/lease (target ≥ 1.0×). One op = acquire a
  new resource's lease (TTL 10 s) and release it; every caphost op is checked to be ACQUIRED then RELEASED.
  caphost: lease-acquire-v3 + lease-release-v3 (owner token + operation id, replay-safe, PTTL reported);
  bsm/redislock v0.9.4: SET NX PX + a release script; redsync v4: SET NX PX + an unlock script, one pool.
  fenced rows: caphost host/lease/fenced (fenced-lease-acquire-v1 + -release-v1: the resource's counter
  incremented, a (epoch, counter) token issued, the registration digest checked) on 64 provisioned
  resources taken in turn, against redislock's unfenced lock: no Go library issues fencing tokens in
  a version the module proxy serves, so the ratio is the price of the token, not a peer comparison.`)
	return nil
}

// fencedContender acquires and releases a fenced lease on one of 64
// provisioned resources, each used by one goroutine at a time, so every
// acquire is uncontended and issues the next token of its resource.
func fencedContender(ctx context.Context, rt *runtime.Runtime) (contender, error) {
	leases, err := fenced.New(rt, fenced.Config{Role: policy.RoleCoordination}, fenced.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return contender{}, err
	}
	free := make(chan fence.Registration, 64)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range cap(free) {
		reg := fence.Registration{Resource: fmt.Sprintf("bench-%s-%d", run, i), Epoch: 1, Digest: fence.NewDigest()}
		if _, _, err := leases.Provision(ctx, "bench", reg); err != nil {
			return contender{}, err
		}
		free <- reg
	}
	return contender{"caphost fenced lease Acquire+Release", func(ctx context.Context) error {
		reg := <-free
		defer func() { free <- reg }()
		a, err := lease.NewAttempt("bench")
		if err != nil {
			return err
		}
		got, err := leases.Acquire(ctx, fenced.Request{Purpose: "bench", Registration: reg, TTL: leaseTTL, Attempt: a})
		if err != nil {
			return err
		}
		if got.Kind != fenced.Acquired {
			return fmt.Errorf("caphost fenced lease: %v, not acquired: the row would measure the wrong thing", got.Kind)
		}
		kind, err := got.Handle.Release(ctx)
		if err == nil && kind != lease.ReleaseDone {
			err = fmt.Errorf("caphost fenced lease release: %v", kind)
		}
		return err
	}}, nil
}

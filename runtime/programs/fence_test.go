package programs

import (
	"context"
	"fmt"

	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// fixtureRegistration decodes the expected epoch and registration digest
// (ARGV[1], ARGV[2] of every fenced program).
func fixtureRegistration(a []any) (FenceRegistration, error) {
	epoch, err1 := fixtureInt(a[0])
	digest, err2 := fixtureBytes(a[1])
	return FenceRegistration{Epoch: epoch, Digest: string(digest)}, firstErr(err1, err2)
}

func fencedValues(st FencedLeaseState) []any {
	return []any{st.Token.Epoch, st.Token.Counter, ms(st.PTTL), st.Fence.Epoch, st.Fence.Counter}
}

// fenceFacades adapts the fenced facades to the vector runner; the fixture
// arguments are each program's ARGV, in order.
func fenceFacades() map[string]facadeCall {
	argc := func(a []any, n int) error {
		if len(a) != n {
			return fmt.Errorf("want %d args, have %d", n, len(a))
		}
		return nil
	}
	hold := func(a []any) (FencedLeaseHold, error) {
		reg, err1 := fixtureRegistration(a)
		owner, err2 := fixtureBytes(a[2])
		counter, err3 := fixtureInt(a[3])
		return FencedLeaseHold{Registration: reg, Owner: owner, Counter: counter}, firstErr(err1, err2, err3)
	}
	return map[string]facadeCall{
		"fenced-counter-provision-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 3); err != nil {
				return "", 0, nil, err
			}
			reg, err1 := fixtureRegistration(a)
			mark, err2 := fixtureInt(a[2])
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.FenceCounterProvision(ctx, ks[0], reg, mark)
			return r.Status.String(), r.Outcome(), []any{r.Fence.Epoch, r.Fence.Counter, r.Digest}, err
		},
		"fenced-lease-acquire-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 6); err != nil {
				return "", 0, nil, err
			}
			reg, err1 := fixtureRegistration(a)
			at, err2 := fixtureAttempt(a, 2, 4)
			ttl, err3 := fixtureMillis(a[3])
			limit, err4 := fixtureInt(a[5])
			if err := firstErr(err1, err2, err3, err4); err != nil {
				return "", 0, nil, err
			}
			r, err := e.FencedLeaseAcquire(ctx, ks[0], ks[1], FencedLeaseAcquireRequest{Registration: reg, Attempt: at, TTL: ttl, HardFailThreshold: limit})
			return r.Status.String(), r.Outcome(), fencedValues(r.FencedLeaseState), err
		},
		"fenced-lease-inspect-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 4); err != nil {
				return "", 0, nil, err
			}
			reg, err1 := fixtureRegistration(a)
			at, err2 := fixtureAttempt(a, 2, 3)
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.FencedLeaseInspect(ctx, ks[0], ks[1], reg, at)
			return r.Status.String(), r.Outcome(), fencedValues(r.FencedLeaseState), err
		},
		"fenced-lease-renew-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 5); err != nil {
				return "", 0, nil, err
			}
			h, err1 := hold(a)
			ttl, err2 := fixtureMillis(a[4])
			if err := firstErr(err1, err2); err != nil {
				return "", 0, nil, err
			}
			r, err := e.FencedLeaseRenew(ctx, ks[0], ks[1], h, ttl)
			return r.Status.String(), r.Outcome(), fencedValues(r.FencedLeaseState), err
		},
		"fenced-lease-release-v1": func(ctx context.Context, e *Executor, ks []keys.Key, a []any) (string, certainty.Outcome, []any, error) {
			if err := argc(a, 4); err != nil {
				return "", 0, nil, err
			}
			h, err := hold(a)
			if err != nil {
				return "", 0, nil, err
			}
			r, err := e.FencedLeaseRelease(ctx, ks[0], ks[1], h)
			return r.Status.String(), r.Outcome(), fencedValues(r.FencedLeaseState), err
		},
	}
}

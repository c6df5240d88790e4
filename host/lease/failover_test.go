package lease

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
)

// failoverTTL outlives any failover the harness drives (Sentinel:
// down-after 1 s plus the election; Cluster: node timeout 1 s plus the
// election), so a lease that ends does so because Redis forgot it, not
// because it expired.
const failoverTTL = 30 * time.Second

func sentinelClient(t *testing.T, sen *redistest.Sentinel) *Client {
	t.Helper()
	c, err := New(newRuntimeOn(t, &policy.Sentinel{MasterName: sen.MasterName(), Endpoints: sen.SentinelAddrs()}), Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func failoverCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func on(resource string, a Attempt, ttl time.Duration) Request {
	return Request{Purpose: "nightly-cleanup", Resource: []byte(resource), TTL: ttl, Attempt: a}
}

// awaitServed polls Inspect (read-only, so safe to repeat through the
// outage) until the client reaches a primary that answers want for
// attempt's view of resource.
func awaitServed(t *testing.T, ctx context.Context, c *Client, resource string, a Attempt, want AcquireKind) {
	t.Helper()
	var last Acquisition
	require.Eventually(t, func() bool {
		got, err := c.Inspect(ctx, "nightly-cleanup", []byte(resource), a, failoverTTL)
		last = got
		return err == nil && got.Kind == want
	}, 60*time.Second, 20*time.Millisecond, "the promoted primary to answer %s (last %s)", want, &last.Kind)
}

// holder runs Client.Hold in the background: fn reports its handle, then
// waits for its context to end and records the cause.
type holder struct {
	handle chan *Handle
	done   chan struct{}
	cause  error
	endAt  time.Time
}

func startHold(t *testing.T, ctx context.Context, c *Client, r Request) *holder {
	t.Helper()
	h := &holder{handle: make(chan *Handle, 1), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		_, _ = c.Hold(ctx, r, func(fctx context.Context, hd *Handle) error {
			h.handle <- hd
			<-fctx.Done()
			h.cause, h.endAt = context.Cause(fctx), time.Now()
			return nil
		})
	}()
	select {
	case hd := <-h.handle:
		h.handle <- hd
	case <-time.After(20 * time.Second):
		t.Fatal("Hold did not acquire")
	}
	return h
}

// TestSentinelFailoverDuringHeldLeases kills the primary (SIGKILL) while
// three leases are held and lets the Sentinels promote a replica:
//
//   - kept: acquired and replicated (WAIT) before the kill. It survives:
//     another attempt is CONTENDED on the promoted replica, and its holder
//     renews and releases there.
//   - lost: acquired while the replicas were detached (their links dropped,
//     the processes paused), so its acquire was acknowledged by a primary
//     that never replicated it. The promoted replica does not know it: a
//     second attempt gets ACQUIRED while the first handle is still ACTIVE
//     with validity left — the lease is double-held, as the
//     efficiency-only contract says it can be. The first holder's next
//     renew answers LOST.
//   - held: the same, under Hold. Its watchdog turns the lost (or, if a
//     renew was caught in the kill, unknown) lease into a cancelled holder
//     context; it is never left running.
func TestSentinelFailoverDuringHeldLeases(t *testing.T) {
	sen := redistest.StartSentinel(t)
	c := sentinelClient(t, sen)
	ctx := failoverCtx(t)

	keptA := attempt(t, "kept")
	kept, err := c.Acquire(ctx, on("kept", keptA, failoverTTL))
	require.NoError(t, err)
	require.Equal(t, Acquired, kept.Kind)
	old := sen.Primary()
	redistest.AwaitReplicated(t, old, 2)

	reattach := redistest.DetachReplicas(t, old, sen.Replicas()...)
	lostA := attempt(t, "lost")
	lost, err := c.Acquire(ctx, on("lost", lostA, failoverTTL))
	require.NoError(t, err)
	require.Equal(t, Acquired, lost.Kind, "the primary acknowledges an acquire no replica has")
	// Renewed every 5 s: at least one renew runs into the outage or the
	// promoted replica.
	held := startHold(t, ctx, c, on("held", attempt(t, "held"), 15*time.Second))
	killed := time.Now()
	old.Kill()
	reattach()
	next := sen.AwaitFailover(t, old)
	promoted := time.Now()
	require.NotEqual(t, old.Addr(), next.Addr())

	// kept survived: its holder still owns it on the promoted replica.
	awaitServed(t, ctx, c, "kept", keptA, ReplayedSameOperation)
	served := time.Now()
	other, err := c.Acquire(ctx, on("kept", attempt(t, "kept-2"), failoverTTL))
	require.NoError(t, err)
	assert.Equal(t, Contended, other.Kind, "a replicated lease keeps out a second owner after the failover")
	assert.Greater(t, other.RetryAfter, failoverTTL/2, "with the expiry it had")
	kind, err := kept.Handle.Renew(ctx)
	require.NoError(t, err)
	assert.Equal(t, Renewed, kind)

	// lost: forgotten, and double-held.
	got, err := c.Inspect(ctx, "nightly-cleanup", []byte("lost"), lostA, failoverTTL)
	require.NoError(t, err)
	assert.Equal(t, Absent, got.Kind, "the promoted replica never had the unreplicated acquire")
	second, err := c.Acquire(ctx, on("lost", attempt(t, "lost-2"), failoverTTL))
	require.NoError(t, err)
	require.Equal(t, Acquired, second.Kind, "a second owner acquires the forgotten lease")
	assert.Equal(t, Active, lost.Handle.State(), "double-held: the first handle is still ACTIVE")
	assert.Greater(t, lost.Handle.Remaining(), time.Duration(0), "with validity left")
	kind, err = lost.Handle.Renew(ctx)
	require.NoError(t, err)
	assert.Equal(t, RenewLost, kind, "the first holder's next renew finds the second owner")
	assert.Equal(t, Lost, lost.Handle.State())
	assert.ErrorIs(t, lost.Handle.Cause(), ErrLost)

	// held: the watchdog cancelled the holder.
	select {
	case <-held.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the watchdog did not end the holder's context")
	}
	hd := <-held.handle
	assert.NotEqual(t, Active, hd.State(), "the handle left ACTIVE")
	switch hd.State() {
	case Lost:
		assert.True(t, errors.Is(held.cause, ErrLost) || errors.Is(held.cause, ErrValidityExpired), "cause %v", held.cause)
	case Unknown:
		assert.Equal(t, certainty.Indeterminate, certainty.Classify(held.cause, true), "an unknown lease's cause is the lost reply: %v", held.cause)
	default:
		t.Fatalf("handle state %s after the failover", hd.State())
	}

	rel, err := kept.Handle.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, ReleaseDone, rel)
	t.Logf("kill → sentinels promoted %s +%s → client served by it +%s; held lease's holder cancelled +%s after the kill (%s, %v)",
		next.Addr(), promoted.Sub(killed).Round(time.Millisecond), served.Sub(killed).Round(time.Millisecond),
		held.endAt.Sub(killed).Round(time.Millisecond), hd.State(), held.cause)
}

// TestMinReplicasToWriteRefusesAnUnreplicatedAcquire: with
// min-replicas-to-write 1 a primary that has lost its replicas refuses
// the acquire before it changes anything (NOREPLICAS): UNAVAILABLE, not
// ACQUIRED, so no lease exists that a failover could forget. Once a
// replica is back, acquires work again.
func TestMinReplicasToWriteRefusesAnUnreplicatedAcquire(t *testing.T) {
	sen := redistest.StartSentinel(t, redistest.WithConfig("min-replicas-to-write", "1"),
		redistest.WithConfig("min-replicas-max-lag", "10"))
	c := sentinelClient(t, sen)
	ctx := failoverCtx(t)
	primary := sen.Primary()

	reattach := redistest.DetachReplicas(t, primary, sen.Replicas()...)
	a := attempt(t, "isolated")
	got, err := c.Acquire(ctx, on("isolated", a, failoverTTL))
	require.NoError(t, err)
	require.Equal(t, Unavailable, got.Kind, "refused: %v", got.Cause)
	assert.Equal(t, certainty.NotApplied, got.Certainty, "%v", got.Cause)
	require.Error(t, got.Cause)
	assert.Contains(t, got.Cause.Error(), "NOREPLICAS")
	n, err := primary.Admin().DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing was written")

	reattach()
	require.Eventually(t, func() bool {
		got, err = c.Acquire(ctx, on("isolated", a, failoverTTL))
		return err == nil && got.Kind == Acquired
	}, 30*time.Second, 50*time.Millisecond, "acquires work once a replica is back (last %s)", &got.Kind)
}

// TestClusterFailoverDuringHeldLeases is the Cluster counterpart: a
// primary owning both leases' slots is killed and its replica promoted by
// the cluster. The replicated lease survives; the unreplicated one is
// forgotten and double-held, and its first holder's renew answers LOST.
func TestClusterFailoverDuringHeldLeases(t *testing.T) {
	cl := redistest.StartCluster(t, redistest.WithConfig("cluster-node-timeout", "1000"))
	c, err := New(newRuntimeOn(t, &policy.Cluster{Seeds: cl.Seeds()}), Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	ctx := failoverCtx(t)
	const victim = 0
	primary, replica := cl.Primaries()[victim], cl.Replicas()[victim]
	// Resources whose lease keys live on the victim's slots.
	onVictim := func(prefix string) string {
		for i := 0; i < 1000; i++ {
			res := fmt.Sprintf("%s-%d", prefix, i)
			k, err := c.resourceKey("nightly-cleanup", []byte(res))
			require.NoError(t, err)
			owner, err := cl.Admin().MasterForKey(ctx, k.Redis())
			require.NoError(t, err)
			if owner.Options().Addr == primary.Addr() {
				return res
			}
		}
		t.Fatal("no resource on the victim shard")
		return ""
	}
	keptRes, lostRes := onVictim("kept"), onVictim("lost")

	keptA := attempt(t, "kept")
	kept, err := c.Acquire(ctx, on(keptRes, keptA, failoverTTL))
	require.NoError(t, err)
	require.Equal(t, Acquired, kept.Kind)
	redistest.AwaitReplicated(t, primary, 1)
	reattach := redistest.DetachReplicas(t, primary, replica)
	lostA := attempt(t, "lost")
	lost, err := c.Acquire(ctx, on(lostRes, lostA, failoverTTL))
	require.NoError(t, err)
	require.Equal(t, Acquired, lost.Kind)
	killed := time.Now()
	primary.Kill()
	reattach()
	redistest.AwaitPromoted(t, replica)
	promoted := time.Now()

	awaitServed(t, ctx, c, keptRes, keptA, ReplayedSameOperation)
	served := time.Now()
	other, err := c.Acquire(ctx, on(keptRes, attempt(t, "kept-2"), failoverTTL))
	require.NoError(t, err)
	assert.Equal(t, Contended, other.Kind)
	kind, err := kept.Handle.Renew(ctx)
	require.NoError(t, err)
	assert.Equal(t, Renewed, kind)

	second, err := c.Acquire(ctx, on(lostRes, attempt(t, "lost-2"), failoverTTL))
	require.NoError(t, err)
	require.Equal(t, Acquired, second.Kind, "the forgotten lease is acquired again")
	assert.Equal(t, Active, lost.Handle.State(), "double-held")
	kind, err = lost.Handle.Renew(ctx)
	require.NoError(t, err)
	assert.Equal(t, RenewLost, kind)
	t.Logf("kill → replica %s promoted +%s → client served +%s", replica.Addr(),
		promoted.Sub(killed).Round(time.Millisecond), served.Sub(killed).Round(time.Millisecond))
}

package fenced

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
	"github.com/caphost/caphost/runtime/certainty"
)

// ackTimeout is the replication timeout of the tests that also need a
// live replica's acknowledgement: generous (the 1 s command timeout
// allows 900 ms), so that a loaded 2-core machine does not turn an
// acknowledgement into NOT_REPLICATED.
const ackTimeout = 700 * time.Millisecond

// startReplicated starts a primary and one replica of it (two private
// standalone servers, REPLICAOF on the replica) and waits until the
// replica acknowledges the primary's stream.
func startReplicated(t *testing.T) (primary, replica *redistest.Server) {
	t.Helper()
	primary = redistest.StartStandalone(t)
	replica = redistest.StartStandalone(t)
	require.NoError(t, replica.Admin().Do(ctxT(t), "REPLICAOF", "127.0.0.1", strconv.Itoa(primary.Port())).Err())
	awaitStreaming(t, primary, 1)
	return primary, replica
}

// awaitStreaming waits until n replicas of srv are online and acknowledge
// a write made after that: a SET of a harness key and WAIT on one
// connection, the same shape as the acquire's pipeline. It proves the
// stream flows for new writes, which redistest.AwaitReplicated (writes
// made so far acknowledged) does not need to: after a
// diskless full sync Redis 7.0 holds the stream back until the replica's
// first REPLCONF ACK, sent once a second ("Waiting for REPLCONF ACK from
// slave to enable streaming" in the primary's log), so a WAIT in that
// second comes back short — seen here as NOT_REPLICATED after 700 ms
// with the replica "online" at offset 0 and the primary at 290.
func awaitStreaming(t *testing.T, srv *redistest.Server, n int) {
	t.Helper()
	awaitStreamingVia(t, srv, n, "redistest:streaming-probe")
}

// awaitStreamingVia is awaitStreaming writing key, which must hash to a
// slot srv serves on a Cluster.
func awaitStreamingVia(t *testing.T, srv *redistest.Server, n int, key string) {
	t.Helper()
	ctx := ctxT(t)
	require.Eventually(t, func() bool {
		info, err := srv.Admin().Info(ctx, "replication").Result()
		return err == nil && strings.Count(info, ",state=online,") >= n
	}, 30*time.Second, 10*time.Millisecond, "%d replicas of %s online", n, srv.Addr())
	conn := srv.Admin().Conn()
	defer conn.Close()
	require.NoError(t, conn.Set(ctx, key, "1", time.Minute).Err())
	got, err := conn.Wait(ctx, n, 10*time.Second).Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, got, int64(n), "replicas of %s streaming", srv.Addr())
}

// replicaCounter reads acct-7's fence counter on srv ('C1:<epoch>:<counter>:<digest>').
func replicaCounter(t *testing.T, w *world, srv *redistest.Server) int64 {
	t.Helper()
	_, key, err := w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	raw, err := srv.Admin().Get(ctxT(t), key.Redis()).Result()
	require.NoError(t, err)
	n, ok := storedCounter(raw)
	require.True(t, ok, raw)
	return n
}

// storedCounter is the counter a fence counter's stored value holds.
func storedCounter(raw string) (int64, bool) {
	parts := strings.Split(raw, ":")
	if len(parts) != 4 {
		return 0, false
	}
	n, err := strconv.ParseInt(parts[2], 10, 64)
	return n, err == nil
}

func ledgerRequest(t *testing.T, reg fence.Registration, op string) Request {
	return Request{Purpose: "ledger", Registration: reg, TTL: 30 * time.Second, Attempt: attempt(t, op)}
}

// TestReplicatedAcquireWithALiveReplica: with acks 1 and a live replica,
// provisioning and every acquire are acknowledged; the grant is on the
// replica before the handle is handed out, and exactly one WAIT follows
// each program (INFO commandstats on the primary).
func TestReplicatedAcquireWithALiveReplica(t *testing.T) {
	primary, replica := startReplicated(t)
	w := newWorld(t, primary.Addr(), primary, Config{Replication: Replication{Acks: 1, Timeout: ackTimeout}})
	ctx := ctxT(t)
	reg := w.activate(t, "acct-7")

	var waits int64
	for i := 1; i <= 3; i++ {
		if i == 2 {
			// From here every program is loaded: no NOSCRIPT round trip
			// (whose pipeline carries a WAIT of its own).
			waits = primary.CommandCalls(t, "wait")
		}
		a, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "op-"+strconv.Itoa(i)))
		require.NoError(t, err)
		require.Equal(t, Acquired, a.Kind)
		assert.Equal(t, 1, a.Replicas)
		assert.Equal(t, certainty.Applied, a.Certainty)
		tok := a.Handle.Token()
		assert.Equal(t, int64(i), tok.Counter)
		// Acknowledged means the replica has applied it: read it there
		// without waiting.
		assert.Equal(t, int64(i), replicaCounter(t, w, replica), "the replica holds the token before it is handed out")
		rel, err := a.Handle.Release(ctx)
		require.NoError(t, err)
		require.Equal(t, lease.ReleaseDone, rel)
	}
	assert.Equal(t, waits+2, primary.CommandCalls(t, "wait"), "one WAIT per acquire")
}

// TestReplicaPausedIsNotReplicated: the replica is paused (SIGSTOP: still
// connected, acknowledging nothing). An acquire is granted by the
// primary, but the WAIT times out with 0 replicas: NotReplicated, no
// handle, the grant released (nobody holds the lease), the counter kept
// (it never goes down). Once the replica resumes, the next acquire is
// acknowledged and its token is above the unreplicated one.
func TestReplicaPausedIsNotReplicated(t *testing.T) {
	primary, replica := startReplicated(t)
	w := newWorld(t, primary.Addr(), primary, Config{Replication: Replication{Acks: 1, Timeout: ackTimeout}})
	ctx := ctxT(t)
	reg := w.activate(t, "acct-7")

	replica.Pause()
	t.Cleanup(replica.Resume)
	start := time.Now()
	a, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "a"))
	took := time.Since(start)
	require.NoError(t, err)
	assert.Equal(t, NotReplicated, a.Kind)
	assert.False(t, a.Kind.Held())
	assert.Nil(t, a.Handle, "no token is handed out")
	assert.Zero(t, a.Replicas)
	assert.Equal(t, lease.ReleaseDone, a.Release, "the unreplicated grant is released")
	assert.Equal(t, int64(1), a.Fence.Counter, "the counter went up on the primary")
	assert.Equal(t, 1, a.Attempts, "NOT_REPLICATED is not retried")
	assert.GreaterOrEqual(t, took, ackTimeout, "the WAIT ran its timeout")

	in, err := w.c.Inspect(ctx, ledgerRequest(t, reg, "b"))
	require.NoError(t, err)
	assert.Equal(t, Absent, in.Kind, "the lease is not left held")
	assert.Equal(t, int64(1), replicaCounter(t, w, primary))

	// Wait > 0 does not turn NOT_REPLICATED into retries either.
	r := ledgerRequest(t, reg, "c")
	r.Wait = 2 * time.Second
	a, err = w.c.Acquire(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, NotReplicated, a.Kind)
	assert.Equal(t, 1, a.Attempts)
	assert.Equal(t, int64(2), a.Fence.Counter)

	replica.Resume()
	awaitStreaming(t, primary, 1)
	a, err = w.c.Acquire(ctx, ledgerRequest(t, reg, "d"))
	require.NoError(t, err)
	require.Equal(t, Acquired, a.Kind)
	assert.Equal(t, int64(3), a.Handle.Token().Counter, "above every unreplicated increment")
	assert.Equal(t, 1, a.Replicas)

	assert.Equal(t, 2.0, counterValue(t, w.c.m.acquires.WithLabelValues("ledger", "not_replicated")))
	assert.Equal(t, 1.0, counterValue(t, w.c.m.acquires.WithLabelValues("ledger", "acquired")))
	assert.Equal(t, 1.0, counterValue(t, w.c.m.issued.WithLabelValues("ledger")), "only a token handed out counts as issued")
}

// TestReplicaDetachedIsNotReplicated: REPLICAOF NO ONE on the replica (it
// leaves, the primary has no replica at all): WAIT answers 0 at its
// timeout, NotReplicated, nothing left held.
func TestReplicaDetachedIsNotReplicated(t *testing.T) {
	primary, replica := startReplicated(t)
	w := newWorld(t, primary.Addr(), primary, Config{Replication: Replication{Acks: 1, Timeout: ackTimeout}})
	ctx := ctxT(t)
	reg := w.activate(t, "acct-7")
	require.NoError(t, replica.Admin().Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	require.Eventually(t, func() bool {
		info, err := primary.Admin().Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0\r\n")
	}, 10*time.Second, 10*time.Millisecond)

	a, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "a"))
	require.NoError(t, err)
	assert.Equal(t, NotReplicated, a.Kind)
	assert.Nil(t, a.Handle)
	assert.Equal(t, lease.ReleaseDone, a.Release)
	in, err := w.c.Inspect(ctx, ledgerRequest(t, reg, "b"))
	require.NoError(t, err)
	assert.Equal(t, Absent, in.Kind)
}

// TestReplicatedProvisionKeepsTheRegistrationPending: a counter the
// replicas did not acknowledge is ProvisionNotReplicated and Activate
// leaves the registration PENDING; repeating it once the replica is back
// answers ALREADY_SAME, acknowledged, and activates.
func TestReplicatedProvisionKeepsTheRegistrationPending(t *testing.T) {
	primary, replica := startReplicated(t)
	w := newWorld(t, primary.Addr(), primary, Config{Replication: Replication{Acks: 1, Timeout: ackTimeout}})
	ctx := ctxT(t)
	_, err := w.store.Register(ctx, "acct-7")
	require.NoError(t, err)
	replica.Pause()
	t.Cleanup(replica.Resume)
	_, err = w.c.Activate(ctx, "ledger", w.store, "acct-7")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NOT_REPLICATED")
	got, err := w.store.Lookup(ctx, "acct-7")
	require.NoError(t, err)
	assert.Equal(t, fence.Pending, got.State, "no token may be issued from an unreplicated counter")

	replica.Resume()
	awaitStreaming(t, primary, 1)
	reg, err := w.c.Activate(ctx, "ledger", w.store, "acct-7")
	require.NoError(t, err)
	assert.Equal(t, fence.Active, reg.State)
	kind, _, err := w.c.Provision(ctx, "ledger", reg)
	require.NoError(t, err)
	assert.Equal(t, AlreadySame, kind)
}

// TestLostWaitReplyIsIndeterminateAndReconciled: the acquire's reply
// arrives but its WAIT's is lost (the proxy stalls while the WAIT blocks
// on a paused replica). The acquire is INDETERMINATE — applied on the
// primary, replication unknown — and takes the one reconciling repeat of
// the same attempt: with the replica back, it answers
// REPLAYED_SAME_OPERATION, acknowledged, with the same token and no second
// increment. When the repeat's reply is lost too, the outcome stays
// INDETERMINATE and Inspect with the same owner token reconciles it.
func TestLostWaitReplyIsIndeterminateAndReconciled(t *testing.T) {
	primary, replica := startReplicated(t)
	p := redistest.NewProxy(t, primary.Addr())
	w := newWorld(t, p.Addr(), primary, Config{Replication: Replication{Acks: 1, Timeout: ackTimeout}})
	ctx := ctxT(t)
	reg := w.activate(t, "acct-7")

	// Load the acquire and release programs first: a NOSCRIPT round trip
	// (whose WAIT blocks too) would move the stall onto the first send.
	warm, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "warm-up"))
	require.NoError(t, err)
	require.Equal(t, Acquired, warm.Kind)
	rel, err := warm.Handle.Release(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, rel)

	_, counter, err := w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	loseWaitReply := func() {
		_, err := w.c.Inspect(ctx, ledgerRequest(t, reg, "warm")) // a live pooled connection
		require.NoError(t, err)
		before := replicaCounter(t, w, primary)
		replica.Pause()
		// Stall once the acquire has applied on the primary, not after a
		// fixed time from here (under load the acquire and its WAIT's
		// timeout could both pass first): its reply is then on its way,
		// and the WAIT blocks on the paused replica for ackTimeout.
		go func() {
			for ctx.Err() == nil {
				raw, err := primary.Admin().Get(ctx, counter.Redis()).Result()
				if n, ok := storedCounter(raw); err == nil && ok && n > before {
					break
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // the acquire's reply passes the proxy
			p.Stall()
		}()
	}

	t.Run("repeat acknowledged", func(t *testing.T) {
		loseWaitReply()
		w.c.beforeRepeat = func() {
			p.Passthrough()
			replica.Resume()
			awaitStreaming(t, primary, 1)
		}
		defer func() { w.c.beforeRepeat = nil }()
		a, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "a"))
		require.NoError(t, err)
		require.Equal(t, ReplayedSameOperation, a.Kind, "%v", a.Cause)
		assert.Equal(t, 2, a.Attempts)
		assert.Equal(t, 1, a.Replicas)
		assert.Equal(t, int64(2), a.Handle.Token().Counter, "the repeat found the first grant: no second increment")
		assert.Equal(t, int64(2), replicaCounter(t, w, primary))
		rel, err := a.Handle.Release(ctx)
		require.NoError(t, err)
		require.Equal(t, lease.ReleaseDone, rel)
	})

	t.Run("repeat lost too", func(t *testing.T) {
		loseWaitReply()
		w.c.beforeRepeat = func() { time.Sleep(250 * time.Millisecond) } // the stall is on again
		defer func() { w.c.beforeRepeat = nil }()
		r := ledgerRequest(t, reg, "b")
		a, err := w.c.Acquire(ctx, r)
		require.NoError(t, err)
		assert.Equal(t, Indeterminate, a.Kind)
		assert.Equal(t, certainty.Indeterminate, a.Certainty)
		assert.Nil(t, a.Handle)
		assert.Equal(t, 2, a.Attempts)
		p.Passthrough()
		replica.Resume()
		awaitStreaming(t, primary, 1)
		in, err := w.c.Inspect(ctx, r)
		require.NoError(t, err)
		require.Equal(t, ReplayedSameOperation, in.Kind, "the first send applied on the primary")
		assert.Equal(t, int64(3), in.Handle.Token().Counter)
		assert.Equal(t, int64(3), replicaCounter(t, w, primary), "one increment for the lost first send and its repeat")
		rel, err := in.Handle.Release(ctx)
		require.NoError(t, err)
		assert.Equal(t, lease.ReleaseDone, rel)
	})
}

// TestReplicationConfigTheLaneCannotActOnIsRefused: New refuses a profile
// out of bounds, or whose WAIT timeout the script lane's 1 s command
// timeout would cut (limit 900 ms); the zero profile sends no WAIT.
func TestReplicationConfigTheLaneCannotActOnIsRefused(t *testing.T) {
	srv := redistest.StartStandalone(t)
	rt := newRuntime(t, srv.Addr())
	for _, r := range []Replication{
		{Acks: 0, Timeout: 100 * time.Millisecond},
		{Acks: MaxAcks + 1, Timeout: 100 * time.Millisecond},
		{Acks: 1, Timeout: 0},
		{Acks: 1, Timeout: 1500 * time.Microsecond},
		{Acks: 1, Timeout: 901 * time.Millisecond},
		{Acks: 1, Timeout: MaxTimeout + time.Millisecond},
	} {
		_, err := New(rt, Config{Replication: r})
		require.ErrorIs(t, err, lease.ErrInvalidRequest, "%+v", r)
		assert.Contains(t, err.Error(), "replication", "%+v", r)
	}
	_, err := New(rt, Config{Replication: Replication{Acks: MaxAcks, Timeout: 900 * time.Millisecond}})
	require.NoError(t, err)

	w := newWorldOn(t, rt, srv, Config{})
	reg := w.activate(t, "acct-7")
	a, err := w.c.Acquire(ctxT(t), ledgerRequest(t, reg, "a"))
	require.NoError(t, err)
	require.Equal(t, Acquired, a.Kind)
	assert.Zero(t, a.Replicas)
	assert.Zero(t, srv.CommandCalls(t, "wait"), "no profile, no WAIT")
}

// TestDecodeReplication: the block is strict — both keys, exact names,
// bounds — and absent means off.
func TestDecodeReplication(t *testing.T) {
	cfg, err := decodeYAML(t, "replication: {acks: 2, timeout: 250ms}\n", policy.RoleCoordination)
	require.NoError(t, err)
	assert.Equal(t, Replication{Acks: 2, Timeout: 250 * time.Millisecond}, cfg.Replication)
	cfg, err = decodeYAML(t, "max-ttl: 1m\n", policy.RoleCoordination)
	require.NoError(t, err)
	assert.False(t, cfg.Replication.Enabled())
	cfg, err = decodeYAML(t, "replication: {acks: '16', timeout: 5s}\n", policy.RoleCoordination)
	require.NoError(t, err, "an environment override arrives as a string")
	assert.Equal(t, Replication{Acks: 16, Timeout: 5 * time.Second}, cfg.Replication)

	const p = "capabilities.fenced-lease.replication"
	for block, want := range map[string]map[string]policy.Rule{
		"replication:\n":                                         {p: RuleReplication},
		"replication: 2\n":                                       {p: policy.RuleType},
		"replication: {acks: 0, timeout: 1s}\n":                  {p + ".acks": RuleReplication},
		"replication: {acks: 17, timeout: 1s}\n":                 {p + ".acks": RuleReplication},
		"replication: {acks: two, timeout: 1s}\n":                {p + ".acks": policy.RuleType},
		"replication: {acks: 1, timeout: 0s}\n":                  {p + ".timeout": RuleReplication},
		"replication: {acks: 1, timeout: 5001ms}\n":              {p + ".timeout": RuleReplication},
		"replication: {acks: 1, timeout: 1500us}\n":              {p + ".timeout": RuleReplication},
		"replication: {acks: 1, timeout: 100}\n":                 {p + ".timeout": policy.RuleType},
		"replication: {acks: 1}\n":                               {p + ".timeout": RuleReplication},
		"replication: {timeout: 1s}\n":                           {p + ".acks": RuleReplication},
		"replication: {acks: 1, timeout: 1s, Acks: 1}\n":         {p + ".Acks": policy.RuleUnknownKey},
		"replication: {acks: 1, timeout: 1s, min-replicas: 1}\n": {p + ".min-replicas": policy.RuleUnknownKey},
	} {
		_, err := decodeYAML(t, block, policy.RoleCoordination)
		assert.Equal(t, want, problems(t, err), block)
	}
}

// TestSidecarReportsReplication: over HTTP an acknowledged grant carries
// replicas; with the replica paused the answer is 200 NOT_REPLICATED,
// not held, no token, and the lease is free.
func TestSidecarReportsReplication(t *testing.T) {
	primary, replica := startReplicated(t)
	w := newWorld(t, primary.Addr(), primary, Config{Replication: Replication{Acks: 1, Timeout: ackTimeout}})
	h := sidecar(w.c)
	reg := w.activate(t, "acct-7")

	a := post(t, h, "acquire", fields(reg, "ttl-ms", 10000))
	require.Equal(t, http.StatusOK, a.status, a.raw)
	assert.Equal(t, "ACQUIRED", a.ok.Kind)
	assert.True(t, a.ok.Held)
	assert.Equal(t, 1, a.ok.Replicas)
	rel := post(t, h, "release", fields(reg, "owner-token", a.ok.OwnerToken, "counter", a.ok.Counter))
	require.Equal(t, "RELEASED", rel.ok.Kind, rel.raw)

	replica.Pause()
	t.Cleanup(replica.Resume)
	b := post(t, h, "acquire", fields(reg, "operation-id", "pay-2", "ttl-ms", 10000))
	require.Equal(t, http.StatusOK, b.status, b.raw)
	assert.Equal(t, "NOT_REPLICATED", b.ok.Kind)
	assert.False(t, b.ok.Held)
	assert.Zero(t, b.ok.Counter, "no token handed out")
	assert.Zero(t, b.ok.ResourceEpoch)
	assert.Zero(t, b.ok.Replicas)
	in := post(t, h, "inspect", fields(reg, "operation-id", "pay-2", "owner-token", b.ok.OwnerToken))
	assert.Equal(t, "ABSENT", in.ok.Kind, "released: nobody holds it")
}

// TestWaitRefusedByACLFailsClosed: a script-lane ACL user without +wait
// gets NOPERM for the WAIT after a grant. The answer is known (no lost
// reply), so the acquire is NOT_REPLICATED with the NOPERM as its Cause:
// released, no token — never ACQUIRED, never an INDETERMINATE left held.
func TestWaitRefusedByACLFailsClosed(t *testing.T) {
	srv := redistest.StartStandalone(t, redistest.WithACL(redistest.ACLUser{
		Name: "app", Password: "app-secret-password", Rules: []string{"~ca:*", "&*", "+@all", "-wait"},
	}))
	lanes := make(map[policy.Lane]policy.LaneConfig)
	for _, l := range policy.Lanes() {
		lanes[l] = policy.LaneConfig{PoolSize: 4, MaxInFlight: 16}
	}
	rt, err := runtime.New(context.Background(), policy.RedisConfig{
		Deployments: map[string]policy.Deployment{"coord": {
			ID: "coord", Topology: &policy.Standalone{Endpoint: srv.Addr()}, ClientName: "caphost-fenced-test",
			Timeouts: policy.Timeouts{Connect: time.Second, Command: time.Second, Acquire: time.Second, Shutdown: 3 * time.Second},
			Lanes:    lanes, Budgets: policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20}, AdminShared: true,
			Default: policy.Credential{User: "app", Password: policy.NewSecret([]byte("app-secret-password"))},
		}},
		Roles:    map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "coord", Required: true}},
		Programs: policy.ProgramsConfig{Mode: policy.ProgramsEvalshaManaged},
		Keys: policy.KeysConfig{App: "demo", Env: "test", HMAC: policy.KeyMaterial{
			WriteVersion: 1, Versions: map[int]policy.Secret{1: policy.NewSecret([]byte("0123456789abcdef0123456789abcdef"))},
		}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	w := newWorldOn(t, rt, srv, Config{Replication: Replication{Acks: 1, Timeout: 100 * time.Millisecond}})
	ctx := ctxT(t)
	_, err = w.store.Register(ctx, "acct-7")
	require.NoError(t, err)
	_, err = w.c.Activate(ctx, "ledger", w.store, "acct-7")
	require.Error(t, err, "the counter cannot be shown replicated: the registration stays PENDING")
	reg, err := w.store.Lookup(ctx, "acct-7")
	require.NoError(t, err)
	require.Equal(t, fence.Pending, reg.State)

	// Activate it as an operator would without the profile, then acquire.
	plain, err := New(rt, Config{}, WithRegisterer(nil))
	require.NoError(t, err)
	reg, err = plain.Activate(ctx, "ledger", w.store, "acct-7")
	require.NoError(t, err)
	a, err := w.c.Acquire(ctx, ledgerRequest(t, reg, "a"))
	require.NoError(t, err)
	assert.Equal(t, NotReplicated, a.Kind)
	require.Error(t, a.Cause)
	assert.Contains(t, a.Cause.Error(), "NOPERM")
	assert.Nil(t, a.Handle)
	assert.Equal(t, lease.ReleaseDone, a.Release)
	assert.Equal(t, 1, a.Attempts)

	// New registered the profile with the runtime: the startup probe
	// finds the same refusal before any acquire, as a misconfiguration.
	c := replicationCheckOf(t, rt.Probe(ctx))
	assert.Equal(t, runtime.CheckFailed, c.Status)
	assert.Equal(t, runtime.ClassMisconfiguration, c.Class)
	assert.Contains(t, c.Detail, "(NOPERM): grant +wait to the script lane's data user")
}

// replicationCheckOf returns the replication check of a one-deployment
// probe (the zero Check when it has none).
func replicationCheckOf(t *testing.T, rep runtime.ProbeReport) runtime.Check {
	t.Helper()
	require.Len(t, rep.Deployments, 1)
	for _, c := range rep.Deployments[0].Checks {
		if c.Name == runtime.CheckReplication {
			return c
		}
	}
	return runtime.Check{}
}

// TestNewRegistersTheReplicationProbe: a client with the replication
// profile makes the runtime's later probes prove it (an embedder that
// builds its own runtime gets the check too); a client without it adds
// nothing, and the probe sends no WAIT.
func TestNewRegistersTheReplicationProbe(t *testing.T) {
	primary, _ := startReplicated(t)
	ctx := ctxT(t)
	rt := newRuntime(t, primary.Addr())
	_, err := New(rt, Config{})
	require.NoError(t, err)
	before := primary.CommandCalls(t, "wait")
	assert.Equal(t, runtime.Check{}, replicationCheckOf(t, rt.Probe(ctx)), "no check without the profile")
	assert.Equal(t, before, primary.CommandCalls(t, "wait"), "no WAIT without the profile")

	_, err = New(rt, Config{Replication: Replication{Acks: 1, Timeout: ackTimeout}})
	require.NoError(t, err)
	c := replicationCheckOf(t, rt.Probe(ctx))
	assert.Equal(t, runtime.CheckOK, c.Status, c.Detail)
	assert.Contains(t, c.Detail, "online replicas per primary: 1 ≥ acks 1")

	_, err = New(rt, Config{Replication: Replication{Acks: 2, Timeout: ackTimeout}})
	require.NoError(t, err)
	c = replicationCheckOf(t, rt.Probe(ctx))
	assert.Equal(t, runtime.CheckWarn, c.Status, "the strictest profile on the role is proven")
	assert.Contains(t, c.Detail, "replication acks 2, but 1 of 1 primary has fewer online replicas (per primary: 1)")
}

// TestDocsListEveryFencedLeaseRule: docs/configuration.md documents every
// rule and key of the block, the replication keys included.
func TestDocsListEveryFencedLeaseRule(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/configuration.md")
	require.NoError(t, err)
	for _, r := range Rules() {
		assert.Contains(t, string(doc), "`"+string(r)+"`", "docs/configuration.md misses rule %s", r)
	}
	for _, k := range []string{"drift-budget", "max-ttl", "max-wait", "hard-fail-threshold", "purposes", "replication",
		"replication.acks", "replication.timeout"} {
		assert.Contains(t, string(doc), "`"+k+"`", "docs/configuration.md misses key %s", k)
	}
}

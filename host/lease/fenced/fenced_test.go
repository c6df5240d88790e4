package fenced

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // the protected store of the tests: a real SQL database

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

func newRuntime(t testing.TB, addr string) *runtime.Runtime {
	t.Helper()
	return newRuntimeOn(t, &policy.Standalone{Endpoint: addr})
}

// newRuntimeOn is newRuntime on any topology (the failover tests').
func newRuntimeOn(t testing.TB, topo policy.Topology) *runtime.Runtime {
	t.Helper()
	lanes := make(map[policy.Lane]policy.LaneConfig)
	for _, l := range policy.Lanes() {
		lanes[l] = policy.LaneConfig{PoolSize: 8, MaxInFlight: 64}
	}
	dep := policy.Deployment{
		ID: "coord", Topology: topo, ClientName: "caphost-fenced-test",
		Timeouts: policy.Timeouts{Connect: time.Second, Command: time.Second, Acquire: time.Second, Shutdown: 3 * time.Second},
		Lanes:    lanes, Budgets: policy.Budgets{MaxRequestBytes: 1 << 20, MaxReplyBytes: 1 << 20},
		AdminShared: true,
	}
	rt, err := runtime.New(context.Background(), policy.RedisConfig{
		Deployments: map[string]policy.Deployment{"coord": dep},
		Roles:       map[policy.Role]policy.RoleBinding{policy.RoleCoordination: {Deployment: "coord", Required: true}},
		Programs:    policy.ProgramsConfig{Mode: policy.ProgramsEvalshaManaged},
		Keys: policy.KeysConfig{App: "demo", Env: "test", HMAC: policy.KeyMaterial{
			WriteVersion: 1, Versions: map[int]policy.Secret{1: policy.NewSecret([]byte("0123456789abcdef0123456789abcdef"))},
		}},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// world is one Redis, one fenced-lease client and one protected store (a
// real SQLite database holding the fence registrations and an accounts
// table the holders write to).
type world struct {
	srv   *redistest.Server
	c     *Client
	db    *sql.DB
	store *fence.Store
}

func newWorld(t testing.TB, addr string, srv *redistest.Server, cfg Config) *world {
	t.Helper()
	return newWorldOn(t, newRuntime(t, addr), srv, cfg)
}

// newWorldOn is newWorld on a runtime of any topology (srv may be nil).
func newWorldOn(t testing.TB, rt *runtime.Runtime, srv *redistest.Server, cfg Config) *world {
	t.Helper()
	c, err := New(rt, cfg)
	require.NoError(t, err)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "store.db")+"?_pragma=busy_timeout(30000)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	store, err := fence.NewStore(db, fence.SQLite, fence.Strict)
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, store.CreateTable(ctx))
	_, err = db.ExecContext(ctx, `CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL, written_by TEXT NOT NULL)`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO accounts VALUES ('acct-7', 100, 'nobody')`)
	require.NoError(t, err)
	return &world{srv: srv, c: c, db: db, store: store}
}

// activate registers resource in the store and runs the provisioning
// protocol.
func (w *world) activate(t testing.TB, resource string) fence.Registration {
	t.Helper()
	ctx := context.Background()
	_, err := w.store.Register(ctx, resource)
	require.NoError(t, err)
	reg, err := w.c.Activate(ctx, "ledger", w.store, resource)
	require.NoError(t, err)
	require.Equal(t, fence.Active, reg.State)
	return reg
}

// write is a protected write: the balance changes only if the store admits
// tok in the same transaction.
func (w *world) write(ctx context.Context, tok fence.Token, who string, balance int) error {
	return w.store.Write(ctx, "acct-7", tok, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = ?, written_by = ? WHERE id = 'acct-7'`, balance, who)
		return err
	})
}

func (w *world) account(t *testing.T) (int, string) {
	t.Helper()
	var (
		b   int
		who string
	)
	require.NoError(t, w.db.QueryRow(`SELECT balance, written_by FROM accounts WHERE id = 'acct-7'`).Scan(&b, &who))
	return b, who
}

func attempt(t testing.TB, op string) lease.Attempt {
	t.Helper()
	a, err := lease.NewAttempt(op)
	require.NoError(t, err)
	return a
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestPausedHolderIsFencedOut is the protocol end to end: holder A gets
// token (e, n) and pauses; its lease runs out; B gets (e, n+1) and writes;
// A wakes and writes with its token — the protected store rejects it and
// the account keeps B's write.
func TestPausedHolderIsFencedOut(t *testing.T) {
	srv := redistest.StartStandalone(t)
	w := newWorld(t, srv.Addr(), srv, Config{})
	ctx := ctxT(t)
	reg := w.activate(t, "acct-7")

	a, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: attempt(t, "pay-1")})
	require.NoError(t, err)
	require.Equal(t, Acquired, a.Kind)
	tokA := a.Handle.Token()
	assert.Equal(t, reg.Epoch, tokA.Epoch)
	assert.Equal(t, int64(1), tokA.Counter)

	// A pauses past its TTL (the owner record expires behind its back).
	require.NoError(t, srv.Admin().Del(ctx, a.Handle.k.owner.Redis()).Err())
	b, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: attempt(t, "pay-2")})
	require.NoError(t, err)
	require.Equal(t, Acquired, b.Kind)
	tokB := b.Handle.Token()
	assert.Equal(t, fence.Token{Epoch: reg.Epoch, Counter: 2}, tokB)
	require.NoError(t, w.write(ctx, tokB, "B", 70))

	err = w.write(ctx, tokA, "A", 40) // A's late write
	require.ErrorIs(t, err, fence.ErrStaleToken)
	bal, who := w.account(t)
	assert.Equal(t, 70, bal)
	assert.Equal(t, "B", who, "the stale holder's write never landed")

	kind, err := a.Handle.Renew(ctx)
	require.NoError(t, err)
	assert.Equal(t, lease.RenewLost, kind, "A's renew finds B's lease")
	assert.ErrorIs(t, a.Handle.Cause(), lease.ErrLost)
	rel, err := a.Handle.Release(ctx)
	require.NoError(t, err)
	assert.Equal(t, lease.ReleaseNotOwner, rel)
	insp, err := w.c.Inspect(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: b.Handle.Attempt()})
	require.NoError(t, err)
	assert.Equal(t, ReplayedSameOperation, insp.Kind, "B still holds it")
	assert.Equal(t, tokB, insp.Handle.Token())

	secret := b.Handle.Attempt().Owner().Reveal()
	for _, s := range []string{fmt.Sprintf("%v %+v %#v", b.Handle, b.Handle, b.Handle), fmt.Sprintf("%+v", b)} {
		assert.NotContains(t, s, secret, "a printed handle never shows its owner token")
	}
}

// TestProvisionChecksThePurpose: with a purpose list, provisioning any
// other purpose is refused before Redis, as an acquire is.
func TestProvisionChecksThePurpose(t *testing.T) {
	srv := redistest.StartStandalone(t)
	w := newWorld(t, srv.Addr(), srv, Config{Purposes: []string{"ledger"}})
	reg := fence.Registration{Resource: "acct-7", Epoch: 42, Digest: fence.NewDigest(), HighWatermark: 5}
	assert.True(t, w.c.AcceptsPurpose("ledger"))
	assert.False(t, w.c.AcceptsPurpose("payroll"))
	assert.False(t, w.c.AcceptsPurpose("Not A Slug"))
	calls := srv.CommandCalls(t, "evalsha")
	_, _, err := w.c.Provision(ctxT(t), "payroll", reg)
	require.ErrorIs(t, err, lease.ErrInvalidRequest)
	assert.Equal(t, calls, srv.CommandCalls(t, "evalsha"), "refused before Redis")
	kind, tok, err := w.c.Provision(ctxT(t), "ledger", reg)
	require.NoError(t, err)
	assert.Equal(t, Provisioned, kind)
	assert.Equal(t, fence.Token{Epoch: 42, Counter: 5}, tok)
}

// TestProvisioningProtocol: no fenced lease before the registration is
// ACTIVE (the counter does not exist, and is never created on the request
// path); Activate provisions and activates, once.
func TestProvisioningProtocol(t *testing.T) {
	srv := redistest.StartStandalone(t)
	w := newWorld(t, srv.Addr(), srv, Config{})
	ctx := ctxT(t)
	pending, err := w.store.Register(ctx, "acct-7")
	require.NoError(t, err)
	got, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: pending, TTL: time.Second, Attempt: attempt(t, "early")})
	require.NoError(t, err)
	assert.Equal(t, CounterMissing, got.Kind, "fails closed before ACTIVE")
	assert.Nil(t, got.Handle)

	reg, err := w.c.Activate(ctx, "ledger", w.store, "acct-7")
	require.NoError(t, err)
	assert.Equal(t, fence.Active, reg.State)
	_, err = w.c.Activate(ctx, "ledger", w.store, "acct-7")
	assert.ErrorIs(t, err, ErrNotPending)
	kind, tok, err := w.c.Provision(ctx, "ledger", reg)
	require.NoError(t, err)
	assert.Equal(t, AlreadySame, kind)
	assert.Equal(t, fence.Token{Epoch: reg.Epoch}, tok)

	// The counter lost (a failover, an operator's DEL): never recreated.
	_, counter, err := w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	require.NoError(t, srv.Admin().Del(ctx, counter.Redis()).Err())
	got, err = w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg, TTL: time.Second, Attempt: attempt(t, "after-loss")})
	require.NoError(t, err)
	assert.Equal(t, CounterMissing, got.Kind)
	n, err := srv.Admin().Exists(ctx, counter.Redis()).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a missing counter is never initialised on the request path")
}

// TestReplayAndLostReply: the same attempt repeated gets the same token
// without an increment; a lost acquire reply is reconciled by the repeat.
func TestReplayAndLostReply(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	w := newWorld(t, p.Addr(), srv, Config{})
	ctx := ctxT(t)
	reg := w.activate(t, "acct-7")
	a := attempt(t, "op")
	first, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: a})
	require.NoError(t, err)
	again, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: a})
	require.NoError(t, err)
	assert.Equal(t, ReplayedSameOperation, again.Kind)
	assert.Equal(t, first.Handle.Token(), again.Handle.Token(), "no increment on a replay")
	_, err = first.Handle.Release(ctx)
	require.NoError(t, err)

	var repeats atomic.Int32
	w.c.beforeRepeat = func() { repeats.Add(1); p.Passthrough() }
	p.Stall()
	got, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: attempt(t, "lost")})
	require.NoError(t, err)
	assert.Equal(t, int32(1), repeats.Load())
	require.Equal(t, ReplayedSameOperation, got.Kind, "the first send applied; the repeat finds it")
	assert.Equal(t, int64(2), got.Handle.Token().Counter, "exactly one increment for the lost send and its repeat")
}

// TestRenewExtendsAndFenceChecks: renew really extends; a re-registered
// resource (new epoch) breaks the old handle's fence; a small hard-fail
// threshold refuses further grants.
func TestRenewExtendsAndFenceChecks(t *testing.T) {
	srv := redistest.StartStandalone(t)
	w := newWorld(t, srv.Addr(), srv, Config{HardFailThreshold: 2})
	ctx := ctxT(t)
	reg := w.activate(t, "acct-7")
	a, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: attempt(t, "a")})
	require.NoError(t, err)
	require.NoError(t, srv.Admin().PExpire(ctx, a.Handle.k.owner.Redis(), 200*time.Millisecond).Err())
	kind, err := a.Handle.Renew(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.Renewed, kind)
	pttl, err := srv.Admin().PTTL(ctx, a.Handle.k.owner.Redis()).Result()
	require.NoError(t, err)
	assert.Greater(t, pttl, 5*time.Second)
	rel, err := a.Handle.Release(ctx)
	require.NoError(t, err)
	require.Equal(t, lease.ReleaseDone, rel)

	b, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: attempt(t, "b")})
	require.NoError(t, err)
	require.Equal(t, int64(2), b.Handle.Token().Counter)
	_, err = b.Handle.Release(ctx)
	require.NoError(t, err)
	c3, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: attempt(t, "c")})
	require.NoError(t, err)
	assert.Equal(t, Exhausted, c3.Kind, "the threshold is a hard stop")

	// Retire and re-register: the old registration's requests no longer match.
	require.NoError(t, w.store.Retire(ctx, "acct-7", reg.Epoch))
	_, counter, err := w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	require.NoError(t, srv.Admin().Del(ctx, counter.Redis()).Err()) // the operator's retirement workflow
	_, err = w.store.Reregister(ctx, "acct-7", reg.Epoch)
	require.NoError(t, err)
	reg2, err := w.c.Activate(ctx, "ledger", w.store, "acct-7")
	require.NoError(t, err)
	old, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: attempt(t, "old")})
	require.NoError(t, err)
	assert.Contains(t, []AcquireKind{EpochMismatch, RegistrationConflict}, old.Kind, "a retired registration gets no token")
	fresh, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg2, TTL: 10 * time.Second, Attempt: attempt(t, "new")})
	require.NoError(t, err)
	require.Equal(t, Acquired, fresh.Kind)
	assert.Equal(t, fence.Token{Epoch: reg2.Epoch, Counter: 1}, fresh.Handle.Token())
	require.NoError(t, w.write(ctx, fresh.Handle.Token(), "new-epoch", 1))
	assert.ErrorIs(t, w.write(ctx, b.Handle.Token(), "old-epoch", 2), fence.ErrEpochRetired)
}

func TestInvalidRequests(t *testing.T) {
	srv := redistest.StartStandalone(t)
	w := newWorld(t, srv.Addr(), srv, Config{})
	ctx := ctxT(t)
	reg := w.activate(t, "acct-7")
	a := attempt(t, "op")
	for name, r := range map[string]Request{
		"no attempt":  {Purpose: "ledger", Registration: reg, TTL: time.Second},
		"bad purpose": {Purpose: "Ledger!", Registration: reg, TTL: time.Second, Attempt: a},
		"zero epoch":  {Purpose: "ledger", Registration: fence.Registration{Resource: "acct-7"}, TTL: time.Second, Attempt: a},
		"no resource": {Purpose: "ledger", Registration: fence.Registration{Epoch: reg.Epoch}, TTL: time.Second, Attempt: a},
		"short ttl":   {Purpose: "ledger", Registration: reg, TTL: lease.DefaultDriftBudget, Attempt: a},
	} {
		_, err := w.c.Acquire(ctx, r)
		assert.ErrorIs(t, err, lease.ErrInvalidRequest, name)
	}
	_, err := New(newRuntime(t, srv.Addr()), Config{Role: policy.RoleCache})
	assert.ErrorIs(t, err, lease.ErrInvalidRequest, "never on the cache role")
}

// TestHoldRenewsAndStopsOnABrokenFence: Hold renews during long work and
// cancels it the moment the fence no longer matches (the counter was
// lost), with ErrFenceBroken as the cause; the work never writes with a
// token whose fence is gone.
func TestHoldRenewsAndStopsOnABrokenFence(t *testing.T) {
	srv := redistest.StartStandalone(t)
	w := newWorld(t, srv.Addr(), srv, Config{})
	ctx := ctxT(t)
	reg := w.activate(t, "acct-7")
	renewed := make(chan lease.RenewKind, 64)
	w.c.afterRenew = func(k lease.RenewKind) { renewed <- k }
	_, counter, err := w.c.keysOf("ledger", "acct-7")
	require.NoError(t, err)
	a, err := w.c.Hold(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 600 * time.Millisecond, Attempt: attempt(t, "job")},
		func(ctx context.Context, h *Handle) error {
			for range 2 {
				require.Equal(t, lease.Renewed, <-renewed)
			}
			require.NoError(t, w.write(ctx, h.Token(), "job", 1))
			require.NoError(t, srv.Admin().Del(context.Background(), counter.Redis()).Err()) // the counter is lost
			<-ctx.Done()
			assert.ErrorIs(t, context.Cause(ctx), ErrFenceBroken)
			return nil
		})
	require.NoError(t, err)
	assert.Equal(t, Acquired, a.Kind)
	assert.Equal(t, Lost, a.Handle.State())
}

// TestLostReleaseWithRefusedRepeatStaysIndeterminate: the release reaches
// Redis and its reply is lost; the repeat cannot even be sent. The first
// send may have applied, so the outcome is INDETERMINATE with the handle
// UNKNOWN — never UNAVAILABLE ("nothing changed") — and an inspect with
// the same attempt finds the lease gone.
func TestLostReleaseWithRefusedRepeatStaysIndeterminate(t *testing.T) {
	srv := redistest.StartStandalone(t)
	p := redistest.NewProxy(t, srv.Addr())
	w := newWorld(t, p.Addr(), srv, Config{})
	ctx := ctxT(t)
	reg := w.activate(t, "acct-7")
	warm, err := w.c.Acquire(ctx, Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: attempt(t, "warm")})
	require.NoError(t, err)
	_, err = warm.Handle.Release(ctx) // loads the release program before the stall
	require.NoError(t, err)

	r := Request{Purpose: "ledger", Registration: reg, TTL: 10 * time.Second, Attempt: attempt(t, "op")}
	got, err := w.c.Acquire(ctx, r)
	require.NoError(t, err)
	require.Equal(t, Acquired, got.Kind)
	w.c.beforeReleaseRepeat = func() { p.Refuse() }
	p.Stall()
	rel, err := got.Handle.Release(ctx)
	w.c.beforeReleaseRepeat = nil
	p.Passthrough()
	require.NoError(t, err)
	assert.Equal(t, lease.ReleaseIndeterminate, rel)
	assert.Equal(t, Unknown, got.Handle.State())
	ins, err := w.c.Inspect(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, Absent, ins.Kind, "the first send applied")
}

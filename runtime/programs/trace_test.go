package programs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/keys"
)

// TestCommandTraceEvalshaManaged proves the evalsha-managed protocol on the
// wire: EVALSHA first; on NOSCRIPT exactly SCRIPT LOAD + one EVALSHA; never
// EVAL; never more than one retry.
func TestCommandTraceEvalshaManaged(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	b := testBuilder(t)
	k := vectorKeys(t, b, "trace", 1)[0]

	client := standaloneClient(t, s)
	rec := &recorder{}
	client.AddHook(rec)
	e, err := NewExecutor(cat, policy.ProgramsEvalshaManaged, client)
	require.NoError(t, err)
	require.NoError(t, s.Admin().ScriptFlush(ctx).Err())

	// Cold cache: NOSCRIPT -> SCRIPT LOAD -> EVALSHA.
	r, err := e.CompareAndDelete(ctx, k, []byte("owner"))
	require.NoError(t, err)
	assert.Equal(t, CompareAndDeleteAbsent, r.Status)
	assert.Equal(t, []string{"evalsha", "script load", "evalsha"}, rec.take())

	// Warm cache: one EVALSHA.
	_, err = e.CompareAndDelete(ctx, k, []byte("owner"))
	require.NoError(t, err)
	assert.Equal(t, []string{"evalsha"}, rec.take())

	// Flushed by an operator: the same single recovery again.
	require.NoError(t, s.Admin().ScriptFlush(ctx).Err())
	_, err = e.CompareAndDelete(ctx, k, []byte("owner"))
	require.NoError(t, err)
	assert.Equal(t, []string{"evalsha", "script load", "evalsha"}, rec.take())

	// The cache is flushed again right after SCRIPT LOAD: the second EVALSHA
	// also gets NOSCRIPT, and the executor gives up instead of looping.
	require.NoError(t, s.Admin().ScriptFlush(ctx).Err())
	rec.after = func(name string) {
		if name == "script load" {
			_ = s.Admin().ScriptFlush(ctx).Err()
		}
	}
	_, err = e.CompareAndDelete(ctx, k, []byte("owner"))
	rec.after = nil
	require.Error(t, err)
	var perr *Error
	require.ErrorAs(t, err, &perr)
	assert.Equal(t, "compare-and-delete-v1", perr.Program)
	assert.True(t, isNoScript(err), "the go-redis NOSCRIPT reply is visible through Unwrap: %v", err)
	assert.Equal(t, []string{"evalsha", "script load", "evalsha"}, rec.take())

	assert.Zero(t, s.CommandCalls(t, "eval"), "EVAL must never reach the server")
	assert.Zero(t, s.CommandCalls(t, "fcall"))
}

// TestCommandTraceFunctionsProvisioned proves FCALL only: no EVALSHA, no
// SCRIPT LOAD, no recovery; a missing library is an error, not a fallback.
func TestCommandTraceFunctionsProvisioned(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	k := vectorKeys(t, testBuilder(t), "trace-fn", 1)[0]
	client := standaloneClient(t, s)
	rec := &recorder{}
	client.AddHook(rec)
	e, err := NewExecutor(cat, policy.ProgramsFunctionsProvisioned, client)
	require.NoError(t, err)

	// Not deployed: the server's error comes back wrapped; nothing else is tried.
	_, err = e.IncrementWithInitialTTL(ctx, k, 1, 10, time.Minute)
	var perr *Error
	require.ErrorAs(t, err, &perr)
	var rerr redis.Error
	require.True(t, errors.As(err, &rerr), "server error reply visible: %v", err)
	assert.Equal(t, []string{"fcall"}, rec.take())

	require.NoError(t, Deploy(ctx, cat, s.Admin()))
	r, err := e.IncrementWithInitialTTL(ctx, k, 1, 10, time.Minute)
	require.NoError(t, err)
	assert.Equal(t, IncrementIncremented, r.Status)
	assert.Equal(t, []string{"fcall"}, rec.take())
	assert.Zero(t, s.CommandCalls(t, "evalsha"))
	assert.Zero(t, s.CommandCalls(t, "script|load"))
	assert.Zero(t, s.CommandCalls(t, "eval"))
}

// TestSHAMismatchStopsRetry tampers with a loaded catalog's source (the
// manifest still names the original sha1): SCRIPT LOAD returns another id,
// the executor reports ErrSHAMismatch and sends no further EVALSHA.
func TestSHAMismatchStopsRetry(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	cat := mustCatalog(t)
	i := cat.byID["compare-and-delete-v1"]
	cat.programs[i].source += "-- tampered\n"
	client := standaloneClient(t, s)
	rec := &recorder{}
	client.AddHook(rec)
	e, err := NewExecutor(cat, policy.ProgramsEvalshaManaged, client)
	require.NoError(t, err)
	_, err = e.CompareAndDelete(ctx, vectorKeys(t, testBuilder(t), "tamper", 1)[0], []byte("o"))
	require.ErrorIs(t, err, ErrSHAMismatch)
	assert.Equal(t, []string{"evalsha", "script load"}, rec.take())
}

func TestExecutorRejectsBadInput(t *testing.T) {
	cat := mustCatalog(t)
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { _ = client.Close() })
	_, err := NewExecutor(cat, "eval", client)
	require.ErrorIs(t, err, ErrMode)
	_, err = NewExecutor(nil, policy.ProgramsEvalshaManaged, client)
	require.Error(t, err)

	rec := &recorder{}
	client.AddHook(rec)
	e, err := NewExecutor(cat, policy.ProgramsEvalshaManaged, client)
	require.NoError(t, err)
	_, err = e.CompareAndDelete(context.Background(), keys.Key{}, []byte("o"))
	require.ErrorIs(t, err, ErrZeroKey)
	assert.Empty(t, rec.take(), "a zero key is rejected before anything is sent")
}

// TestTimeoutAfterApplyReconciliation stalls the reply after the program
// reached Redis: the facade returns the transport error wrapped in *Error
// (no invented certainty, no retry), the write did apply, and repeating the
// same call reconciles through the program's repeat status (§7.11).
func TestTimeoutAfterApplyReconciliation(t *testing.T) {
	s := redistest.StartStandalone(t)
	proxy := redistest.NewProxy(t, s.Addr())
	ctx := context.Background()
	cat := mustCatalog(t)
	admin := s.Admin()
	require.NoError(t, LoadScripts(ctx, cat, admin))
	require.NoError(t, Deploy(ctx, cat, admin))
	user, pass := s.AdminUser()
	client := redis.NewClient(&redis.Options{
		Addr: proxy.Addr(), Username: user, Password: pass, DisableIdentity: true, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 300 * time.Millisecond, WriteTimeout: time.Second,
	})
	t.Cleanup(func() { _ = client.Close() })
	rec := &recorder{}
	client.AddHook(rec)
	b := testBuilder(t)
	for _, mode := range []policy.ProgramMode{policy.ProgramsEvalshaManaged, policy.ProgramsFunctionsProvisioned} {
		t.Run(string(mode), func(t *testing.T) {
			e, err := NewExecutor(cat, mode, client)
			require.NoError(t, err)
			k := vectorKeys(t, b, "timeout-"+string(mode), 1)[0]
			require.NoError(t, client.Ping(ctx).Err()) // connection set up before the stall
			require.NoError(t, admin.Set(ctx, k.Redis(), "owner-a", time.Minute).Err())
			rec.take()

			proxy.Stall()
			_, err = e.CompareAndDelete(ctx, k, []byte("owner-a"))
			proxy.Passthrough()
			var perr *Error
			require.ErrorAs(t, err, &perr)
			var nerr interface{ Timeout() bool }
			require.ErrorAs(t, err, &nerr, "the transport timeout is visible through Unwrap")
			assert.True(t, nerr.Timeout())
			assert.Len(t, rec.take(), 1, "a timed-out program is never resent")
			assert.Zero(t, admin.Exists(ctx, k.Redis()).Val(), "the write applied although the caller saw a timeout")

			r, err := e.CompareAndDelete(ctx, k, []byte("owner-a"))
			require.NoError(t, err)
			assert.Equal(t, CompareAndDeleteAbsent, r.Status, "the repeat reconciles: desired state holds")
		})
	}
}

package runtime

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime/certainty"
	"github.com/caphost/caphost/runtime/keys"
)

// scopedKeys returns a shard anchor and the entry of parts under scope, as
// the cache builds them.
func scopedKeys(t testing.TB, b *keys.Builder, region, part string, scope []byte) (anchor, entry keys.Key) {
	t.Helper()
	layout, err := b.PrepareSharded(keys.ShardSpec{Capability: keys.CapCache, Region: region, KeyVersion: 1, Shards: 8,
		AnchorKind: "generation", MemberKinds: []string{"entry", "refresh-lease"}})
	require.NoError(t, err)
	loc, err := layout.Locate([][]byte{[]byte(part)})
	require.NoError(t, err)
	ms, err := layout.AppendMembers(nil, loc, scope)
	require.NoError(t, err)
	return layout.AnchorOf(loc), ms[0]
}

// checkReadScoped runs the read's cases against one deployment; admin
// writes the state under test.
func checkReadScoped(t *testing.T, dep *Deployment, b *keys.Builder, admin redis.UniversalClient, region string) {
	ctx := ctxT(t, 30*time.Second)
	gen := []byte("generation-0123456789")
	anchor, entry := scopedKeys(t, b, region, "item-1", gen)
	const max = 1024

	rd, err := dep.ReadScoped(ctx, anchor, entry, max)
	require.NoError(t, err)
	assert.Equal(t, ScopedRead{}, rd, "absent anchor, absent member")
	rd, err = dep.ReadMember(ctx, entry, max)
	require.NoError(t, err)
	assert.Equal(t, ScopedRead{}, rd, "ReadMember: absent member")

	require.NoError(t, admin.Set(ctx, anchor.Redis(), gen, 0).Err())
	rd, err = dep.ReadScoped(ctx, anchor, entry, max)
	require.NoError(t, err)
	assert.Equal(t, ScopedRead{Anchor: gen, AnchorFound: true}, rd, "absent member")

	for _, n := range []int{1, 100, max} {
		v := strings.Repeat("v", n)
		require.NoError(t, admin.Set(ctx, entry.Redis(), v, time.Minute).Err())
		rd, err = dep.ReadScoped(ctx, anchor, entry, max)
		require.NoError(t, err)
		assert.Equal(t, ScopedRead{Anchor: gen, AnchorFound: true, Length: int64(n), Found: true, Value: []byte(v)}, rd, "%d bytes", n)
		rd, err = dep.ReadMember(ctx, entry, max)
		require.NoError(t, err)
		assert.Equal(t, ScopedRead{Length: int64(n), Found: true, Value: []byte(v)}, rd, "ReadMember: %d bytes", n)
	}
	for _, n := range []int{max + 1, 4 << 20} {
		require.NoError(t, admin.Set(ctx, entry.Redis(), strings.Repeat("w", n), time.Minute).Err())
		rd, err = dep.ReadScoped(ctx, anchor, entry, max)
		require.NoError(t, err)
		assert.Equal(t, ScopedRead{Anchor: gen, AnchorFound: true, Length: int64(n), Found: true,
			Value: []byte(strings.Repeat("w", max+1))}, rd, "%d bytes: too large, only its head kept", n)
		rd, err = dep.ReadMember(ctx, entry, max)
		require.NoError(t, err)
		assert.Equal(t, ScopedRead{Length: int64(n), Found: true,
			Value: []byte(strings.Repeat("w", max+1))}, rd, "ReadMember: %d bytes: too large, only its head kept", n)
	}

	// A member of another type is ErrWrongType, REJECTED: never absent,
	// never unavailable. The same for the anchor.
	require.NoError(t, admin.Del(ctx, entry.Redis()).Err())
	require.NoError(t, admin.HSet(ctx, entry.Redis(), "f", "v").Err())
	_, err = dep.ReadScoped(ctx, anchor, entry, max)
	requireWrongType(t, err)
	_, err = dep.ReadMember(ctx, entry, max)
	requireWrongType(t, err)
	require.NoError(t, admin.Del(ctx, entry.Redis(), anchor.Redis()).Err())
	require.NoError(t, admin.SAdd(ctx, anchor.Redis(), "g").Err())
	_, err = dep.ReadScoped(ctx, anchor, entry, max)
	requireWrongType(t, err)
	require.NoError(t, admin.Del(ctx, anchor.Redis()).Err())

	// Caller mistakes are REJECTED before anything is sent.
	other, _ := scopedKeys(t, b, region, "item-1", gen)
	for i := 0; other.Slot() == anchor.Slot(); i++ {
		other, _ = scopedKeys(t, b, region+"-"+strconv.Itoa(i), "item-1", gen)
	}
	_, err = dep.ReadScoped(ctx, other, entry, max)
	require.ErrorIs(t, err, ErrCrossSlot)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
	for _, bad := range []int{0, -1, MaxScopedReadBytes + 1} {
		_, err = dep.ReadScoped(ctx, anchor, entry, bad)
		assert.Equal(t, certainty.Rejected, outcomeOf(t, err), "maxBytes %d", bad)
	}
	_, err = dep.ReadScoped(ctx, keys.Key{}, entry, max)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
	for _, bad := range []int{0, -1, MaxScopedReadBytes + 1} {
		_, err = dep.ReadMember(ctx, entry, bad)
		assert.Equal(t, certainty.Rejected, outcomeOf(t, err), "ReadMember: maxBytes %d", bad)
	}
	_, err = dep.ReadMember(ctx, keys.Key{}, max)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
}

func requireWrongType(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, ErrWrongType)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
	assert.Equal(t, "WRONGTYPE", certainty.Reason(err, false))
	var rerr redis.Error
	assert.ErrorAs(t, err, &rerr, "the server's reply stays reachable")
}

func TestReadScopedStandalone(t *testing.T) {
	srv := redistest.StartStandalone(t)
	d := testDeployment("main", standalone(srv.Addr()))
	r := newRuntime(t, testConfig(d))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	calls := func() map[string]int64 {
		m := map[string]int64{}
		for _, c := range []string{"get", "strlen", "getrange"} {
			m[c] = srv.CommandCalls(t, c)
		}
		return m
	}
	before := calls()
	checkReadScoped(t, dep, r.Keys(), srv.Admin(), "scoped")
	after := calls()
	// Nine ReadScoped calls reached the server, each one GET and one
	// GETRANGE, and seven ReadMember calls, each one GETRANGE; only the two
	// of each on an oversized member also sized it with STRLEN (the refused
	// calls sent nothing).
	want := map[string]int64{"get": 9, "getrange": 16, "strlen": 4}
	for c, n := range after {
		assert.Equal(t, want[c], n-before[c], c)
	}
}

// TestReadScopedCluster: anchor and member share a slot by construction,
// so the pipeline goes to the slot's primary as one round trip.
func TestReadScopedCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	d := testDeployment("cl", &policy.Cluster{Seeds: cl.Seeds()})
	r := newRuntime(t, testConfig(d))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	checkReadScoped(t, dep, r.Keys(), cl.Admin(), "scoped")
	// Anchors of several regions, spread over the primaries.
	ctx := ctxT(t, 30*time.Second)
	served := map[string]bool{}
	for i := range 24 {
		gen := []byte("generation-" + strconv.Itoa(i) + "-abcdef")
		anchor, entry := scopedKeys(t, r.Keys(), "spread-"+strconv.Itoa(i), "k", gen)
		require.NoError(t, cl.Admin().Set(ctx, anchor.Redis(), gen, 0).Err())
		require.NoError(t, cl.Admin().Set(ctx, entry.Redis(), "value-"+strconv.Itoa(i), time.Minute).Err())
		rd, err := dep.ReadScoped(ctx, anchor, entry, 64)
		require.NoError(t, err)
		assert.Equal(t, ScopedRead{Anchor: gen, AnchorFound: true, Length: int64(len(rd.Value)), Found: true,
			Value: []byte("value-" + strconv.Itoa(i))}, rd)
		node, err := cl.Admin().MasterForKey(ctx, anchor.Redis())
		require.NoError(t, err)
		served[node.Options().Addr] = true
	}
	assert.Len(t, served, 3, "the reads reached every primary")
}

// TestReadScopedReadsAtMostMaxPlusOne measures, through a byte-counting
// proxy, what a read of a 4 MiB member with a 1 KiB bound puts on the
// wire: the anchor, the length and maxBytes+1 bytes, plus framing. A plain
// GET of the same member (the control) costs the whole value.
func TestReadScopedReadsAtMostMaxPlusOne(t *testing.T) {
	srv := redistest.StartStandalone(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	d := testDeployment("main", standalone(proxy.Addr()))
	d.Budgets.MaxReplyBytes = 8 << 20 // the control GET must pass the guard
	r := newRuntime(t, testConfig(d))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	ctx := ctxT(t, 30*time.Second)
	gen := []byte("generation-0123456789")
	anchor, entry := scopedKeys(t, r.Keys(), "bounded", "big", gen)
	const stored, max = 4 << 20, 1024
	require.NoError(t, srv.Admin().Set(ctx, anchor.Redis(), gen, 0).Err())
	require.NoError(t, srv.Admin().Set(ctx, entry.Redis(), strings.Repeat("x", stored), time.Minute).Err())
	require.NoError(t, dep.Ping(ctx)) // the connection exists: its set-up is not counted
	down := func(f func()) int64 {
		_, before := proxy.Bytes()
		f()
		_, after := proxy.Bytes()
		return after - before
	}
	var rd ScopedRead
	n := down(func() {
		rd, err = dep.ReadScoped(ctx, anchor, entry, max)
		require.NoError(t, err)
	})
	assert.Equal(t, ScopedRead{Anchor: gen, AnchorFound: true, Length: stored, Found: true,
		Value: []byte(strings.Repeat("x", max+1))}, rd)
	// $21 + the generation, $1025 + 1025 bytes, then the STRLEN that sizes
	// the oversized member (:4194304), CRLFs: 1072 bytes.
	overhead := int64(len("$21\r\n\r\n:4194304\r\n$1025\r\n\r\n")) + int64(len(gen))
	assert.Equal(t, int64(max+1)+overhead, n, "exactly maxBytes+1 value bytes and the framing")
	t.Logf("ReadScoped of a %d-byte member with maxBytes %d: %d bytes on the wire", stored, max, n)
	n = down(func() {
		rd, err = dep.ReadMember(ctx, entry, max)
		require.NoError(t, err)
	})
	assert.Equal(t, ScopedRead{Length: stored, Found: true, Value: []byte(strings.Repeat("x", max+1))}, rd)
	assert.Equal(t, int64(max+1)+int64(len(":4194304\r\n$1025\r\n\r\n")), n, "ReadMember: maxBytes+1 value bytes and the framing")
	n = down(func() {
		_, _, err := dep.Get(ctx, entry)
		require.NoError(t, err)
	})
	assert.Greater(t, n, int64(stored))
	t.Logf("control: GET of the same member: %d bytes on the wire", n)
}

// TestReadScopedReplyBudget: GETRANGE asks for maxBytes+1 bytes, which the
// guard checks against the reply budget before sending. With the default
// 1 MiB budget the largest bound is 1 MiB - 1; a larger one refuses the
// whole pipeline unsent.
func TestReadScopedReplyBudget(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx := ctxT(t, 30*time.Second)
	for _, tc := range []struct {
		budget, max int
		sent        bool
	}{
		{1 << 20, MaxScopedReadBytes - 1, true},
		{1 << 20, MaxScopedReadBytes, false},
		{MaxScopedReadBytes + 1, MaxScopedReadBytes, true},
	} {
		d := testDeployment("main", standalone(srv.Addr()))
		d.Budgets.MaxReplyBytes = tc.budget
		r := newRuntime(t, testConfig(d))
		dep, err := r.Role(policy.RoleCoordination)
		require.NoError(t, err)
		anchor, entry := scopedKeys(t, r.Keys(), "budget", "k", []byte("generation-0123456789"))
		require.NoError(t, srv.Admin().Set(ctx, entry.Redis(), strings.Repeat("b", MaxScopedReadBytes), time.Minute).Err())
		before := srv.CommandCalls(t, "get")
		rd, err := dep.ReadScoped(ctx, anchor, entry, tc.max)
		if tc.sent {
			require.NoError(t, err)
			assert.Equal(t, int64(MaxScopedReadBytes), rd.Length)
			assert.Equal(t, min(tc.max+1, MaxScopedReadBytes), len(rd.Value), "all of it, or its first max+1 bytes")
			assert.Equal(t, before+1, srv.CommandCalls(t, "get"))
			continue
		}
		assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
		assert.NotErrorIs(t, err, ErrWrongType)
		assert.Equal(t, before, srv.CommandCalls(t, "get"), "the refused pipeline sent nothing")
	}
}

// TestReadScopedLeastPrivilege: GET, STRLEN and GETRANGE are all the read
// needs, STRLEN only to size an oversized member: without it an ordinary
// read works and an oversized one is refused (NOPERM: REJECTED, not a wrong
// type and not an outage).
func TestReadScopedLeastPrivilege(t *testing.T) {
	conn := []string{"~" + testNS + "*", "resetchannels", "-@all", "+hello", "+client|setname", "+ping"}
	srv := redistest.StartStandalone(t, redistest.WithACL(
		redistest.ACLUser{Name: "reader", Password: "reader-secret-1", Rules: append(append([]string(nil), conn...), "+get", "+strlen", "+getrange")},
		redistest.ACLUser{Name: "nostrlen", Password: "nostrlen-secret", Rules: append(append([]string(nil), conn...), "+get", "+getrange")},
	))
	ctx := ctxT(t, 30*time.Second)
	gen := []byte("generation-0123456789")
	read := func(user, pass, value string) (ScopedRead, error) {
		d := testDeployment(user, standalone(srv.Addr()))
		d.Default = policy.Credential{User: user, Password: policy.NewSecret([]byte(pass))}
		r := newRuntime(t, testConfig(d))
		dep, err := r.Role(policy.RoleCoordination)
		require.NoError(t, err)
		anchor, entry := scopedKeys(t, r.Keys(), "acl", "k", gen)
		require.NoError(t, srv.Admin().Set(ctx, anchor.Redis(), gen, 0).Err())
		require.NoError(t, srv.Admin().Set(ctx, entry.Redis(), value, time.Minute).Err())
		return dep.ReadScoped(ctx, anchor, entry, 64)
	}
	for _, user := range [][2]string{{"reader", "reader-secret-1"}, {"nostrlen", "nostrlen-secret"}} {
		rd, err := read(user[0], user[1], "value")
		require.NoError(t, err, user[0])
		assert.Equal(t, ScopedRead{Anchor: gen, AnchorFound: true, Length: 5, Found: true, Value: []byte("value")}, rd)
	}
	rd, err := read("reader", "reader-secret-1", strings.Repeat("v", 100))
	require.NoError(t, err)
	assert.Equal(t, int64(100), rd.Length)
	_, err = read("nostrlen", "nostrlen-secret", strings.Repeat("v", 100))
	require.Error(t, err)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err))
	assert.Equal(t, "NOPERM", certainty.Reason(err, false))
	assert.NotErrorIs(t, err, ErrWrongType)
}

// TestReadScopedServerGone: a killed server is an unavailability with its
// certainty, never a miss and never a wrong type; a server that stops
// answering after the pipeline was written is INDETERMINATE.
func TestReadScopedServerGone(t *testing.T) {
	srv := redistest.StartStandalone(t)
	proxy := redistest.NewProxy(t, srv.Addr())
	d := testDeployment("main", standalone(proxy.Addr()))
	d.Timeouts.Command = 300 * time.Millisecond
	r := newRuntime(t, testConfig(d))
	dep, err := r.Role(policy.RoleCoordination)
	require.NoError(t, err)
	ctx := ctxT(t, 30*time.Second)
	anchor, entry := scopedKeys(t, r.Keys(), "gone", "k", []byte("generation-0123456789"))
	_, err = dep.ReadScoped(ctx, anchor, entry, 64)
	require.NoError(t, err)

	proxy.Stall()
	_, err = dep.ReadScoped(ctx, anchor, entry, 64)
	assert.Equal(t, certainty.Indeterminate, outcomeOf(t, err))
	assert.NotErrorIs(t, err, ErrWrongType)
	proxy.Passthrough()
	_, err = dep.ReadMember(ctx, entry, 64) // a fresh connection
	require.NoError(t, err)
	proxy.Stall()
	_, err = dep.ReadMember(ctx, entry, 64)
	assert.Equal(t, certainty.Indeterminate, outcomeOf(t, err), "ReadMember")
	proxy.Passthrough()

	srv.Kill()
	for range 3 { // whatever connection the pool still holds, never a result
		_, err = dep.ReadScoped(ctx, anchor, entry, 64)
		require.Error(t, err)
		var ce *certainty.Error
		require.ErrorAs(t, err, &ce)
		assert.NotErrorIs(t, err, ErrWrongType)
		assert.Contains(t, []certainty.Outcome{certainty.UnavailableBeforeSend, certainty.Indeterminate}, ce.Outcome, "%v", err)
	}
	time.Sleep(5 * time.Millisecond) // past the idle check: a fresh dial, refused
	_, err = dep.ReadScoped(ctx, anchor, entry, 64)
	assert.Equal(t, certainty.UnavailableBeforeSend, outcomeOf(t, err), "%v", err)
}

// TestScopedResult decides the pipeline's replies: the GETRANGE decides the
// member (all of it, or the head of a longer one), more than maxBytes+1
// bytes is refused, and an unavailability wins over a wrong type.
func TestScopedResult(t *testing.T) {
	gen := redis.NewStringResult("generation-0123456789", nil)
	cases := []struct {
		name string
		head string
		want ScopedRead
	}{
		{"absent", "", ScopedRead{}},
		{"small", "abc", ScopedRead{Length: 3, Found: true, Value: []byte("abc")}},
		{"at the bound", "1234", ScopedRead{Length: 4, Found: true, Value: []byte("1234")}},
		{"too large: its head", "12345", ScopedRead{Length: 5, Found: true, Value: []byte("12345")}},
	}
	for _, tc := range cases {
		tc.want.Anchor, tc.want.AnchorFound = []byte("generation-0123456789"), true
		got, err := scopedResult("read-scoped", gen, redis.NewStringResult(tc.head, nil), 4)
		require.NoError(t, err, tc.name)
		assert.Equal(t, tc.want, got, tc.name)
	}
	_, err := scopedResult("read-scoped", gen, redis.NewStringResult("123456", nil), 4)
	assert.Equal(t, certainty.Rejected, outcomeOf(t, err), "more than maxBytes+1 bytes is not a read")
	down := &certainty.Error{Outcome: certainty.Indeterminate, Code: "timeout", Cause: errors.New("i/o timeout")}
	wrong := &certainty.Error{Outcome: certainty.Rejected, Op: "GET", Code: "WRONGTYPE", Cause: errors.New("WRONGTYPE")}
	_, err = scopedResult("read-scoped", redis.NewStringResult("", wrong), redis.NewStringResult("", down), 4)
	assert.Equal(t, certainty.Indeterminate, outcomeOf(t, err))
	assert.NotErrorIs(t, err, ErrWrongType)
}

// benchScoped is one private server holding a shard anchor and a 1 KiB
// entry, behind a deployment whose regular lane has room for 32 callers.
func benchScoped(b *testing.B) (*Deployment, *redistest.Server, keys.Key, keys.Key) {
	b.Helper()
	dep, kb, srv := benchRuntime(b)
	gen := []byte("generation-0123456789")
	anchor, entry := scopedKeys(b, kb, "bench", "hot", gen)
	require.NoError(b, srv.Admin().Set(context.Background(), anchor.Redis(), gen, 0).Err())
	require.NoError(b, srv.Admin().Set(context.Background(), entry.Redis(), strings.Repeat("e", 1024), time.Hour).Err())
	return dep, srv, anchor, entry
}

// serverTime measures the server's time per op for runGets: the sum of
// usec_per_call of commands (each runs once per op; each is reported
// too), counters reset before each run.
func serverTime(srv *redistest.Server, commands ...string) func(b *testing.B) func() {
	return func(b *testing.B) func() {
		require.NoError(b, srv.Admin().ConfigResetStat(context.Background()).Err())
		return func() {
			var sum float64
			for _, c := range commands {
				us := srv.MicrosPerCall(b, c)
				sum += us
				if len(commands) > 1 {
					b.ReportMetric(us, c+"-µs/op")
				}
			}
			b.ReportMetric(sum, "server-µs/op")
		}
	}
}

// BenchmarkReadScoped is the cache lookup's read of a 1 KiB entry and its
// shard generation: one pipeline of GET, STRLEN and GETRANGE.
func BenchmarkReadScoped(b *testing.B) {
	dep, srv, anchor, entry := benchScoped(b)
	ctx := context.Background()
	runGets(b, func() error {
		rd, err := dep.ReadScoped(ctx, anchor, entry, 4096)
		if err == nil && len(rd.Value) != 1024 {
			return errors.New("short read")
		}
		return err
	}, serverTime(srv, "get", "strlen", "getrange"))
}

// BenchmarkGet is a guarded GET of the same entry: what a lookup without
// the generation and the bound would cost.
func BenchmarkGet(b *testing.B) {
	dep, srv, _, entry := benchScoped(b)
	ctx := context.Background()
	runGets(b, func() error {
		_, _, err := dep.Get(ctx, entry)
		return err
	}, serverTime(srv, "get"))
}

package envoyrls_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/caphost/caphost/host/ratelimit"
	"github.com/caphost/caphost/host/ratelimit/envoyrls"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// newRuntime builds a runtime whose coordination role is the private
// server at addr.
func newRuntime(t testing.TB, addr string) *runtime.Runtime {
	t.Helper()
	lanes := make(map[policy.Lane]policy.LaneConfig)
	for _, l := range policy.Lanes() {
		lanes[l] = policy.LaneConfig{PoolSize: 4, MaxInFlight: 64}
	}
	dep := policy.Deployment{
		ID: "coord", Topology: &policy.Standalone{Endpoint: addr}, ClientName: "caphost-envoyrls-test",
		Timeouts: policy.Timeouts{Connect: time.Second, Command: 2 * time.Second, Acquire: 2 * time.Second, Shutdown: 3 * time.Second},
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

// loadFiles loads descriptor configurations from testdata.
func loadFiles(t testing.TB, names ...string) *rlsconfig.Config {
	t.Helper()
	var ds []*rlsconfig.Domain
	for _, n := range names {
		p := filepath.Join("testdata", n)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		d, err := rlsconfig.Parse(p, b)
		require.NoError(t, err)
		ds = append(ds, d)
	}
	c, err := rlsconfig.New(ds...)
	require.NoError(t, err)
	return c
}

type fixture struct {
	svc    *envoyrls.Service
	srv    *redistest.Server
	client rlsv3.RateLimitServiceClient
	reg    *prometheus.Registry
}

// start serves the examples over a real gRPC connection (bufconn) to a
// go-control-plane client. The service's clock is frozen at the start, so
// duration_until_reset is (window end − that instant): two answers with the
// same duration come from the same window.
func start(t testing.TB, o envoyrls.Options, files ...string) *fixture {
	t.Helper()
	if len(files) == 0 {
		files = []string{"example2.yaml", "example3.yaml", "example5.yaml", "example6.yaml", "example9.yaml"}
	}
	srv := redistest.StartStandalone(t)
	return serve(t, srv, o, loadFiles(t, files...))
}

// serve is start with a loaded configuration on a running server.
func serve(t testing.TB, srv *redistest.Server, o envoyrls.Options, cfg *rlsconfig.Config) *fixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	frozen := time.Now()
	o.Registerer, o.Now = reg, func() time.Time { return frozen }
	svc, err := envoyrls.New(newRuntime(t, srv.Addr()), cfg, o)
	require.NoError(t, err)
	gs, conn, served := listen(t, svc)
	t.Cleanup(func() {
		_ = conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.NoError(t, gs.Shutdown(ctx))
		assert.NoError(t, <-served)
	})
	return &fixture{svc: svc, srv: srv, client: rlsv3.NewRateLimitServiceClient(conn), reg: reg}
}

// listen serves svc on an envoyrls.Server over an in-memory listener
// (bufconn) and dials it: a real gRPC connection without a port. Serve's
// result arrives on served; the caller closes conn and shuts gs down.
func listen(t testing.TB, svc *envoyrls.Service) (gs *envoyrls.Server, conn *grpc.ClientConn, served <-chan error) {
	t.Helper()
	ln := bufconn.Listen(1 << 20)
	gs = envoyrls.NewServer(svc)
	result := make(chan error, 1)
	go func() { result <- gs.Serve(ln) }()
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	return gs, conn, result
}

func desc(kv ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func hits(d *commonv3.RateLimitDescriptor, n uint64) *commonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func (f *fixture) call(t *testing.T, domain string, hitsAddend uint32, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := f.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hitsAddend})
	require.NoError(t, err)
	require.Len(t, resp.Statuses, len(ds))
	return resp
}

// inOneWindow runs calls (which must use attempt-specific descriptor
// values, so that every attempt starts from fresh counters) until all of
// their counted statuses report the same window; a window boundary that
// falls between two calls is detected, never guessed at.
func inOneWindow(t *testing.T, calls func(attempt int) []*rlsv3.RateLimitResponse) []*rlsv3.RateLimitResponse {
	t.Helper()
	for attempt := range 5 {
		rs := calls(attempt)
		var first time.Duration
		same := true
		for _, r := range rs {
			for _, st := range r.Statuses {
				if st.DurationUntilReset == nil {
					continue
				}
				d := st.DurationUntilReset.AsDuration()
				if first == 0 {
					first = d
				}
				same = same && d == first
			}
		}
		if same {
			return rs
		}
	}
	t.Fatal("every attempt crossed a window boundary")
	return nil
}

func status1(t *testing.T, r *rlsv3.RateLimitResponse, i int, code rlsv3.RateLimitResponse_Code, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32) {
	t.Helper()
	st := r.Statuses[i]
	assert.Equal(t, code, st.Code, "status %d code", i)
	require.NotNil(t, st.CurrentLimit, "status %d current_limit", i)
	assert.Equal(t, rpu, st.CurrentLimit.RequestsPerUnit)
	assert.Equal(t, unit, st.CurrentLimit.Unit)
	assert.Equal(t, remaining, st.LimitRemaining, "status %d limit_remaining", i)
	require.NotNil(t, st.DurationUntilReset)
}

// TestNestedDescriptors is envoyproxy/ratelimit's Example 2: 5 marketing
// messages a day per number (nested, value-less key), 100 messages a day
// per number, both in one request, OR-ed.
func TestNestedDescriptors(t *testing.T) {
	f := start(t, envoyrls.Options{})
	rs := inOneWindow(t, func(a int) []*rlsv3.RateLimitResponse {
		n := fmt.Sprintf("206111111%d", a)
		var out []*rlsv3.RateLimitResponse
		for range 6 {
			out = append(out, f.call(t, "messaging", 0, desc("message_type", "marketing", "to_number", n), desc("to_number", n)))
		}
		// Another number has counters of its own.
		out = append(out, f.call(t, "messaging", 0, desc("message_type", "marketing", "to_number", n+"9")))
		return out
	})
	for i := range 5 {
		assert.Equal(t, rlsv3.RateLimitResponse_OK, rs[i].OverallCode)
		status1(t, rs[i], 0, rlsv3.RateLimitResponse_OK, 5, rlsv3.RateLimitResponse_RateLimit_DAY, uint32(4-i))
		status1(t, rs[i], 1, rlsv3.RateLimitResponse_OK, 100, rlsv3.RateLimitResponse_RateLimit_DAY, uint32(99-i))
	}
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, rs[5].OverallCode, "one descriptor over its limit is enough")
	status1(t, rs[5], 0, rlsv3.RateLimitResponse_OVER_LIMIT, 5, rlsv3.RateLimitResponse_RateLimit_DAY, 0)
	status1(t, rs[5], 1, rlsv3.RateLimitResponse_OK, 100, rlsv3.RateLimitResponse_RateLimit_DAY, 94)
	status1(t, rs[6], 0, rlsv3.RateLimitResponse_OK, 5, rlsv3.RateLimitResponse_RateLimit_DAY, 4)
	d := rs[0].Statuses[0].DurationUntilReset.AsDuration()
	assert.True(t, d > 0 && d <= 24*time.Hour, "duration_until_reset %s", d)

	// The placeholder level has no limit, and a request one level too
	// deep matches nothing: OK without a current limit, nothing counted.
	r := f.call(t, "messaging", 0, desc("message_type", "marketing"), desc("to_number", "1", "extra", "x"))
	assert.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode)
	for _, st := range r.Statuses {
		assert.Nil(t, st.CurrentLimit)
		assert.Nil(t, st.DurationUntilReset)
	}
	assert.Equal(t, 2.0, f.count(t, "no_rule"))
}

// count reads caphost_envoy_rls_descriptors_total{result}.
func (f *fixture) count(t *testing.T, result string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "caphost_envoy_rls_descriptors_total" {
			continue
		}
		for _, m := range mf.Metric {
			if m.Label[0].GetValue() == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no descriptor series %q", result)
	return 0
}

// TestWildcardValues is Example 9: each value matching value* has its own
// 20/minute counter; a middle wildcard matches prefix and suffix only.
func TestWildcardValues(t *testing.T) {
	f := start(t, envoyrls.Options{})
	rs := inOneWindow(t, func(a int) []*rlsv3.RateLimitResponse {
		v1, v2 := fmt.Sprintf("value1-%d", a), fmt.Sprintf("value2-%d", a)
		return []*rlsv3.RateLimitResponse{
			f.call(t, "example9", 20, desc("key1", v1)),
			f.call(t, "example9", 0, desc("key1", v1)),
			f.call(t, "example9", 0, desc("key1", v2)),
		}
	})
	status1(t, rs[0], 0, rlsv3.RateLimitResponse_OK, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0)
	status1(t, rs[1], 0, rlsv3.RateLimitResponse_OVER_LIMIT, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, 0)
	status1(t, rs[2], 0, rlsv3.RateLimitResponse_OK, 20, rlsv3.RateLimitResponse_RateLimit_MINUTE, 19)

	r := f.call(t, "example9", 0, desc("path", "/api/123/action"), desc("path", "/api/123/other"), desc("key1", "valu"))
	assert.NotNil(t, r.Statuses[0].CurrentLimit)
	assert.Nil(t, r.Statuses[1].CurrentLimit)
	assert.Nil(t, r.Statuses[2].CurrentLimit)
}

// TestUnlimitedAndBlocked: Example 5's unlimited entry is never counted
// (OK, limit_remaining MaxUint32, no current limit); Example 3's
// requests_per_unit 0 blocks one address while others get 10/second.
func TestUnlimitedAndBlocked(t *testing.T) {
	f := start(t, envoyrls.Options{})
	r := f.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.1"))
	status1(t, r, 0, rlsv3.RateLimitResponse_OK, 10, rlsv3.RateLimitResponse_RateLimit_SECOND, 9)
	calls := f.srv.CommandCalls(t, "evalsha")
	for range 3 {
		r := f.call(t, "internal", 1000, desc("ldap", "x"))
		assert.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode)
		assert.Equal(t, uint32(math.MaxUint32), r.Statuses[0].LimitRemaining)
		assert.Nil(t, r.Statuses[0].CurrentLimit)
	}
	r = f.call(t, "edge_proxy_per_ip", 0, desc("remote_address", "50.0.0.5"))
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.OverallCode)
	status1(t, r, 0, rlsv3.RateLimitResponse_OVER_LIMIT, 0, rlsv3.RateLimitResponse_RateLimit_SECOND, 0)
	d := r.Statuses[0].DurationUntilReset.AsDuration()
	assert.True(t, d > 0 && d <= time.Second, "aligned to the next second: %s", d)
	assert.Equal(t, 3.0, f.count(t, "unlimited"))
	assert.Equal(t, calls, f.srv.CommandCalls(t, "evalsha"), "unlimited and blocked answers need no state")
}

// TestShadowMode is Example 6: user-a's 10/second limit is counted but
// always answers OK; user-b's 20/second limit is enforced. A shadow
// descriptor Redis finds over the limit counts as shadow_over_limit, one
// within it as shadow.
func TestShadowMode(t *testing.T) {
	f := start(t, envoyrls.Options{})
	// The counts of the attempt inOneWindow keeps.
	var shadow, shadowOver float64
	rs := inOneWindow(t, func(a int) []*rlsv3.RateLimitResponse {
		svc := fmt.Sprintf("auth-service-%d", a)
		shadow0, shadowOver0 := f.count(t, "shadow"), f.count(t, "shadow_over_limit")
		out := []*rlsv3.RateLimitResponse{
			f.call(t, "example6", 10, desc("service", svc, "user", "user-a")),
			f.call(t, "example6", 0, desc("service", svc, "user", "user-a")),
			f.call(t, "example6", 20, desc("service", svc, "user", "user-b")),
			f.call(t, "example6", 0, desc("service", svc, "user", "user-b")),
		}
		shadow, shadowOver = f.count(t, "shadow")-shadow0, f.count(t, "shadow_over_limit")-shadowOver0
		return out
	})
	assert.Equal(t, 1.0, shadow, "10 hits of 10 are within the shadow limit")
	assert.Equal(t, 1.0, shadowOver, "the 11th would have been limited")
	status1(t, rs[0], 0, rlsv3.RateLimitResponse_OK, 10, rlsv3.RateLimitResponse_RateLimit_SECOND, 0)
	status1(t, rs[1], 0, rlsv3.RateLimitResponse_OK, 10, rlsv3.RateLimitResponse_RateLimit_SECOND, 0)
	assert.Equal(t, rlsv3.RateLimitResponse_OK, rs[1].OverallCode, "shadow mode never limits")
	status1(t, rs[2], 0, rlsv3.RateLimitResponse_OK, 20, rlsv3.RateLimitResponse_RateLimit_SECOND, 0)
	status1(t, rs[3], 0, rlsv3.RateLimitResponse_OVER_LIMIT, 20, rlsv3.RateLimitResponse_RateLimit_SECOND, 0)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, rs[3].OverallCode)

	// A cost above a shadow limit is answered OK without a call.
	before := f.count(t, "shadow_over_limit")
	r := f.call(t, "example6", 11, desc("service", "s", "user", "user-a"))
	status1(t, r, 0, rlsv3.RateLimitResponse_OK, 10, rlsv3.RateLimitResponse_RateLimit_SECOND, 0)
	assert.Equal(t, before+1, f.count(t, "shadow_over_limit"))
}

// TestGlobalShadowMode is envoyproxy/ratelimit's SHADOW_MODE: every
// descriptor keeps its own status (and headers), but a call that would be
// OVER_LIMIT overall is answered OK and counted; one within its limits is
// untouched.
func TestGlobalShadowMode(t *testing.T) {
	f := start(t, envoyrls.Options{ShadowMode: true, ResponseHeaders: true})
	over := f.call(t, "messaging", 101, desc("to_number", "shadow-1"))
	assert.Equal(t, rlsv3.RateLimitResponse_OK, over.OverallCode, "shadow: Envoy never limits")
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, over.Statuses[0].Code, "the descriptor still says why")
	assert.NotEmpty(t, over.ResponseHeadersToAdd)
	invalid := f.call(t, "messaging", 1, &commonv3.RateLimitDescriptor{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "to_number", Value: "1"}},
		Limit: &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}})
	assert.Equal(t, rlsv3.RateLimitResponse_OK, invalid.OverallCode)
	assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, invalid.Statuses[0].Code, "refused in-band as always")
	within := f.call(t, "messaging", 1, desc("to_number", "shadow-2"))
	assert.Equal(t, rlsv3.RateLimitResponse_OK, within.OverallCode)
	assert.Equal(t, 2.0, f.counter(t, "caphost_envoy_rls_global_shadow_total", ""))
	assert.Equal(t, 3.0, f.counter(t, "caphost_envoy_rls_requests_total", "ok"), "counted by the code answered")
}

// TestHitsAddend: the descriptor's hits_addend overrides the request's,
// which overrides 1; a cost above the limit is over it without a call.
func TestHitsAddend(t *testing.T) {
	f := start(t, envoyrls.Options{ResponseHeaders: true})
	rs := inOneWindow(t, func(a int) []*rlsv3.RateLimitResponse {
		n := fmt.Sprintf("1%d", a)
		return []*rlsv3.RateLimitResponse{
			f.call(t, "messaging", 30, desc("to_number", n)),
			f.call(t, "messaging", 30, hits(desc("to_number", n), 50)),
			f.call(t, "messaging", 0, desc("to_number", n)),
		}
	})
	status1(t, rs[0], 0, rlsv3.RateLimitResponse_OK, 100, rlsv3.RateLimitResponse_RateLimit_DAY, 70)
	status1(t, rs[1], 0, rlsv3.RateLimitResponse_OK, 100, rlsv3.RateLimitResponse_RateLimit_DAY, 20)
	status1(t, rs[2], 0, rlsv3.RateLimitResponse_OK, 100, rlsv3.RateLimitResponse_RateLimit_DAY, 19)
	hs := map[string]string{}
	for _, h := range rs[2].ResponseHeadersToAdd {
		hs[h.Key] = h.Value
	}
	assert.Equal(t, "100", hs[envoyrls.HeaderLimit])
	assert.Equal(t, "19", hs[envoyrls.HeaderRemaining])
	assert.NotEmpty(t, hs[envoyrls.HeaderReset])

	r := f.call(t, "messaging", 101, desc("to_number", "2"))
	status1(t, r, 0, rlsv3.RateLimitResponse_OVER_LIMIT, 100, rlsv3.RateLimitResponse_RateLimit_DAY, 0)
}

// TestHeaderNames: the response headers can be renamed, as
// envoyproxy/ratelimit's LIMIT_*_HEADER settings do; a name that is not
// an HTTP token, two names that differ only in case, or names without
// response headers are refused.
func TestHeaderNames(t *testing.T) {
	names := envoyrls.HeaderNames{Limit: "X-RateLimit-Limit", Remaining: "X-RateLimit-Remaining"}
	f := start(t, envoyrls.Options{ResponseHeaders: true, HeaderNames: names}, "example2.yaml")
	r := f.call(t, "messaging", 1, desc("to_number", "names-1"))
	hs := map[string]string{}
	for _, h := range r.ResponseHeadersToAdd {
		hs[h.Key] = h.Value
	}
	assert.Equal(t, map[string]string{"X-RateLimit-Limit": "100", "X-RateLimit-Remaining": "99", envoyrls.HeaderReset: hs[envoyrls.HeaderReset]}, hs)
	assert.NotEmpty(t, hs[envoyrls.HeaderReset], "an unset name keeps its default")

	srv := redistest.StartStandalone(t)
	rt := newRuntime(t, srv.Addr())
	for name, o := range map[string]envoyrls.Options{
		"not a token":  {ResponseHeaders: true, HeaderNames: envoyrls.HeaderNames{Limit: "X-Limit\r\nSet-Cookie: a"}},
		"a space":      {ResponseHeaders: true, HeaderNames: envoyrls.HeaderNames{Reset: "a b"}},
		"too long":     {ResponseHeaders: true, HeaderNames: envoyrls.HeaderNames{Reset: strings.Repeat("x", 65)}},
		"case clash":   {ResponseHeaders: true, HeaderNames: envoyrls.HeaderNames{Limit: "ratelimit-remaining"}},
		"without them": {HeaderNames: envoyrls.HeaderNames{Limit: "X-Limit"}},
	} {
		_, err := envoyrls.New(rt, loadFiles(t, "example2.yaml"), o)
		assert.ErrorIs(t, err, ratelimit.ErrConfig, name)
	}
}

// TestFailureModes: with Redis gone a fail-closed rule answers OVER_LIMIT
// (not a gRPC error, which Envoy's default failure_mode_deny: false would
// let through); a fail-open rule answers OK.
func TestFailureModes(t *testing.T) {
	for _, mode := range []policy.RateFailureMode{policy.FailClosed, policy.FailOpenPolicy} {
		t.Run(string(mode), func(t *testing.T) {
			f := start(t, envoyrls.Options{Policies: rlsconfig.PolicyOptions{FailureMode: mode}, AttemptTimeout: 500 * time.Millisecond})
			f.srv.Kill()
			r := f.call(t, "messaging", 0, desc("to_number", "1"))
			if mode == policy.FailClosed {
				assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.OverallCode)
				assert.Equal(t, rlsv3.RateLimitResponse_OVER_LIMIT, r.Statuses[0].Code)
				assert.Equal(t, 1.0, f.count(t, "unavailable"))
			} else {
				assert.Equal(t, rlsv3.RateLimitResponse_OK, r.OverallCode)
				assert.Equal(t, 1.0, f.count(t, "fail_open"))
			}
			assert.NotNil(t, r.Statuses[0].CurrentLimit)
		})
	}
}

// TestDescriptorsDecidedTogether: the descriptors of one request are
// decided concurrently, each its own atomic evaluation, but identical
// descriptors (one counter) are charged in request order, as
// envoyproxy/ratelimit's pipeline applies its INCRBYs: eight hits on one
// number, interleaved with one hit on each of eight others, leave exactly
// the remainders 99..92 in request order, in each of ten requests.
func TestDescriptorsDecidedTogether(t *testing.T) {
	f := start(t, envoyrls.Options{})
	rs := inOneWindow(t, func(a int) []*rlsv3.RateLimitResponse {
		var out []*rlsv3.RateLimitResponse
		for k := range 10 {
			n := fmt.Sprintf("555%d%d", a, k)
			var ds []*commonv3.RateLimitDescriptor
			for i := range 8 {
				ds = append(ds, desc("to_number", n), desc("to_number", fmt.Sprintf("%s%d", n, i)))
			}
			out = append(out, f.call(t, "messaging", 0, ds...))
		}
		return out
	})
	for _, r := range rs {
		var same, others []uint32
		for i, st := range r.Statuses {
			assert.Equal(t, rlsv3.RateLimitResponse_OK, st.Code)
			if i%2 == 0 {
				same = append(same, st.LimitRemaining)
			} else {
				others = append(others, st.LimitRemaining)
			}
		}
		assert.Equal(t, []uint32{99, 98, 97, 96, 95, 94, 93, 92}, same)
		assert.Equal(t, []uint32{99, 99, 99, 99, 99, 99, 99, 99}, others)
	}
}

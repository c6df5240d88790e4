package envoycompat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/caphost/caphost/bench/internal/sidecar"
	"github.com/caphost/caphost/host/ratelimit/envoyrls/rlsconfig"
	"github.com/caphost/caphost/internal/redistest"
)

// moreUnits is not from envoyproxy/ratelimit's documentation: the
// examples use second, minute, hour and day; this adds week, month (30
// days) and year (365 days, caphost's rate-fixed-window-v3), so that
// duration_until_reset is compared for every unit both serve.
const moreUnits = `domain: units
descriptors:
  - key: weekly
    rate_limit: {unit: week, requests_per_unit: 3}
  - key: monthly
    rate_limit: {unit: month, requests_per_unit: 4}
  - key: yearly
    rate_limit: {unit: year, requests_per_unit: 2}
`

// TestSameDecisionsAsEnvoyproxyRatelimit runs `caphost serve` and
// envoyproxy/ratelimit, each on a private redis-server, with the same
// descriptor files (upstream's documented examples), sends both the same
// ShouldRateLimit calls through go-control-plane's RateLimitServiceClient
// and requires the same answer to every call: overall_code, the
// RateLimit-* response headers, and per descriptor code, current_limit
// (name, requests_per_unit, unit), limit_remaining and
// duration_until_reset (within the bounds of the window the call fell
// in). See scenarios for what is sent; the calls where caphost differs by
// design are checked against its documentation instead
// (documentedDifferences).
func TestSameDecisionsAsEnvoyproxyRatelimit(t *testing.T) {
	files := append(examples(t), file{"units.yaml", moreUnits})
	var (
		rules   []sidecar.File
		domains []*rlsconfig.Domain
	)
	for _, f := range files {
		rules = append(rules, sidecar.File{Name: f.name, Body: f.body})
		d, err := rlsconfig.Parse(f.name, []byte(f.body))
		require.NoError(t, err, f.name)
		domains = append(domains, d)
	}
	cfg, err := rlsconfig.New(domains...)
	require.NoError(t, err)

	caphostBin, envoyBin := buildDaemons(t)
	ours := startCaphost(t, caphostBin, rules)
	theirs := startEnvoy(t, envoyBin, rules)
	d := &driver{caphost: client(t, ours), envoy: client(t, theirs), cfg: cfg, compared: map[string]int{}}

	for _, sc := range scenarios(cfg) {
		t.Run(sc.name, func(t *testing.T) { d.run(t, sc) })
	}
	t.Run("requests Envoy never sends", func(t *testing.T) {
		// No domain, no descriptors: an error from both (caphost's
		// InvalidArgument), never a decision.
		for _, req := range []*rlsv3.RateLimitRequest{
			{Descriptors: []*commonv3.RateLimitDescriptor{{Entries: []*commonv3.RateLimitDescriptor_Entry{{Key: "foo", Value: "x"}}}}},
			{Domain: "rl"},
		} {
			_, errOurs := d.caphost.ShouldRateLimit(context.Background(), req)
			_, errTheirs := d.envoy.ShouldRateLimit(context.Background(), req)
			require.Error(t, errTheirs, "envoyproxy/ratelimit")
			require.Equal(t, codes.InvalidArgument, status.Code(errOurs), "caphost serve: %v", errOurs)
			t.Logf("{%v}: envoyproxy/ratelimit %v", req, errTheirs)
		}
	})
	t.Run("every kind of answer compared", func(t *testing.T) {
		// The comparison is not of answers that could not differ.
		t.Logf("descriptor answers compared: %v", d.compared)
		for _, k := range []string{answerOver, answerWithin, answerUnlimited, answerNoRule} {
			assert.Greater(t, d.compared[k], 10, k)
		}
	})
	if t.Failed() {
		t.Logf("caphost serve log:\n%s\nenvoyproxy/ratelimit log:\n%s", ours.LogTail(4096), theirs.LogTail(4096))
	}
}

// buildDaemons builds both daemons from source into a temporary
// directory: caphost from the main module (so that a stale build/caphost
// is never what is compared), envoyproxy/ratelimit from the bench module,
// whose go.mod pins it (as `make bench-sidecar` does).
func buildDaemons(t *testing.T) (caphost, envoy string) {
	t.Helper()
	goBin := "go"
	if g := os.Getenv("GO"); g != "" { // the Makefile's $(GO)
		goBin = g
	}
	dir := t.TempDir()
	caphost, envoy = filepath.Join(dir, "caphost"), filepath.Join(dir, "envoy-ratelimit")
	for _, b := range []struct{ dir, out, pkg string }{
		{"../..", caphost, "./cmd/caphost"},
		{"..", envoy, "github.com/envoyproxy/ratelimit/src/service_cmd"},
	} {
		start := time.Now()
		cmd := exec.Command(goBin, "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %s:\n%s", b.pkg, out)
		t.Logf("built %s in %s", b.pkg, time.Since(start).Round(time.Millisecond))
	}
	return caphost, envoy
}

func startCaphost(t *testing.T, bin string, rules []sidecar.File) *sidecar.Daemon {
	t.Helper()
	srv := redistest.StartStandalone(t)
	d, err := sidecar.Caphost{Bin: bin, Dir: t.TempDir(), RedisAddr: srv.Addr(), Rules: rules, ResponseHeaders: true}.Start()
	require.NoError(t, err)
	t.Cleanup(d.Stop)
	return d
}

func startEnvoy(t *testing.T, bin string, rules []sidecar.File) *sidecar.Daemon {
	t.Helper()
	srv := redistest.StartStandalone(t)
	d, err := sidecar.Envoy{Bin: bin, Dir: t.TempDir(), RedisAddr: srv.Addr(), Rules: rules,
		// Response headers, as caphost's; no stats (their default sink logs every flush).
		Env: []string{"LIMIT_RESPONSE_HEADERS_ENABLED=true", "DISABLE_STATS=true"}}.Start()
	require.NoError(t, err)
	t.Cleanup(d.Stop)
	return d
}

func client(t *testing.T, d *sidecar.Daemon) rlsv3.RateLimitServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(d.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// desc is one request descriptor; hits, when set, is its own
// hits_addend (else the request's applies).
type desc struct {
	entries  []rlsconfig.Entry
	hits     *uint64
	override *commonv3.RateLimitDescriptor_RateLimitOverride
}

// call is one ShouldRateLimit request.
type call struct {
	domain string
	hits   uint32 // the request's hits_addend (0: 1)
	descs  []desc
}

// scenario is a sequence of calls, whose values derive from the
// attempt's nonce, so that a retried scenario counts on descriptors of
// its own.
type scenario struct {
	name  string
	calls func(nonce string) []call
	// documented holds, by call index, the answers of the calls where
	// caphost deliberately differs from envoyproxy/ratelimit, as caphost's
	// documentation gives them: those calls are checked against them
	// instead of compared.
	documented map[int]*documented
}

// documented is what each daemon answers to a one-descriptor call.
type documented struct{ ours, theirs answer }

// answer is a one-descriptor response: its (and so the overall) code,
// whether it carries a current_limit, and its limit_remaining.
type answer struct {
	code      rlsv3.RateLimitResponse_Code
	limited   bool
	remaining uint32
}

// check lists how r strays from a.
func (a answer) check(who string, r *rlsv3.RateLimitResponse) []string {
	st := r.Statuses[0]
	if r.OverallCode != a.code || st.Code != a.code || (st.CurrentLimit != nil) != a.limited || st.LimitRemaining != a.remaining {
		return []string{fmt.Sprintf("%s answered %v, descriptor {%v}; documented: %+v", who, r.OverallCode, st, a)}
	}
	return nil
}

func hits(n uint64) *uint64 { return &n }

// one is a call of one descriptor with the request's hits_addend.
func one(domain string, reqHits uint32, es ...rlsconfig.Entry) call {
	return call{domain: domain, hits: reqHits, descs: []desc{{entries: es}}}
}

func e(k, v string) rlsconfig.Entry { return rlsconfig.Entry{Key: k, Value: v} }

// scenarios: every rule of the files on its own (scenariosOfRule), then
// requests of several descriptors as Envoy sends them (one per
// rate-limit action of a route): nested descriptors beside their parents,
// unlimited and unmatched descriptors beside counted ones, shadow mode
// beside enforcement, wildcards, request and descriptor hits_addend.
func scenarios(cfg *rlsconfig.Config) []scenario {
	var out []scenario
	for _, r := range cfg.Rules() {
		out = append(out, scenariosOfRule(r)...)
	}
	repeat := func(n int, c call) []call {
		cs := make([]call, n)
		for i := range cs {
			cs[i] = c
		}
		return cs
	}
	return append(out,
		scenario{name: "rl nested beside parents, unlimited and unmatched", calls: func(n string) []call {
			return repeat(4, call{domain: "rl", descs: []desc{
				{entries: []rlsconfig.Entry{e("foo", n)}},
				{entries: []rlsconfig.Entry{e("foo", n), e("bar", n)}},
				{entries: []rlsconfig.Entry{e("foo", n), e("bar", "bkthomps")}},
				{entries: []rlsconfig.Entry{e("foo", n), e("bay", n)}},
				{entries: []rlsconfig.Entry{e("unspec", n)}},
				{entries: []rlsconfig.Entry{e("foo", n), e("bar", n), e("baz", n)}}, // deeper than any rule
				{entries: []rlsconfig.Entry{e("bar", n)}},                           // no top-level bar
				{entries: []rlsconfig.Entry{e("nothing", n)}},
			}})
		}},
		scenario{name: "rl shadow beside enforced and blacklisted", calls: func(n string) []call {
			shady := []desc{
				{entries: []rlsconfig.Entry{e("foo", n), e("baz", "shady")}},
				{entries: []rlsconfig.Entry{e("foo", n), e("baz", "not-so-shady")}},
			}
			cs := repeat(4, call{domain: "rl", descs: shady})
			return append(cs, call{domain: "rl", descs: append(shady, desc{entries: []rlsconfig.Entry{e("foo", n), e("bar", "banned")}})})
		}},
		scenario{name: "messaging Example 2, descriptor hits_addend over the request's", calls: func(n string) []call {
			both := func(h uint64) call {
				return call{domain: "messaging", hits: 10, descs: []desc{
					{entries: []rlsconfig.Entry{e("message_type", "marketing"), e("to_number", n)}, hits: hits(h)},
					{entries: []rlsconfig.Entry{e("to_number", n)}},
				}}
			}
			return []call{both(1), both(3), both(1), both(1), both(2)}
		}},
		scenario{name: "internal unlimited beside counted, request hits_addend", calls: func(n string) []call {
			c := func(reqHits uint32, own *uint64) call {
				return call{domain: "internal", hits: reqHits, descs: []desc{
					{entries: []rlsconfig.Entry{e("ldap", n)}},
					{entries: []rlsconfig.Entry{e("azure", n)}, hits: own},
				}}
			}
			return []call{c(30, hits(40)), c(0, hits(40)), c(20, nil), c(0, nil), c(7, hits(1))}
		}},
		scenario{name: "example6 shadow user-a beside user-b", calls: func(n string) []call {
			return repeat(5, call{domain: "example6", hits: 5, descs: []desc{
				{entries: []rlsconfig.Entry{e("service", n), e("user", "user-a")}},
				{entries: []rlsconfig.Entry{e("service", n), e("user", "user-b")}},
			}})
		}},
		scenario{name: "example9 wildcards", calls: func(n string) []call {
			return repeat(8, call{domain: "example9", descs: []desc{
				{entries: []rlsconfig.Entry{e("key1", "value"+n)}, hits: hits(4)},
				{entries: []rlsconfig.Entry{e("key1", "v"+n), e("k2", n)}},
				{entries: []rlsconfig.Entry{e("key1", "x"+n)}}, // matches no pattern
			}})
		}},
		scenario{name: "edge_proxy_per_ip per-IP beside the black-listed IP", calls: func(n string) []call {
			return repeat(3, call{domain: "edge_proxy_per_ip", hits: 5, descs: []desc{
				{entries: []rlsconfig.Entry{e("remote_address", n)}},
				{entries: []rlsconfig.Entry{e("remote_address", "50.0.0.5")}},
			}})
		}},
		scenario{name: "rl the same descriptor twice in a request", calls: func(n string) []call {
			return repeat(3, call{domain: "rl", descs: []desc{
				{entries: []rlsconfig.Entry{e("unspec", n)}},
				{entries: []rlsconfig.Entry{e("unspec", n)}},
			}})
		}},
		scenario{name: "rl empty values", calls: func(n string) []call {
			return repeat(3, call{domain: "rl", descs: []desc{
				{entries: []rlsconfig.Entry{e("unspec", "")}},
				{entries: []rlsconfig.Entry{e("foo", ""), e("bar", "")}},
			}})
		}},
		scenario{name: "rl a check without counting where no state is needed", calls: func(n string) []call {
			return repeat(2, call{domain: "rl", descs: []desc{
				{entries: []rlsconfig.Entry{e("foo", n), e("bay", n)}, hits: hits(0)},
				{entries: []rlsconfig.Entry{e("nothing", n)}, hits: hits(0)},
			}})
		}},
		documentedDifferences(),
	)
}

// documentedDifferences sends what caphost deliberately answers otherwise
// (host/ratelimit/envoyrls's package doc) and checks both answers against
// it, so that the differences stay the documented ones. Mostly on
// "internal azure" (100 a minute):
//   - "caphost's denial consumes nothing, where upstream's INCRBY counts
//     denied hits too": a hits_addend above what is left is OVER_LIMIT in
//     both, but caphost reports what is left (upstream 0), and a later
//     call that fits is OK in caphost, OVER_LIMIT upstream;
//   - a descriptor hits_addend of 0 (a check without counting) fails
//     closed in caphost: OVER_LIMIT with the rule's current_limit, on a
//     limit of 0 too (rl's "banned"), where upstream, whose counter is
//     still 0, answers OK;
//   - a per-descriptor limit override is refused in-band: OVER_LIMIT
//     without a current_limit ("Invalid descriptors");
//   - entries are matched as (key, value) pairs, never as upstream's
//     joined "key_value" (rlsconfig's doc): message="type_marketing" is
//     no rule in caphost, Example 2's marketing limit upstream.
func documentedDifferences() scenario {
	azure := func(v string, h uint64) call {
		return call{domain: "internal", descs: []desc{{entries: []rlsconfig.Entry{e("azure", v)}, hits: hits(h)}}}
	}
	over, ok := rlsv3.RateLimitResponse_OVER_LIMIT, rlsv3.RateLimitResponse_OK
	return scenario{
		name: "documented differences",
		calls: func(n string) []call {
			override := azure("d-"+n, 1)
			override.descs[0].override = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_MINUTE}
			return []call{
				azure("a-"+n, 99),  // 1 left in both: compared
				azure("a-"+n, 2),   // documented
				azure("a-"+n, 1),   // documented
				azure("b-"+n, 101), // a cost above the limit, OVER_LIMIT in both: compared
				azure("b-"+n, 1),   // documented
				azure("c-"+n, 0),   // documented
				override,           // documented
				{domain: "rl", descs: []desc{{entries: []rlsconfig.Entry{e("foo", n), e("bar", "banned")}, hits: hits(0)}}}, // documented
				one("messaging", 0, e("message", "type_marketing"), e("to_number", n)),                                      // documented
			}
		},
		documented: map[int]*documented{
			1: {ours: answer{over, true, 1}, theirs: answer{over, true, 0}},
			2: {ours: answer{ok, true, 0}, theirs: answer{over, true, 0}},
			4: {ours: answer{ok, true, 99}, theirs: answer{over, true, 0}},
			5: {ours: answer{over, true, 0}, theirs: answer{ok, true, 100}},
			6: {ours: answer{over, false, 0}, theirs: answer{ok, true, 4}},
			7: {ours: answer{over, true, 0}, theirs: answer{ok, true, 0}},
			8: {ours: answer{ok, false, 0}, theirs: answer{ok, true, 4}},
		},
	}
}

// scenariosOfRule: a descriptor matching r (its value-less entries and
// wildcards filled from the nonce) sent until past its limit — hits of 1,
// then hits_addend (the request's and the descriptor's) bringing it to
// exactly 1 and then 0 remaining, then calls over it. A rule whose path
// has no entry to vary (every value configured) shares its counter across
// attempts, so the run waits for a fresh window before a retry.
func scenariosOfRule(r *rlsconfig.Rule) []scenario {
	matching := func(n string) []rlsconfig.Entry {
		es := make([]rlsconfig.Entry, len(r.Path))
		for i, p := range r.Path {
			switch {
			case p.Value == "":
				es[i] = e(p.Key, p.Key+"-"+n)
			case strings.HasSuffix(p.Value, "*"):
				es[i] = e(p.Key, strings.TrimSuffix(p.Value, "*")+n)
			default:
				es[i] = p
			}
		}
		return es
	}
	name := r.KeyPath()
	if r.Unlimited || r.RequestsPerUnit == 0 {
		return []scenario{{name: name, calls: func(n string) []call {
			es := matching(n)
			return []call{one(r.Domain, 0, es...), one(r.Domain, 7, es...), {domain: r.Domain, descs: []desc{{entries: es, hits: hits(3)}}}}
		}}}
	}
	limit := uint64(r.RequestsPerUnit)
	return []scenario{{name: name, calls: func(n string) []call {
		es := matching(n)
		cs := []call{one(r.Domain, 0, es...)}
		left := limit - 1
		if left > 1 {
			// The request's hits_addend, or the descriptor's, to 1 left.
			if r.RequestsPerUnit%2 == 0 {
				cs = append(cs, one(r.Domain, uint32(left-1), es...))
			} else {
				cs = append(cs, call{domain: r.Domain, descs: []desc{{entries: es, hits: hits(left - 1)}}})
			}
			left = 1
		}
		if left == 1 {
			cs = append(cs, call{domain: r.Domain, hits: 9, descs: []desc{{entries: es, hits: hits(1)}}})
		}
		return append(cs, one(r.Domain, 0, es...), one(r.Domain, 1, es...),
			call{domain: r.Domain, descs: []desc{{entries: es, hits: hits(2)}}})
	}}}
}

// driver sends each call to both daemons and compares the answers.
type driver struct {
	caphost, envoy rlsv3.RateLimitServiceClient
	cfg            *rlsconfig.Config
	// compared counts the descriptor answers compared, by kind (see
	// kindOf), of the attempts that counted.
	compared map[string]int
}

// Kinds of descriptor answers.
const (
	answerOver      = "over_limit"
	answerWithin    = "ok_with_limit"
	answerUnlimited = "unlimited"
	answerNoRule    = "no_rule"
)

// kindOf names what envoyproxy/ratelimit answered for a descriptor.
func kindOf(st *rlsv3.RateLimitResponse_DescriptorStatus) string {
	switch {
	case st.Code == rlsv3.RateLimitResponse_OVER_LIMIT:
		return answerOver
	case st.CurrentLimit != nil:
		return answerWithin
	case st.LimitRemaining == math.MaxUint32:
		return answerUnlimited
	}
	return answerNoRule
}

// windowMargin: a scenario counting in windows of a minute or longer
// starts only with this much of the current window left, so that it ends
// in the window it started in; one counting per second starts right after
// a second begins.
const windowMargin = 10 * time.Second

// attempts bounds the retries of a scenario that crossed a window.
const attempts = 3

// run runs sc until one attempt stays within one window of every unit it
// counts in, and reports that attempt's differences. An attempt that
// crossed a window boundary compares nothing (the daemons may have counted
// in different windows); the retry waits for a window neither has
// counted in and uses fresh descriptor values.
func (d *driver) run(t *testing.T, sc scenario) {
	units := d.units(sc.calls("probe"))
	for attempt := 1; ; attempt++ {
		waitForRoom(units)
		nonce := newNonce(t)
		start := time.Now()
		var (
			diffs    []string
			compared = map[string]int{}
		)
		for i, c := range sc.calls(nonce) {
			diffs = append(diffs, d.compare(t, i, c, sc.documented[i], compared)...)
		}
		end := time.Now()
		crossed := slices.IndexFunc(units, func(u time.Duration) bool { return window(start, u) != window(end, u) })
		if crossed < 0 {
			for _, diff := range diffs {
				t.Error(diff)
			}
			for k, n := range compared {
				d.compared[k] += n
			}
			return
		}
		u := units[crossed]
		require.Less(t, attempt, attempts, "the scenario took %s, past a %s window boundary %d times", end.Sub(start), u, attempts)
		require.LessOrEqual(t, u, time.Minute, "the scenario took %s, more than the %s margin left in a %s window", end.Sub(start), windowMargin, u)
		t.Logf("attempt %d took %s across a %s window boundary; retrying in the next window", attempt, end.Sub(start), u)
		time.Sleep(untilNext(time.Now(), u))
	}
}

// units lists the windows the calls count in, shortest first.
func (d *driver) units(cs []call) []time.Duration {
	var us []time.Duration
	for _, c := range cs {
		for _, ds := range c.descs {
			if r := d.cfg.Match(c.domain, ds.entries); r != nil && !r.Unlimited && !slices.Contains(us, r.Unit.Duration()) {
				us = append(us, r.Unit.Duration())
			}
		}
	}
	slices.Sort(us)
	return us
}

// window numbers the window of unit u that t is in; windows are aligned to
// the Unix epoch in both daemons.
func window(t time.Time, u time.Duration) int64 { return t.UnixNano() / int64(u) }

func untilNext(now time.Time, u time.Duration) time.Duration {
	return time.Duration(int64(u)-now.UnixNano()%int64(u)) + time.Millisecond
}

// waitForRoom waits until every unit's window has room for a scenario
// (see windowMargin), longest unit first, then for the next second when
// a unit is a second.
func waitForRoom(units []time.Duration) {
	for _, u := range slices.Backward(units) {
		if u == time.Second {
			time.Sleep(untilNext(time.Now(), u))
		} else if left := untilNext(time.Now(), u); left < windowMargin {
			time.Sleep(left)
		}
	}
}

func newNonce(t *testing.T) string {
	b := make([]byte, 6)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return hex.EncodeToString(b)
}

func (c call) request() *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: c.domain, HitsAddend: c.hits}
	for _, ds := range c.descs {
		pd := &commonv3.RateLimitDescriptor{}
		for _, en := range ds.entries {
			pd.Entries = append(pd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: en.Key, Value: en.Value})
		}
		if ds.hits != nil {
			pd.HitsAddend = wrapperspb.UInt64(*ds.hits)
		}
		pd.Limit = ds.override
		req.Descriptors = append(req.Descriptors, pd)
	}
	return req
}

// compare sends call i to caphost, then to envoyproxy/ratelimit, and
// lists how the answers differ (or, for a documented difference, how
// either strays from what is documented).
func (d *driver) compare(t *testing.T, i int, c call, doc *documented, compared map[string]int) []string {
	t.Helper()
	req := c.request()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t0 := time.Now()
	ours, err := d.caphost.ShouldRateLimit(ctx, req)
	require.NoError(t, err, "caphost serve")
	theirs, err := d.envoy.ShouldRateLimit(ctx, req)
	require.NoError(t, err, "envoyproxy/ratelimit")
	t1 := time.Now()
	var diffs []string
	differ := func(format string, args ...any) {
		diffs = append(diffs, fmt.Sprintf("call %d {%s}: ", i, prototext.MarshalOptions{}.Format(req))+fmt.Sprintf(format, args...))
	}
	if doc != nil {
		for _, diff := range append(doc.ours.check("caphost", ours), doc.theirs.check("envoyproxy/ratelimit", theirs)...) {
			differ("%s", diff)
		}
		return diffs
	}
	if ours.OverallCode != theirs.OverallCode {
		differ("overall_code: caphost %v, envoyproxy/ratelimit %v", ours.OverallCode, theirs.OverallCode)
	}
	if len(ours.Statuses) != len(theirs.Statuses) {
		differ("%d statuses, envoyproxy/ratelimit %d", len(ours.Statuses), len(theirs.Statuses))
		return diffs
	}
	for j, o := range ours.Statuses {
		th := theirs.Statuses[j]
		compared[kindOf(th)]++
		if o.Code != th.Code {
			differ("descriptor %d code: caphost %v, envoyproxy/ratelimit %v", j, o.Code, th.Code)
		}
		if !proto.Equal(o.CurrentLimit, th.CurrentLimit) {
			differ("descriptor %d current_limit: caphost {%v}, envoyproxy/ratelimit {%v}", j, o.CurrentLimit, th.CurrentLimit)
		}
		if o.LimitRemaining != th.LimitRemaining {
			differ("descriptor %d limit_remaining: caphost %d, envoyproxy/ratelimit %d", j, o.LimitRemaining, th.LimitRemaining)
		}
		if (o.DurationUntilReset == nil) != (th.DurationUntilReset == nil) {
			differ("descriptor %d duration_until_reset: caphost %v, envoyproxy/ratelimit %v", j, o.DurationUntilReset, th.DurationUntilReset)
		} else if th.DurationUntilReset != nil && th.CurrentLimit != nil {
			u := unitDuration(th.CurrentLimit.Unit)
			lo, hi := resetBounds(t0, t1, u)
			for _, r := range []struct {
				who string
				got time.Duration
			}{{"caphost", o.DurationUntilReset.AsDuration()}, {"envoyproxy/ratelimit", th.DurationUntilReset.AsDuration()}} {
				if r.got < lo || r.got > hi {
					differ("descriptor %d duration_until_reset: %s %s, outside [%s, %s] for a %s window", j, r.who, r.got, lo, hi, u)
				}
			}
		}
	}
	for _, h := range compareHeaders(ours, theirs, t1.Sub(t0)) {
		differ("%s", h)
	}
	return diffs
}

// resetBounds is what a duration_until_reset answered between t0 and t1
// may be: the time from the call to the end of its window (t0's: the
// scenario stays in one window), whole seconds rounded up (upstream
// answers whole seconds from its clock's second).
func resetBounds(t0, t1 time.Time, u time.Duration) (lo, hi time.Duration) {
	end := time.Unix(0, (window(t0, u)+1)*int64(u))
	return end.Sub(t1) - time.Millisecond, end.Sub(t0).Truncate(time.Second) + time.Second
}

func unitDuration(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	switch u {
	case rlsv3.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case rlsv3.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case rlsv3.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case rlsv3.RateLimitResponse_RateLimit_DAY:
		return 24 * time.Hour
	case rlsv3.RateLimitResponse_RateLimit_WEEK:
		return 7 * 24 * time.Hour
	case rlsv3.RateLimitResponse_RateLimit_MONTH:
		return 30 * 24 * time.Hour
	case rlsv3.RateLimitResponse_RateLimit_YEAR:
		return 365 * 24 * time.Hour
	}
	return 0
}

// compareHeaders: the same RateLimit-Limit and -Remaining (of the
// descriptor closest to its limit), and -Reset within the seconds the call
// took.
func compareHeaders(ours, theirs *rlsv3.RateLimitResponse, took time.Duration) []string {
	get := func(r *rlsv3.RateLimitResponse) map[string]string {
		m := map[string]string{}
		for _, h := range r.ResponseHeadersToAdd {
			m[h.Key] = h.Value
		}
		return m
	}
	o, th := get(ours), get(theirs)
	var diffs []string
	for _, k := range []string{"RateLimit-Limit", "RateLimit-Remaining"} {
		if o[k] != th[k] {
			diffs = append(diffs, fmt.Sprintf("header %s: caphost %q, envoyproxy/ratelimit %q", k, o[k], th[k]))
		}
	}
	k := "RateLimit-Reset"
	a, errA := strconv.ParseInt(o[k], 10, 64)
	b, errB := strconv.ParseInt(th[k], 10, 64)
	switch {
	case (o[k] == "") != (th[k] == ""):
		diffs = append(diffs, fmt.Sprintf("header %s: caphost %q, envoyproxy/ratelimit %q", k, o[k], th[k]))
	case o[k] == "":
	case errA != nil || errB != nil || math.Abs(float64(a-b)) > 1+math.Ceil(took.Seconds()):
		diffs = append(diffs, fmt.Sprintf("header %s: caphost %q, envoyproxy/ratelimit %q (the call took %s)", k, o[k], th[k], took))
	}
	if len(ours.ResponseHeadersToAdd) != len(theirs.ResponseHeadersToAdd) {
		diffs = append(diffs, fmt.Sprintf("%d response headers, envoyproxy/ratelimit %d", len(ours.ResponseHeadersToAdd), len(theirs.ResponseHeadersToAdd)))
	}
	return diffs
}

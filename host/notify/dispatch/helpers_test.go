package dispatch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

const secret = "pii-s3cret-x"

var testNow = time.UnixMilli(1_767_225_600_000).UTC()

// scripted is an in-test transport: it records every message and answers
// from its script (the last receipt repeats). With hold set, Deliver
// signals entered and waits for hold to close — or for its context to
// end (then Indeterminate "cancelled"), unless deaf. With after set,
// Deliver runs it before it returns (setAfter).
type scripted struct {
	name    string
	mu      sync.Mutex
	calls   []transport.Message
	script  []transport.Receipt
	hold    chan struct{}
	entered chan struct{}
	deaf    bool
	after   func()
}

func newScripted(name string, rs ...transport.Receipt) *scripted {
	return &scripted{name: name, script: rs}
}

func (s *scripted) Name() string { return s.name }
func (s *scripted) Close() error { return nil }

func (s *scripted) Deliver(ctx context.Context, m transport.Message) transport.Receipt {
	s.mu.Lock()
	s.calls = append(s.calls, m)
	r := s.script[min(len(s.calls), len(s.script))-1]
	hold, entered, after := s.hold, s.entered, s.after
	s.mu.Unlock()
	if after != nil {
		defer after()
	}
	if entered != nil {
		entered <- struct{}{}
	}
	if hold != nil && s.deaf {
		<-hold
	} else if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return transport.Receipt{Outcome: transport.Indeterminate, Code: "cancelled"}
		}
	}
	return r
}

func (s *scripted) setAfter(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.after = f
}

func (s *scripted) Calls() []transport.Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]transport.Message(nil), s.calls...)
}

var (
	accepted = transport.Receipt{Outcome: transport.Accepted, Code: "http-202", ProviderRef: "m-1"}
	rejected = transport.Receipt{Outcome: transport.RejectedDefinite, Code: "http-503"}
	unknown  = transport.Receipt{Outcome: transport.Indeterminate, Code: "timeout-after-send"}
)

func testPlan(t testing.TB, transports ...string) intent.Plan {
	t.Helper()
	r, err := transport.NewRecipient("alice+" + secret + "@example.com")
	require.NoError(t, err)
	return intent.Plan{Recipient: r, Transports: transports, CreatedAt: testNow, Message: render.Result{
		Module: "renderer", ModuleSHA256: sha256.Sum256([]byte("renderer.wasm")), Template: "welcome", Version: 1,
		RequestedLocale: "en", Locale: "en", Channel: render.Email, Now: testNow, Parts: []render.Part{
			{Name: "subject", ContentType: "text/plain; charset=utf-8", Body: []byte("Welcome " + secret)},
			{Name: "text", ContentType: "text/plain; charset=utf-8", Body: []byte("Hello " + secret + "\n")},
		}}}
}

func newStore(t testing.TB, topo policy.Topology, shards int) *intent.Store {
	t.Helper()
	cfg := redistest.ExampleConfig("", policy.RoleCoordination)
	dep := cfg.Deployments["main"]
	dep.Topology = topo
	dep.Timeouts.Command, dep.Timeouts.Acquire, dep.Timeouts.Shutdown = 4*time.Second, time.Second, 8*time.Second
	cfg.Deployments["main"] = dep
	rt, err := runtime.New(context.Background(), cfg, runtime.WithLogger(slog.New(slog.DiscardHandler)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	s, err := intent.New(rt, intent.Config{Shards: shards})
	require.NoError(t, err)
	return s
}

// seq is a scripted jitter source: Int64N returns its values in order
// (each reduced mod n) and records the bounds asked for.
type seq struct {
	mu     sync.Mutex
	vals   []int64
	bounds []int64
}

func (s *seq) Int64N(n int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bounds = append(s.bounds, n)
	v := s.vals[0] % n
	s.vals = s.vals[1:]
	return v
}

// sleeps records the delays asked for and returns at once.
type sleeps struct {
	mu sync.Mutex
	ds []time.Duration
}

func (s *sleeps) Sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.ds = append(s.ds, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *sleeps) Delays() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.ds...)
}

// counting is an Observer that counts events by label and keeps the
// last backlog observed per shard.
type counting struct {
	mu      sync.Mutex
	events  map[string]int
	backlog map[int][2]int64 // shard → pending, lag
}

func (c *counting) add(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.events == nil {
		c.events = map[string]int{}
	}
	c.events[k]++
}

func (c *counting) Final(s intent.State) { c.add("final:" + s.String()) }
func (c *counting) Dispatched(n string, o transport.Outcome) {
	c.add("dispatched:" + n + ":" + o.String())
}
func (c *counting) Retried(n string)     { c.add("retried:" + n) }
func (c *counting) Quarantined(r string) { c.add("quarantined:" + r) }
func (c *counting) Unopened()            { c.add("unopened") }
func (c *counting) Backlog(shard int, pending, lag int64) {
	c.add("backlog")
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.backlog == nil {
		c.backlog = map[int][2]int64{}
	}
	c.backlog[shard] = [2]int64{pending, lag}
}

// Reclaimed counts, over all shards, the entries reclaimed
// ("reclaimed"), the XAUTOCLAIM calls ("reclaim-trips") and the laps
// ended ("reclaim-wraps").
func (c *counting) Reclaimed(_, entries, trips int, wrapped bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.events == nil {
		c.events = map[string]int{}
	}
	c.events["reclaimed"] += entries
	c.events["reclaim-trips"] += trips
	if wrapped {
		c.events["reclaim-wraps"]++
	}
}

// lastBacklog is the last pending and lag observed for shard.
func (c *counting) lastBacklog(shard int) [2]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.backlog[shard]
}

func (c *counting) Get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events[k]
}

// capture is a slog handler keeping every record's text.
type capture struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
	h   slog.Handler
}

func newCapture() *capture {
	b := &bytes.Buffer{}
	return &capture{mu: &sync.Mutex{}, buf: b, h: slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})}
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(ctx context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.h.Handle(ctx, r)
}
func (c *capture) WithAttrs(as []slog.Attr) slog.Handler {
	return &capture{mu: c.mu, buf: c.buf, h: c.h.WithAttrs(as)}
}
func (c *capture) WithGroup(n string) slog.Handler {
	return &capture{mu: c.mu, buf: c.buf, h: c.h.WithGroup(n)}
}
func (c *capture) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// baseConfig is a config with a 1ms idle so reclaims need no waiting and
// retry delays that only the sleep recorder sees.
func baseConfig(consumer string, obs Observer, log *slog.Logger, sl *sleeps, rnd Random, ts ...*scripted) Config {
	m := map[string]transport.Transport{}
	for _, t := range ts {
		m[t.name] = t
	}
	return Config{Consumer: consumer, Transports: m, Base: 100 * time.Millisecond, Cap: 2 * time.Second,
		CallTimeout: 5 * time.Second, MinIdle: 8 * time.Second, MaxDeliveries: 3, Observer: obs, Logger: log,
		Sleep: sl.Sleep, Random: rnd}
}

package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/caphost/caphost/host/notify/dispatch"
	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/plugins/transport/webhook"
	"github.com/caphost/caphost/runtime"
)

// webhookBin is where `make transports` puts the webhook plugin, seen
// from bench/ (where `make bench` runs this command).
const webhookBin = "../build/transports/webhook"

// benchPlan is a frozen slack message of the renderer guest's size (one
// part, ~60 bytes), as notify.Submit stores it.
func benchPlan() (intent.Plan, error) {
	r, err := transport.NewRecipient("ada@example.com")
	if err != nil {
		return intent.Plan{}, err
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	return intent.Plan{Recipient: r, Transports: []string{"webhook"}, CreatedAt: now, Message: render.Result{
		Module: "renderer", ModuleSHA256: sha256.Sum256([]byte("renderer.wasm")), Template: "welcome", Version: 1,
		RequestedLocale: "en", Locale: "en", Channel: render.Slack, Now: now, Parts: []render.Part{
			{Name: "text", ContentType: "text/x-slack-mrkdwn; charset=utf-8", Body: []byte("*Hello Ada,*\nyour account A-1 is ready.\n_Sent 2026-12-05_\n")},
		}}}, nil
}

// sink is the webhook receiver of the notify rows: it checks each
// request's signature (a wrong setup fails loudly) and reports arrivals
// by intent id.
type sink struct {
	secret  []byte
	ln      net.Listener
	srv     *http.Server
	arrived func(id string)
	bad     atomic.Int64
}

func startSink(secret []byte) (*sink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &sink{secret: secret, ln: ln, arrived: func(string) {}}
	s.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil || webhook.Verify(s.secret, r.Header.Get(webhook.SignatureHeader), body, time.Now(), time.Minute) != nil {
			s.bad.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var doc struct {
			IntentID string `json:"intent_id"`
		}
		if json.Unmarshal(body, &doc) != nil {
			s.bad.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s.arrived(doc.IntentID)
		w.WriteHeader(http.StatusOK)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *sink) url() string { return "http://" + s.ln.Addr().String() + "/hook" }

// notifyRows: durable submit against a plain XADD of the same bytes (the
// 0.9× target), the go-plugin call overhead per delivery (the webhook
// transport in process against the same code as a plugin process), and
// the end-to-end latency from submit to the webhook's arrival at 1 and 32
// submitters.
func notifyRows(ctx context.Context, rt *runtime.Runtime, plain *redis.Client, o runOpts,
	want func(string) bool, row func(string, []result), stats func([]contender, int)) error {
	labels := []string{"notify submit, 1 gor.", "notify submit, 32 gor.", "  notify A/A control, 1", "  notify A/A control, 32",
		"notify webhook plugin call, 1 gor.", "notify webhook plugin call, 32 gor.", "notify end to end"}
	if !slices.ContainsFunc(labels, want) {
		return nil
	}
	store, err := intent.New(rt, intent.Config{Shards: 4, Region: "bench"})
	if err != nil {
		return err
	}
	plan, err := benchPlan()
	if err != nil {
		return err
	}
	enc, err := plan.MarshalBinary()
	if err != nil {
		return err
	}
	var seq atomic.Uint64
	key := func() []byte { return strconv.AppendUint([]byte("bench-"), seq.Add(1), 36) }
	id := hex.EncodeToString(make([]byte, 32))
	xadd := func(name string, c *redis.Client) contender {
		return contender{name, func(ctx context.Context) error {
			return c.Do(ctx, "xadd", "bench:notify:control{x}", "maxlen", "~", intent.DefaultMaxLen, "*", "i", id, "p", enc).Err()
		}}
	}
	submit := contender{"caphost intent Submit", func(ctx context.Context) error {
		_, err := store.Submit(ctx, key(), plan)
		return err
	}}
	var twin *redis.Client
	if o.control {
		twin = redis.NewClient(&redis.Options{Addr: o.addr, PoolSize: 64, DisableIdentity: true, Protocol: 2})
		defer twin.Close()
	}
	for _, g := range []int{1, 32} {
		if label := fmt.Sprintf("notify submit, %d gor.", g); want(label) {
			cs := []contender{xadd("go-redis XADD", plain), submit}
			row(label, compare(ctx, cs, g, o.dur, o.slice, o.rounds))
			stats(cs, g)
		}
		if label := fmt.Sprintf("  notify A/A control, %d", g); o.control && want(label) {
			row(label, compare(ctx, []contender{xadd("go-redis XADD", plain), xadd("go-redis XADD (twin)", twin)}, g, o.dur, o.slice, o.rounds))
		}
	}

	ss := sha256.Sum256([]byte("bench-webhook-secret"))
	secret := []byte(hex.EncodeToString(ss[:]))
	snk, err := startSink(secret)
	if err != nil {
		return err
	}
	defer snk.srv.Close()
	settings := map[string]string{"url": snk.url(), "secret": string(secret)}
	bin, err := filepath.Abs(o.webhookBin)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		return fmt.Errorf("the notify rows need the webhook plugin (make transports): %w", err)
	}
	sum := sha256.Sum256(b)
	plug, err := transport.Launch(ctx, transport.Config{Name: "webhook", Path: bin, SHA256: hex.EncodeToString(sum[:]), Settings: settings})
	if err != nil {
		return err
	}
	defer plug.Close()
	inproc, err := webhook.New(settings, transport.Env{})
	if err != nil {
		return err
	}
	deliver := func(name string, t transport.Transport) contender {
		return contender{name, func(ctx context.Context) error {
			m := transport.Message{IntentID: "call-" + strconv.FormatUint(seq.Add(1), 36), Attempt: 1, Channel: "slack",
				Recipient: plan.Recipient, Parts: plan.Parts()}
			if r := t.Deliver(ctx, m); r.Outcome != transport.Accepted {
				return fmt.Errorf("%s: %s %s", name, r.Outcome, r.Code)
			}
			return nil
		}}
	}
	for _, g := range []int{1, 32} {
		if label := fmt.Sprintf("notify webhook plugin call, %d gor.", g); want(label) {
			row(label, compare(ctx, []contender{deliver("webhook in process", inproc), deliver("webhook plugin", plug)}, g, o.dur, o.slice, o.rounds))
		}
	}
	if snk.bad.Load() > 0 {
		return fmt.Errorf("the sink refused %d deliveries (signature or body)", snk.bad.Load())
	}

	if want("notify end to end") {
		// A store of its own: the dispatcher's group starts at the
		// stream's first entry, and the submit rows left thousands.
		e2e, err := intent.New(rt, intent.Config{Shards: 4, Region: "e2e"})
		if err != nil {
			return err
		}
		if err := endToEnd(ctx, e2e, plan, plug, snk, o.dur); err != nil {
			return err
		}
	}
	fmt.Println(`notify rows: submit = caphost host/notify/intent Submit (notify-submit-v3: dedup record + XADD MAXLEN ~;
  concurrent submits share a pipeline, those of one shard calls of up to four intents) against go-redis XADD MAXLEN ~ of the same encoded plan (no record, no dedup; target ≥ 0.9×, its A/A
  control is XADD against a twin client); webhook plugin call =
  one Deliver of the webhook transport as a go-plugin process (gRPC over a Unix socket) against the same code in
  process, both posting to a local receiver that verifies the signature: the difference is the plugin overhead
  per delivery.`)
	return nil
}

// endToEnd runs 1 and then 32 submitters for dur each; a submitter
// submits, waits until the receiver has the intent, and submits the next
// (closed loop: at most that many notifications in flight, no backlog), so
// the latency from Submit's start to the arrival (p50, p99) is the
// pipeline's own: the submit program, the dispatcher's XREADGROUP, claim,
// the plugin call, the HTTP POST.
func endToEnd(ctx context.Context, store *intent.Store, plan intent.Plan, plug transport.Transport, snk *sink, dur time.Duration) error {
	// An arrival may beat Submit's reply to the submitter: whichever of
	// the two comes second completes the wait.
	var (
		mu      sync.Mutex
		waiting = map[string]chan time.Time{}
		arrived = map[string]time.Time{}
	)
	snk.arrived = func(id string) {
		now := time.Now()
		mu.Lock()
		if ch, ok := waiting[id]; ok {
			ch <- now
			delete(waiting, id)
		} else {
			arrived[id] = now
		}
		mu.Unlock()
	}
	d, err := dispatch.New(store, dispatch.Config{Consumer: "bench", Transports: map[string]transport.Transport{"webhook": plug},
		Concurrency: 64, ReadCount: 16, Block: 20 * time.Millisecond, MinIdle: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	if err := d.Start(); err != nil {
		return err
	}
	defer d.Close(ctx)
	var seq atomic.Uint64
	fmt.Printf("\n%-36s %10s %10s %10s %10s\n", "notify end to end (submit → webhook)", "delivered", "per sec", "p50", "p99")
	for _, g := range []int{1, 32} {
		var (
			lmu    sync.Mutex
			lat    []time.Duration
			failed atomic.Int64
			wg     sync.WaitGroup
		)
		stop := time.Now().Add(dur)
		began := time.Now()
		for range g {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(stop) {
					k := strconv.AppendUint([]byte("e2e-"), seq.Add(1), 36)
					start := time.Now()
					sub, err := store.Submit(ctx, k, plan)
					if err != nil {
						failed.Add(1)
						continue
					}
					ch := make(chan time.Time, 1)
					mu.Lock()
					if t, ok := arrived[string(sub.ID)]; ok {
						ch <- t
						delete(arrived, string(sub.ID))
					} else {
						waiting[string(sub.ID)] = ch
					}
					mu.Unlock()
					select {
					case t := <-ch:
						lmu.Lock()
						lat = append(lat, t.Sub(start))
						lmu.Unlock()
					case <-time.After(10 * time.Second):
						failed.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		took := time.Since(began)
		slices.Sort(lat)
		if len(lat) == 0 {
			return fmt.Errorf("notify end to end: nothing delivered (%d failed)", failed.Load())
		}
		fmt.Printf("%-36s %10d %10.0f %10s %10s", fmt.Sprintf("  %d submitter(s)", g), len(lat), float64(len(lat))/took.Seconds(),
			us(lat[len(lat)/2]), us(lat[len(lat)*99/100]))
		if failed.Load() > 0 {
			fmt.Printf("   (%d failed or undelivered within 10 s)", failed.Load())
		}
		fmt.Println()
	}
	return nil
}

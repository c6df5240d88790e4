package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/notify"
	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/plugins/transport/webhook"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// The notification scene drives the notify capability through replica A's
// sidecar API (POST /v1/notify, GET /v1/notify/{id}) while replicas A and
// B both dispatch, each through its own webhook plugin process, to a
// receiver in this process.
const (
	// envWebhookSecret holds the webhook's HMAC secret: caphost.yaml names
	// it as a secret reference, the receiver checks every signature with it.
	envWebhookSecret = "CAPHOST_DEMO_WEBHOOK_SECRET"
	// envSealKey holds the key that seals intents at rest (caphost.yaml's
	// intents.encryption names it as a secret reference).
	envSealKey = "CAPHOST_DEMO_SEAL_KEY"
	// holdPrefix marks the recipient whose POST the receiver holds open, so
	// the scene can kill the plugins while that call is in flight.
	holdPrefix = "hold@"
	// lostCode is the receipt code of a call whose plugin died after the
	// request may have left it: the intent ends INDETERMINATE, never resent.
	lostCode = "plugin-lost-after-send"
	// notifyBound bounds every wait of the scene.
	notifyBound = 20 * time.Second
)

// errForged marks a request whose Caphost-Signature does not verify.
var errForged = errors.New("forged signature")

// receiver is the endpoint the webhook plugins post to: it verifies every
// request's Caphost-Signature (counting the forged ones) and records each
// document by intent id, so the scene can count deliveries per intent.
type receiver struct {
	secret []byte
	ln     net.Listener
	srv    *http.Server

	mu      sync.Mutex
	docs    map[string][]transport.Document
	forged  int
	entered chan string // the intent id of a held request
}

func startReceiver(secret string) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := newReceiver(secret)
	r.ln = ln
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func newReceiver(secret string) *receiver {
	return &receiver{secret: []byte(secret), docs: map[string][]transport.Document{}, entered: make(chan string, 1)}
}

func (r *receiver) url() string { return "http://" + r.ln.Addr().String() + "/hook" }

func (r *receiver) close() { _ = r.srv.Close() }

// accept checks one request as a webhook receiver must (the signature over
// the exact bytes received, within a minute of this clock), then records
// its document.
func (r *receiver) accept(signature string, body []byte, now time.Time) (transport.Document, error) {
	var doc transport.Document
	if err := webhook.Verify(r.secret, signature, body, now, time.Minute); err != nil {
		r.mu.Lock()
		r.forged++
		r.mu.Unlock()
		return doc, fmt.Errorf("%w: %v", errForged, err)
	}
	if err := json.Unmarshal(body, &doc); err != nil || doc.IntentID == "" {
		return doc, fmt.Errorf("not a delivery document: %v", err)
	}
	r.mu.Lock()
	r.docs[doc.IntentID] = append(r.docs[doc.IntentID], doc)
	r.mu.Unlock()
	return doc, nil
}

// ServeHTTP answers 401 to a forged request, 400 to a signed one that is
// no document, 200 to a delivery, and holds a holdPrefix recipient's
// request until its caller goes away (the plugin is killed mid-call).
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	doc, err := r.accept(req.Header.Get(webhook.SignatureHeader), body, time.Now())
	switch {
	case errors.Is(err, errForged):
		w.WriteHeader(http.StatusUnauthorized)
	case err != nil:
		w.WriteHeader(http.StatusBadRequest)
	case strings.HasPrefix(doc.Recipient, holdPrefix):
		select {
		case r.entered <- doc.IntentID:
		default:
		}
		<-req.Context().Done()
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// got returns the documents received for intent id.
func (r *receiver) got(id string) []transport.Document {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]transport.Document(nil), r.docs[id]...)
}

// tally returns the number of requests per intent id, and of forged ones.
func (r *receiver) tally() (map[string]int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	per := make(map[string]int, len(r.docs))
	for id, ds := range r.docs {
		per[id] = len(ds)
	}
	return per, r.forged
}

// firstLine is the first line of a document's first part, as received.
func firstLine(ds []transport.Document) string {
	if len(ds) == 0 || len(ds[0].Parts) == 0 {
		return ""
	}
	l, _, _ := strings.Cut(ds[0].Parts[0].Body, "\n")
	return l
}

// notification is one POST /v1/notify of template welcome v1 on
// slack.default.
type notification struct{ key, recipient, locale, name string }

// submitted is what the scene reads of POST /v1/notify's answer.
type submitted struct {
	status    int
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
	Locale    string `json:"locale"`
	Code      string `json:"code"`
}

// intentStatus is what the scene reads of GET /v1/notify/{id}.
type intentStatus struct {
	State    string `json:"state"`
	Attempts int    `json:"attempts"`
	Receipts []struct {
		Transport string `json:"transport"`
		Outcome   string `json:"outcome"`
		Code      string `json:"code"`
	} `json:"receipts"`
}

// lastCode is the code of the intent's last receipt.
func (s intentStatus) lastCode() string {
	if len(s.Receipts) == 0 {
		return ""
	}
	return s.Receipts[len(s.Receipts)-1].Code
}

func (d *demo) submitNotification(ctx context.Context, hc *http.Client, n notification) (submitted, error) {
	b, err := json.Marshal(map[string]any{
		"idempotency-key": n.key, "channel": "slack", "recipient": n.recipient, "template": "welcome", "version": 1,
		"locale": n.locale, "params": map[string]string{"name": n.name, "account": "A-" + strings.ToUpper(n.name[:1]) + "1"},
	})
	if err != nil {
		return submitted{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+"/v1/notify", bytes.NewReader(b))
	if err != nil {
		return submitted{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return submitted{}, fmt.Errorf("POST /v1/notify: %w", err)
	}
	defer resp.Body.Close()
	s := submitted{status: resp.StatusCode}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&s); err != nil {
		return s, fmt.Errorf("POST /v1/notify: status %d: %w", resp.StatusCode, err)
	}
	return s, nil
}

// submitNew submits n and requires a new intent (202).
func (d *demo) submitNew(ctx context.Context, hc *http.Client, n notification) (submitted, error) {
	s, err := d.submitNotification(ctx, hc, n)
	if err == nil && (s.status != http.StatusAccepted || s.Duplicate || s.ID == "") {
		err = fmt.Errorf("POST /v1/notify %s: status %d %+v, want 202 and a new intent", n.key, s.status, s)
	}
	return s, err
}

func (d *demo) intentStatus(ctx context.Context, hc *http.Client, id string) (intentStatus, error) {
	var st intentStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/v1/notify/"+id, nil)
	if err != nil {
		return st, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /v1/notify/%s: status %d", short(id), resp.StatusCode)
	}
	return st, json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&st)
}

// awaitState polls GET /v1/notify/{id} until the intent is in state; any
// other final state is an error at once.
func (d *demo) awaitState(ctx context.Context, hc *http.Client, id, state string) (intentStatus, error) {
	final := map[string]bool{"DELIVERED": true, "FAILED": true, "QUARANTINED": true, "INDETERMINATE": true}
	deadline := time.Now().Add(notifyBound)
	for {
		st, err := d.intentStatus(ctx, hc, id)
		switch {
		case err != nil:
			return st, err
		case st.State == state:
			return st, nil
		case final[st.State]:
			return st, fmt.Errorf("intent %s ended %s (%s), want %s", short(id), st.State, st.lastCode(), state)
		case time.Now().After(deadline):
			return st, fmt.Errorf("intent %s still %s after %s, want %s", short(id), st.State, notifyBound, state)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// notifyScene shows, on one screen: welcome v1 rendered by the guest in two
// locales and delivered once each through the webhook plugin; a repeated
// submit that sends nothing; the plugins killed mid-call (that intent ends
// INDETERMINATE, never resent; the relaunched plugins deliver the next);
// and a malformed stream entry quarantined, never sent. Every invariant it
// prints is checked.
func (d *demo) notifyScene(ctx context.Context, cfgPath, redisAddr string, rcv *receiver, plugin string) error {
	start := time.Now()
	d.say("notifications: welcome v1 rendered by the renderer guest, a durable intent on a Redis Stream, sent by the webhook plugin")
	hc := &http.Client{Timeout: 5 * time.Second}
	// Idempotency keys new to every run: a Redis that keeps an earlier
	// run's intents (yours) would answer its keys as duplicates.
	run := randomHex(3)
	ids := map[string]bool{}
	if err := d.notifyLocales(ctx, hc, rcv, run, ids); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if err := d.notifyAtRest(ctx, cfgPath, redisAddr, "ada@example.com", "Hello Ada", "bea@example.com", "Hallo Bea"); err != nil {
		return fmt.Errorf("notify, content at rest: %w", err)
	}
	if err := d.notifyCrash(ctx, hc, rcv, run, plugin, ids); err != nil {
		return fmt.Errorf("notify, transport crash: %w", err)
	}
	if err := d.notifyPoison(ctx, hc, cfgPath, redisAddr, rcv); err != nil {
		return fmt.Errorf("notify, poison message: %w", err)
	}
	// Every intent of this run, and any other the receiver saw (an earlier
	// run's, reclaimed from your Redis), reached it exactly once.
	per, forged := rcv.tally()
	for id := range ids {
		if _, ok := per[id]; !ok {
			per[id] = 0 // never delivered
		}
	}
	requests := 0
	for id, n := range per {
		requests += n
		if n != 1 {
			return fmt.Errorf("notify: intent %s reached the receiver %d times, want 1", short(id), n)
		}
	}
	if forged != 0 {
		return fmt.Errorf("notify: %d requests with a forged signature reached the receiver", forged)
	}
	d.line("receiver    %d intents, %d requests: deliveries per id all 1, forged signatures 0 (scene %s)",
		len(per), requests, time.Since(start).Round(100*time.Millisecond))
	return nil
}

// notifyLocales submits welcome v1 in en-GB and de-AT, each delivered
// once, then repeats the first: a duplicate, nothing sent.
func (d *demo) notifyLocales(ctx context.Context, hc *http.Client, rcv *receiver, run string, ids map[string]bool) error {
	ns := []notification{{"welcome-ada-" + run, "ada@example.com", "en-GB", "Ada"}, {"welcome-bea-" + run, "bea@example.com", "de-AT", "Bea"}}
	var first string
	for i, n := range ns {
		s, err := d.submitNew(ctx, hc, n)
		if err != nil {
			return err
		}
		if _, err := d.awaitState(ctx, hc, s.ID, "DELIVERED"); err != nil {
			return err
		}
		got := rcv.got(s.ID)
		if len(got) != 1 {
			return fmt.Errorf("intent %s: %d requests at the receiver, want 1", short(s.ID), len(got))
		}
		label := "locales"
		if i > 0 {
			label = ""
		}
		d.line("%-11s %-5s -> 202 id %s, rendered %s: DELIVERED, the receiver got %q",
			label, n.locale, short(s.ID), s.Locale, firstLine(got))
		ids[s.ID] = true
		if first == "" {
			first = s.ID
		}
	}
	again, err := d.submitNotification(ctx, hc, ns[0])
	if err != nil {
		return err
	}
	if again.status != http.StatusOK || !again.Duplicate || again.ID != first {
		return fmt.Errorf("the same request again: status %d %+v, want 200, a duplicate of %s", again.status, again, short(first))
	}
	if n := len(rcv.got(first)); n != 1 {
		return fmt.Errorf("intent %s: %d requests at the receiver after the repeat, want 1", short(first), n)
	}
	d.line("duplicate   the same request again -> 200 duplicate of %s: nothing appended, nothing sent", short(again.ID))
	return nil
}

// notifyAtRest reads every intent stream raw, as anything that copies
// Redis would (a snapshot, a replica), and checks that none of the plain
// texts appears: the plans are sealed (intents.encryption).
func (d *demo) notifyAtRest(ctx context.Context, cfgPath, redisAddr string, plain ...string) error {
	streams, _, err := d.notifyStreams(ctx, cfgPath)
	if err != nil {
		return err
	}
	entries, found := 0, 0
	for _, s := range streams {
		n, raw, err := xrangeRaw(redisAddr, d.target.appPass, s)
		if err != nil {
			return err
		}
		entries += n
		for _, p := range plain {
			found += bytes.Count(raw, []byte(p))
		}
	}
	if entries == 0 || found != 0 {
		return fmt.Errorf("%d entries in the intent streams, plain text found %d times, want entries and 0", entries, found)
	}
	d.line("at rest     XRANGE of the %d intent streams: %d entries, recipients and texts found 0 times (sealed, AES-256-GCM)",
		len(streams), entries)
	return nil
}

// notifyCrash: the receiver holds one intent's POST while the scene kills
// every replica's webhook plugin with SIGKILL. That intent ends
// INDETERMINATE after its one attempt and is never sent again (not on this
// transport, not on a fallback); the relaunched plugins deliver the next.
func (d *demo) notifyCrash(ctx context.Context, hc *http.Client, rcv *receiver, run, plugin string, ids map[string]bool) error {
	held, err := d.submitNew(ctx, hc, notification{"welcome-carl-" + run, holdPrefix + "example.com", "en", "Carl"})
	if err != nil {
		return err
	}
	ids[held.ID] = true
	select {
	case id := <-rcv.entered:
		if id != held.ID {
			return fmt.Errorf("the receiver holds intent %s, want %s", short(id), short(held.ID))
		}
	case <-time.After(notifyBound):
		return errors.New("the held intent's POST never reached the receiver")
	case <-ctx.Done():
		return ctx.Err()
	}
	old, err := d.replicaPlugins(plugin)
	if err != nil {
		return err
	}
	for _, pid := range old {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill -9 %d: %w", pid, err)
		}
	}
	st, err := d.awaitState(ctx, hc, held.ID, "INDETERMINATE")
	if err != nil {
		return err
	}
	if st.lastCode() != lostCode {
		return fmt.Errorf("intent %s ended INDETERMINATE with %q, want %q (the call, not the crash, ended it)", short(held.ID), st.lastCode(), lostCode)
	}
	d.line("crash       the receiver holds %s's POST; kill -9 of each replica's webhook plugin (%s)",
		short(held.ID), pidList(old))
	d.line("            -> INDETERMINATE (%s) after %d attempt, no fallback", lostCode, st.Attempts)

	fresh, err := d.awaitRelaunch(ctx, plugin, old)
	if err != nil {
		return err
	}
	next, err := d.submitNew(ctx, hc, notification{"welcome-dora-" + run, "dora@example.com", "de", "Dora"})
	if err != nil {
		return err
	}
	ids[next.ID] = true
	if _, err := d.awaitState(ctx, hc, next.ID, "DELIVERED"); err != nil {
		return err
	}
	// Still final, still one attempt, still one request at the receiver.
	again, err := d.intentStatus(ctx, hc, held.ID)
	if err != nil {
		return err
	}
	if again.State != "INDETERMINATE" || again.Attempts != st.Attempts || len(again.Receipts) != len(st.Receipts) {
		return fmt.Errorf("intent %s moved on after INDETERMINATE: %s, %d attempts", short(held.ID), again.State, again.Attempts)
	}
	for _, r := range again.Receipts {
		if r.Transport != "webhook" {
			return fmt.Errorf("intent %s was sent through %s", short(held.ID), r.Transport)
		}
	}
	if n := len(rcv.got(held.ID)); n != 1 {
		return fmt.Errorf("intent %s reached the receiver %d times, want 1", short(held.ID), n)
	}
	d.line("            relaunched (%s): the next intent DELIVERED; %s still 1 request, never resent",
		pidList(fresh), short(held.ID))
	return nil
}

// notifyPoison appends a malformed entry to shard 0's stream as the demo's
// app user; a dispatcher moves it to the shard's quarantine stream and
// counts it, and nothing reaches the receiver.
func (d *demo) notifyPoison(ctx context.Context, hc *http.Client, cfgPath, redisAddr string, rcv *receiver) error {
	streams, quarantine, err := d.notifyStreams(ctx, cfgPath)
	if err != nil {
		return err
	}
	stream := streams[0]
	rs := d.running()
	metricBefore, err := counters(ctx, hc, rs, "caphost_notify_quarantined_total", `reason="undecodable"`)
	if err != nil {
		return err
	}
	before, err := xrangeCount(redisAddr, d.target.appPass, quarantine)
	if err != nil {
		return err
	}
	perBefore, _ := rcv.tally()
	// The fields of an intent entry (i, p), neither of them valid.
	if _, err := respCommand(redisAddr, d.target.appPass, "XADD", stream, "*", "i", "not-an-intent-id", "p", "\x00garbage"); err != nil {
		return err
	}
	after, quarantined := before, int64(0)
	for deadline := time.Now().Add(notifyBound); ; {
		if after, err = xrangeCount(redisAddr, d.target.appPass, quarantine); err != nil {
			return err
		}
		metricAfter, err := counters(ctx, hc, rs, "caphost_notify_quarantined_total", `reason="undecodable"`)
		if err != nil {
			return err
		}
		quarantined = sum(metricAfter) - sum(metricBefore)
		if (after > before && quarantined > 0) || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if after != before+1 || quarantined != 1 {
		return fmt.Errorf("the malformed entry was not quarantined: quarantine stream %d -> %d entries, "+
			"caphost_notify_quarantined_total{reason=\"undecodable\"} +%d", before, after, quarantined)
	}
	if perAfter, _ := rcv.tally(); len(perAfter) != len(perBefore) {
		return fmt.Errorf("the receiver got %d new intents", len(perAfter)-len(perBefore))
	}
	d.line("poison      XADD of a malformed entry to shard 0's stream (%s): quarantined, never sent", shortKey(stream))
	d.line("            quarantine stream %d -> %d entries; caphost_notify_quarantined_total{reason=\"undecodable\"} +%d",
		before, after, quarantined)
	return nil
}

// shortKey elides the middle of a long key name: its namespace, region
// and kind stay readable.
func shortKey(k string) string {
	parts := strings.Split(k, ":")
	if len(parts) <= 6 {
		return k
	}
	return strings.Join(parts[:5], ":") + ":…:" + parts[len(parts)-1]
}

func sum(vs []int64) int64 {
	var s int64
	for _, v := range vs {
		s += v
	}
	return s
}

// running lists the replicas still running.
func (d *demo) running() []*replica {
	var rs []*replica
	for _, r := range d.replicas {
		if r.cmd != nil {
			rs = append(rs, r)
		}
	}
	return rs
}

// lookupEnv reads the demo's environment as a process started with it
// sees it: a later entry wins.
func (d *demo) lookupEnv(k string) (string, bool) {
	v, ok := "", false
	for _, kv := range d.env {
		if name, val, found := strings.Cut(kv, "="); found && name == k {
			v, ok = val, true
		}
	}
	return v, ok
}

// notifyStreams returns the key names of every shard's stream and of
// shard 0's quarantine stream as the replicas lay them out: from the same configuration, the
// notify block's intents settings and the key namespace.
func (d *demo) notifyStreams(ctx context.Context, cfgPath string) ([]string, string, error) {
	cfg, err := config.Load(ctx, cfgPath, config.WithEnv(d.lookupEnv), config.WithRoles(policy.RoleCoordination))
	if err != nil {
		return nil, "", fmt.Errorf("loading %s: %w", filepath.Base(cfgPath), err)
	}
	c, ok := cfg.Capabilities[notify.CapabilityID]
	if !ok {
		return nil, "", fmt.Errorf("%s has no capabilities.notify", filepath.Base(cfgPath))
	}
	ncfg, err := notify.Decode(c.Provider, c.RedisRole, c.Raw, cfg.Dir)
	if err != nil {
		return nil, "", err
	}
	rt, err := runtime.New(ctx, cfg.Redis, runtime.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, "", err
	}
	defer func() { _ = rt.Close(context.WithoutCancel(ctx)) }()
	st, err := intent.New(rt, ncfg.Intents)
	if err != nil {
		return nil, "", err
	}
	streams := make([]string, st.Shards())
	var quarantine string
	for i := range streams {
		q := ""
		if streams[i], q, err = st.StreamKeys(i); err != nil {
			return nil, "", err
		}
		if i == 0 {
			quarantine = q
		}
	}
	return streams, quarantine, nil
}

// procParent returns a process's parent pid from /proc/<pid>/stat
// ("pid (comm) state ppid ...", where comm may hold spaces and parens).
func procParent(pid int) (int, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, err
	}
	return parseParent(string(b))
}

func parseParent(stat string) (int, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat %q: no comm", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc stat %q: no ppid", stat)
	}
	return strconv.Atoi(f[1])
}

// pluginProcs returns the processes whose executable is exe, each with its
// parent pid; with parents, only the children of those.
func pluginProcs(exe string, parents ...int) map[int]int {
	if real, err := filepath.EvalSymlinks(exe); err == nil {
		exe = real
	}
	out := map[int]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err != nil || t != exe {
			continue
		}
		ppid, err := procParent(pid)
		if err != nil {
			continue // exited meanwhile
		}
		if len(parents) == 0 || slices.Contains(parents, ppid) {
			out[pid] = ppid
		}
	}
	return out
}

// replicaPlugins maps each running replica to the one webhook plugin
// process it launched.
func (d *demo) replicaPlugins(exe string) (map[string]int, error) {
	byParent := map[int]string{}
	var parents []int
	for _, r := range d.running() {
		byParent[r.cmd.Process.Pid] = r.name
		parents = append(parents, r.cmd.Process.Pid)
	}
	out := map[string]int{}
	for pid, ppid := range pluginProcs(exe, parents...) {
		name := byParent[ppid]
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("caphost serve %s runs more than one webhook plugin", name)
		}
		out[name] = pid
	}
	if len(out) != len(parents) {
		return nil, fmt.Errorf("%d webhook plugin processes for %d replicas", len(out), len(parents))
	}
	return out, nil
}

// awaitRelaunch waits until every replica runs a new webhook plugin.
func (d *demo) awaitRelaunch(ctx context.Context, exe string, old map[string]int) (map[string]int, error) {
	deadline := time.Now().Add(notifyBound)
	for {
		now, err := d.replicaPlugins(exe)
		fresh := err == nil
		for name, pid := range now {
			fresh = fresh && pid != old[name]
		}
		if fresh {
			return now, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the webhook plugins were not relaunched within %s (%v)", notifyBound, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// reapPlugins waits for the plugin processes of a killed replica, which
// exit within a second of their parent, and kills any still running: the
// demo leaves nothing behind.
func reapPlugins(exe string) {
	for deadline := time.Now().Add(3 * time.Second); len(pluginProcs(exe)) > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	for pid := range pluginProcs(exe) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// pidList prints replica → pid as "A pid 1, B pid 2".
func pidList(m map[string]int) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s pid %d", n, m[n])
	}
	return strings.Join(parts, ", ")
}

// respCommand sends one command as the demo's app user over RESP and
// returns the first line of the reply (the demo links no Redis client).
func respCommand(addr, pass string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b bytes.Buffer
	for _, cmd := range [][]string{{"AUTH", appUser, pass}, args} {
		fmt.Fprintf(&b, "*%d\r\n", len(cmd))
		for _, a := range cmd {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := c.Write(b.Bytes()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		return "", fmt.Errorf("AUTH as %s: %q %v", appUser, strings.TrimSpace(l), err)
	}
	l, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("%s: %w", args[0], err)
	}
	if l = strings.TrimSpace(l); strings.HasPrefix(l, "-") {
		return "", fmt.Errorf("%s: %s", args[0], l)
	}
	return l, nil
}

// xrangeRaw returns a stream's entry count and its whole XRANGE reply as
// raw RESP bytes (read until the QUIT that follows it closes the
// connection).
func xrangeRaw(addr, pass, key string) (int, []byte, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b bytes.Buffer
	for _, cmd := range [][]string{{"AUTH", appUser, pass}, {"XRANGE", key, "-", "+"}, {"QUIT"}} {
		fmt.Fprintf(&b, "*%d\r\n", len(cmd))
		for _, a := range cmd {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := c.Write(b.Bytes()); err != nil {
		return 0, nil, err
	}
	raw, err := io.ReadAll(io.LimitReader(c, 64<<20))
	if err != nil {
		return 0, nil, err
	}
	auth, rest, _ := bytes.Cut(raw, []byte("\r\n"))
	head, _, _ := bytes.Cut(rest, []byte("\r\n"))
	n, err := strconv.Atoi(strings.TrimPrefix(string(head), "*"))
	if string(auth) != "+OK" || !bytes.HasPrefix(head, []byte("*")) || err != nil {
		return 0, nil, fmt.Errorf("XRANGE %s answered %q", key, head)
	}
	return n, rest, nil
}

// xrangeCount counts a stream's entries with XRANGE key - + (the app user
// may XRANGE, not XLEN): the reply starts *<count>.
func xrangeCount(addr, pass, key string) (int, error) {
	l, err := respCommand(addr, pass, "XRANGE", key, "-", "+")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimPrefix(l, "*"))
	if !strings.HasPrefix(l, "*") || err != nil {
		return 0, fmt.Errorf("XRANGE answered %q", l)
	}
	return n, nil
}

// copyFile copies an executable from src to dst.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o700)
}

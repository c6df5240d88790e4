package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
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

// The notification scene's webhook secret, shared by caphost.yaml (as a
// secret reference) and the demo's receiver.
const envWebhookSecret = "CAPHOST_DEMO_WEBHOOK_SECRET"

// holdPrefix marks the recipient whose delivery the receiver holds open,
// so the scene can kill the plugin while the call is in flight.
const holdPrefix = "hold@"

// receiver is the endpoint the webhook plugin posts to: it checks every
// request's Caphost-Signature and records each document by intent id.
type receiver struct {
	secret  []byte
	ln      net.Listener
	srv     *http.Server
	mu      sync.Mutex
	docs    map[string][]transport.Document
	forged  int
	entered chan string
}

func startReceiver(secret string) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{secret: []byte(secret), ln: ln, docs: map[string][]transport.Document{}, entered: make(chan string, 4)}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) url() string { return "http://" + r.ln.Addr().String() + "/hook" }

func (r *receiver) close() { _ = r.srv.Close() }

// ServeHTTP verifies, records, and answers 200 — except for a holdPrefix
// recipient, held until the caller goes away.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
	if err != nil {
		return
	}
	if webhook.Verify(r.secret, req.Header.Get(webhook.SignatureHeader), body, time.Now(), time.Minute) != nil {
		r.mu.Lock()
		r.forged++
		r.mu.Unlock()
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	var doc transport.Document
	if json.Unmarshal(body, &doc) != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.docs[doc.IntentID] = append(r.docs[doc.IntentID], doc)
	r.mu.Unlock()
	if strings.HasPrefix(doc.Recipient, holdPrefix) {
		r.entered <- doc.IntentID
		<-req.Context().Done() // the plugin is killed mid-call
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (r *receiver) count(id string) (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ds := r.docs[id]
	if len(ds) == 0 || len(ds[0].Parts) == 0 {
		return len(ds), ""
	}
	return len(ds), ds[0].Parts[0].Body
}

// submitted is the part of POST /v1/notify's answer the scene shows.
type submitted struct {
	ID        string `json:"id"`
	Duplicate bool   `json:"duplicate"`
	Locale    string `json:"locale"`
	Code      string `json:"code"`
}

func (d *demo) submitNotification(ctx context.Context, key, recipient, locale, name string) (submitted, int, error) {
	body := fmt.Sprintf(`{"idempotency-key":%q,"channel":"slack","recipient":%q,"template":"welcome","version":1,`+
		`"locale":%q,"params":{"name":%q,"account":"A-%d"}}`, key, recipient, locale, name, len(name))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.base+"/v1/notify", strings.NewReader(body))
	if err != nil {
		return submitted{}, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return submitted{}, 0, err
	}
	defer resp.Body.Close()
	var s submitted
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&s); err != nil {
		return submitted{}, resp.StatusCode, err
	}
	return s, resp.StatusCode, nil
}

// awaitState polls GET /v1/notify/{id} until the intent reaches state and
// returns the code of its last receipt.
func (d *demo) awaitState(ctx context.Context, id, state string) (string, error) {
	var last string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		resp, err := http.Get(d.base + "/v1/notify/" + id)
		if err != nil {
			return "", err
		}
		var st struct {
			State    string `json:"state"`
			Receipts []struct {
				Code string `json:"code"`
			} `json:"receipts"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&st)
		_ = resp.Body.Close()
		if err != nil {
			return "", err
		}
		last = st.State
		if st.State == state {
			if n := len(st.Receipts); n > 0 {
				return st.Receipts[n-1].Code, nil
			}
			return "", nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("intent %s never reached %s (last %s)", short(id), state, last)
}

// pluginPids lists the processes running the demo's copy of the webhook
// plugin (one per replica).
func pluginPids(exe string) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if t, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && t == exe {
			out = append(out, pid)
		}
	}
	return out
}

// notifyScene shows the notify capability through replica A's sidecar API
// (replicas A and B both dispatch): two locales rendered by the guest and
// delivered once each through the webhook plugin, a repeated submit, the
// plugin killed mid-call (INDETERMINATE, never resent; the relaunched
// plugin delivers the next one) and a malformed stream entry quarantined.
func (d *demo) notifyScene(ctx context.Context, cfgPath, redisAddr string, rcv *receiver, plugin string) error {
	d.say("notifications: rendered once by the renderer guest, kept on a Redis Stream, sent by the webhook plugin")
	ids := map[string]string{}
	for _, c := range []struct{ key, rcpt, locale, name string }{
		{"welcome-ada", "ada@example.com", "en-GB", "Ada"}, {"welcome-bea", "bea@example.com", "de-AT", "Bea"},
	} {
		s, code, err := d.submitNotification(ctx, c.key, c.rcpt, c.locale, c.name)
		if err != nil || code != http.StatusAccepted {
			return fmt.Errorf("POST /v1/notify %s: HTTP %d %v", c.key, code, err)
		}
		if _, err := d.awaitState(ctx, s.ID, "DELIVERED"); err != nil {
			return err
		}
		n, body := rcv.count(s.ID)
		if n != 1 {
			return fmt.Errorf("intent %s: %d requests at the receiver, want 1", short(s.ID), n)
		}
		d.line("%-6s → 202 id %s, rendered in %s; DELIVERED, the receiver got %q", c.locale, short(s.ID), s.Locale,
			strings.SplitN(body, "\n", 2)[0])
		ids[c.key] = s.ID
	}
	s, code, err := d.submitNotification(ctx, "welcome-ada", "ada@example.com", "en-GB", "Ada")
	if err != nil || code != http.StatusOK || !s.Duplicate || s.ID != ids["welcome-ada"] {
		return fmt.Errorf("repeated submit: HTTP %d %+v %v, want 200 duplicate of %s", code, s, err, short(ids["welcome-ada"]))
	}
	d.line("the same request again → 200 duplicate, id %s: nothing appended, nothing sent", short(s.ID))

	held, code, err := d.submitNotification(ctx, "welcome-carl", holdPrefix+"example.com", "en", "Carl")
	if err != nil || code != http.StatusAccepted {
		return fmt.Errorf("POST /v1/notify welcome-carl: HTTP %d %v", code, err)
	}
	select {
	case <-rcv.entered:
	case <-time.After(20 * time.Second):
		return errors.New("the held delivery never reached the receiver")
	}
	old := pluginPids(plugin)
	for _, pid := range old {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	rc, err := d.awaitState(ctx, held.ID, "INDETERMINATE")
	if err != nil {
		return err
	}
	d.line("kill -9 of the webhook plugins (pids %v) while %s's call is in flight → INDETERMINATE (%s)", old, short(held.ID), rc)
	if err := awaitRelaunch(ctx, plugin, old); err != nil {
		return err
	}
	next, code, err := d.submitNotification(ctx, "welcome-dora", "dora@example.com", "de", "Dora")
	if err != nil || code != http.StatusAccepted {
		return fmt.Errorf("POST /v1/notify welcome-dora: HTTP %d %v", code, err)
	}
	if _, err := d.awaitState(ctx, next.ID, "DELIVERED"); err != nil {
		return err
	}
	if n, _ := rcv.count(held.ID); n != 1 {
		return fmt.Errorf("the in-flight intent reached the receiver %d times, want 1", n)
	}
	d.line("relaunched (pids %v); the next intent DELIVERED; the killed one reached the receiver once, never resent", pluginPids(plugin))

	stream, quarantine, err := d.notifyStreams(ctx, cfgPath)
	if err != nil {
		return err
	}
	before, err := xrangeCount(redisAddr, d.target.appPass, quarantine)
	if err != nil {
		return err
	}
	if _, err := resp(redisAddr, d.target.appPass, "XADD", stream, "*", "i", "not-an-intent", "p", "garbage"); err != nil {
		return err
	}
	after := before
	for deadline := time.Now().Add(20 * time.Second); after == before && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		if after, err = xrangeCount(redisAddr, d.target.appPass, quarantine); err != nil {
			return err
		}
	}
	if after != before+1 {
		return fmt.Errorf("the malformed entry was not quarantined (%d → %d entries)", before, after)
	}
	q, err := d.quarantinedUndecodable(ctx)
	if err != nil {
		return err
	}
	d.line("poison: a malformed entry XADDed to the shard stream → quarantine stream %d → %d entries, never sent (quarantined{undecodable} %v)",
		before, after, q)
	rcv.mu.Lock()
	intents, reqs, forged := len(rcv.docs), 0, rcv.forged
	for _, ds := range rcv.docs {
		reqs += len(ds)
	}
	rcv.mu.Unlock()
	d.line("receiver: %d intents, %d requests (one each), %d forged signatures", intents, reqs, forged)
	if reqs != intents || forged != 0 {
		return fmt.Errorf("receiver: %d requests for %d intents, %d forged", reqs, intents, forged)
	}
	return nil
}

// awaitRelaunch waits until every replica runs a new plugin process.
func awaitRelaunch(ctx context.Context, plugin string, old []int) error {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		now := pluginPids(plugin)
		fresh := len(now) == len(old)
		for _, p := range now {
			for _, o := range old {
				fresh = fresh && p != o
			}
		}
		if fresh {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
	return errors.New("the webhook plugins were not relaunched within 20s")
}

// notifyStreams returns the Redis key names of shard 0's stream and
// quarantine stream, as the replicas' configuration lays them out.
func (d *demo) notifyStreams(ctx context.Context, cfgPath string) (string, string, error) {
	lookup := func(k string) (string, bool) {
		for _, kv := range d.env {
			if name, v, ok := strings.Cut(kv, "="); ok && name == k {
				return v, true
			}
		}
		return "", false
	}
	cfg, err := config.Load(ctx, cfgPath, config.WithEnv(lookup), config.WithRoles(policy.RoleCoordination))
	if err != nil {
		return "", "", err
	}
	c := cfg.Capabilities[notify.CapabilityID]
	ncfg, err := notify.Decode(c.Provider, c.RedisRole, c.Raw, cfg.Dir)
	if err != nil {
		return "", "", err
	}
	rt, err := runtime.New(ctx, cfg.Redis)
	if err != nil {
		return "", "", err
	}
	defer rt.Close(ctx)
	st, err := intent.New(rt, ncfg.Intents)
	if err != nil {
		return "", "", err
	}
	return st.StreamKeys(0)
}

// quarantinedUndecodable sums caphost_notify_quarantined_total
// {reason="undecodable"} over the replicas' /metrics.
func (d *demo) quarantinedUndecodable(ctx context.Context) (float64, error) {
	var sum float64
	for _, r := range d.replicas {
		if r.cmd == nil {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/metrics", nil)
		if err != nil {
			return 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		sc := bufio.NewScanner(io.LimitReader(resp.Body, 8<<20))
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, `caphost_notify_quarantined_total{reason="undecodable"}`) {
				v, _ := strconv.ParseFloat(strings.TrimSpace(l[strings.LastIndexByte(l, ' '):]), 64)
				sum += v
			}
		}
		_ = resp.Body.Close()
	}
	return sum, nil
}

// resp sends one command as the demo's app user over RESP and returns the
// first line of the reply (the demo links no Redis client).
func resp(addr, pass string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b bytes.Buffer
	write := func(parts ...string) {
		fmt.Fprintf(&b, "*%d\r\n", len(parts))
		for _, p := range parts {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(p), p)
		}
	}
	write("AUTH", appUser, pass)
	write(args...)
	if _, err := c.Write(b.Bytes()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		return "", fmt.Errorf("AUTH as %s: %q %v", appUser, strings.TrimSpace(l), err)
	}
	l, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	l = strings.TrimSpace(l)
	if strings.HasPrefix(l, "-") {
		return "", fmt.Errorf("%s: %s", args[0], l)
	}
	return l, nil
}

// xrangeCount counts a stream's entries with XRANGE key - + (the app user
// may XRANGE, not XLEN), whose reply starts *<count>.
func xrangeCount(addr, pass, key string) (int, error) {
	l, err := resp(addr, pass, "XRANGE", key, "-", "+")
	if err != nil {
		return 0, err
	}
	if !strings.HasPrefix(l, "*") {
		return 0, fmt.Errorf("XRANGE answered %q", l)
	}
	return strconv.Atoi(strings.TrimPrefix(l, "*"))
}

// copyFile copies an executable from src to dst.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o700)
}

package host_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/caphost/caphost/host"
	"github.com/caphost/caphost/host/capability"
	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/httpapi"
	"github.com/caphost/caphost/host/notify"
	"github.com/caphost/caphost/host/notify/intent"
	"github.com/caphost/caphost/host/notify/render"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/plugins/transport"
	"github.com/caphost/caphost/plugins/transport/webhook"
)

// receiver is the webhook endpoint of the notify tests: it checks every
// request's signature and records each document by intent id. It answers
// by recipient: refuse@… gets 503, hold@… is held until the request ends
// (its plugin was killed) or release is closed, anything else 200.
type receiver struct {
	secret  []byte
	srv     *httptest.Server
	mu      sync.Mutex
	docs    map[string][]transport.Document
	forged  int
	entered chan string // intent id of a held request
	release chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	// Text: settings travel as UTF-8 without control characters.
	r := &receiver{secret: []byte(hex.EncodeToString(key)), docs: map[string][]transport.Document{}, entered: make(chan string, 4),
		release: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		close(r.release)
		r.srv.Close()
	})
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
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
	switch {
	case strings.HasPrefix(doc.Recipient, "refuse@"):
		w.WriteHeader(http.StatusServiceUnavailable)
	case strings.HasPrefix(doc.Recipient, "hold@"):
		r.entered <- doc.IntentID
		select {
		case <-req.Context().Done():
		case <-r.release:
		}
	default:
		w.WriteHeader(http.StatusOK)
	}
}

func (r *receiver) deliveries(id string) []transport.Document {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]transport.Document(nil), r.docs[id]...)
}

// buildTransport builds the transport plugin name into dir and returns
// its sha256.
func buildTransport(t *testing.T, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", out, "./plugins/transport/cmd/caphost-transport-"+name)
	cmd.Dir = ".."
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "building the %s transport plugin (needs the go toolchain on PATH): %s", name, b)
	bin, err := os.ReadFile(out)
	require.NoError(t, err)
	sum := sha256.Sum256(bin)
	return hex.EncodeToString(sum[:])
}

// notifyHost starts a host whose notify capability renders with the
// reference renderer guest and delivers through the real webhook plugin
// (a relative binary path and a secret reference, as an operator writes
// them) to rcv.
func notifyHost(t *testing.T, addr string, rcv *receiver) (*host.Host, http.Handler, string) {
	t.Helper()
	return notifyHostIntents(t, addr, rcv, "{shards: 2}", nil)
}

// notifyHostIntents is notifyHost with its intents block and more
// environment variables (for secret references).
func notifyHostIntents(t *testing.T, addr string, rcv *receiver, intents string, vars map[string]string) (*host.Host, http.Handler, string) {
	t.Helper()
	dir := t.TempDir()
	sum := buildTransport(t, dir, "webhook")
	wasm := th.wasm["renderer"]
	require.NoError(t, os.WriteFile(filepath.Join(dir, "renderer.wasm"), wasm, 0o600))
	ws := sha256.Sum256(wasm)
	body := fmt.Sprintf(`redis:
  deployments:
    main:
      standalone: {endpoint: %q}
      auth: {admin-shared: true}
      timeouts: {connect: 500ms, command: 1s, acquire: 500ms, shutdown: 2s}
  roles:
    coordination: {deployment: main, required: true, expected-eviction: noeviction}
  programs: {mode: evalsha-managed}
  keys:
    app: demo
    env: test
    hmac:
      write-version: 1
      versions: {1: "secret://env/HOST_TEST_KEY"}
capabilities:
  notify:
    provider: redis
    redis-role: coordination
    default-locale: en
    intents: %s
    dispatch: {concurrency: 4, min-idle: 8s, reclaim-every: 1s, max-deliveries: 3, attempts-per-transport: 2,
      backoff: {base: 20ms, cap: 100ms}, call-timeout: 5s}
    transports:
      webhook:
        binary: webhook
        sha256: %q
        call-timeout: 4s
        settings: {url: %q, secret: "secret://env/HOST_TEST_WEBHOOK_SECRET"}
    routes:
      slack:
        default: {transports: [webhook]}
        alerts: {transports: [webhook], best-effort: true}
guests:
  compile-cache-dir: %q
  modules:
    renderer: {path: renderer.wasm, sha256: %q, limits: {call-timeout: 2s}}
security:
  allow-unsigned-swaps: true
`, addr, intents, sum, rcv.srv.URL+"/hook", th.cacheDir, hex.EncodeToString(ws[:]))
	path := filepath.Join(dir, "caphost.yaml")
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	env := func(k string) (string, bool) {
		switch k {
		case "HOST_TEST_KEY":
			return hmacKey, true
		case "HOST_TEST_WEBHOOK_SECRET":
			return string(rcv.secret), true
		}
		v, ok := vars[k]
		return v, ok
	}
	cfg, err := config.Load(context.Background(), path, config.WithEnv(env))
	require.NoError(t, err)
	h, logs := startHost(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("host log:\n%s", logs)
		}
	})
	return h, httpapi.New(h, httpapi.Options{}), filepath.Join(dir, "webhook")
}

func welcomeBody(key, recipient, locale, name string) string {
	return fmt.Sprintf(`{"idempotency-key":%q,"channel":"slack","recipient":%q,"template":"welcome","version":1,`+
		`"locale":%q,"params":{"name":%q,"account":"A-1"}}`, key, recipient, locale, name)
}

// awaitState polls GET /v1/notify/{id} until the intent is in state.
func awaitState(t *testing.T, api http.Handler, id, state string) map[string]any {
	t.Helper()
	var got map[string]any
	require.Eventually(t, func() bool {
		code, body := get(t, api, "/v1/notify/"+id)
		require.Equal(t, http.StatusOK, code, body)
		got = nil
		require.NoError(t, json.Unmarshal([]byte(body), &got))
		return got["state"] == state
	}, 30*time.Second, 20*time.Millisecond, "intent %s never reached %s: %v", id, state, got)
	return got
}

// TestNotifyCapability: from a configuration file to a delivered message —
// two locales rendered by the guest, each delivered once through the
// webhook plugin with a valid signature and the intent id; a repeat is a
// duplicate, the key reused for another request a 409; best-effort only
// where the route allows it; render errors typed; metrics and the
// capability's state reported.
func TestNotifyCapability(t *testing.T) {
	srv := redistest.StartStandalone(t)
	rcv := newReceiver(t)
	h, api, _ := notifyHost(t, srv.Addr(), rcv)

	code, en := postJSON(t, api, "/v1/notify", welcomeBody("welcome-ada", "ada@example.com", "en-GB", "Ada"))
	require.Equal(t, http.StatusAccepted, code, en)
	assert.Equal(t, "en", en["locale"], "the host's fallback: en-GB → en")
	assert.Equal(t, "APPLIED", en["certainty"])
	assert.Equal(t, false, en["duplicate"])
	code, de := postJSON(t, api, "/v1/notify", welcomeBody("welcome-bea", "bea@example.com", "de-AT", "Bea"))
	require.Equal(t, http.StatusAccepted, code, de)
	assert.Equal(t, "de", de["locale"])
	enID, deID := en["id"].(string), de["id"].(string)

	for id, want := range map[string]string{enID: "Hello Ada", deID: "Hallo Bea"} {
		st := awaitState(t, api, id, "DELIVERED")
		rs, _ := st["receipts"].([]any)
		require.Len(t, rs, 1)
		assert.Equal(t, "ACCEPTED", rs[0].(map[string]any)["outcome"])
		docs := rcv.deliveries(id)
		require.Len(t, docs, 1, "delivered once")
		assert.Equal(t, "slack", docs[0].Channel)
		require.Len(t, docs[0].Parts, 1)
		assert.Contains(t, docs[0].Parts[0].Body, want)
	}

	code, again := postJSON(t, api, "/v1/notify", welcomeBody("welcome-ada", "ada@example.com", "en-GB", "Ada"))
	assert.Equal(t, http.StatusOK, code, again)
	assert.Equal(t, true, again["duplicate"])
	assert.Equal(t, enID, again["id"])
	code, other := postJSON(t, api, "/v1/notify", welcomeBody("welcome-ada", "ada@example.com", "en-GB", "Eve"))
	assert.Equal(t, http.StatusConflict, code, other)
	assert.Equal(t, "idempotency-key-reused", other["code"])
	assert.Equal(t, enID, other["id"], "the first intent stands")

	// Best-effort: refused on the durable-only route, sent once on alerts.
	be := `{"mode":"best-effort","channel":"slack","route":%q,"recipient":"ops@example.com","template":"welcome","version":1,"locale":"de","params":{"name":"Ops","account":"A-9"}}`
	code, got := postJSON(t, api, "/v1/notify", fmt.Sprintf(be, "default"))
	assert.Equal(t, http.StatusUnprocessableEntity, code, got)
	assert.Equal(t, "best-effort-refused", got["code"])
	code, got = postJSON(t, api, "/v1/notify", fmt.Sprintf(be, "alerts"))
	require.Equal(t, http.StatusOK, code, got)
	assert.Equal(t, "ACCEPTED", got["outcome"])
	assert.Equal(t, "webhook", got["transport"])

	for name, c := range map[string]struct {
		body, code string
	}{
		"unknown template": {strings.Replace(welcomeBody("k1", "a@example.com", "en", "A"), `"welcome"`, `"farewell"`, 1), "render-failed"},
		"unknown version":  {strings.Replace(welcomeBody("k2", "a@example.com", "en", "A"), `"version":1`, `"version":2`, 1), "render-failed"},
		"missing param":    {strings.Replace(welcomeBody("k4", "a@example.com", "en", "A"), `,"account":"A-1"`, ``, 1), "render-failed"},
		"unknown route":    {strings.Replace(welcomeBody("k5", "a@example.com", "en", "A"), `"version":1`, `"version":1,"route":"nope"`, 1), "unknown-route"},
		"channel unrouted": {strings.Replace(welcomeBody("k6", "a@example.com", "en", "A"), `"slack"`, `"email"`, 1), "unknown-route"},
	} {
		code, got := postJSON(t, api, "/v1/notify", c.body)
		assert.Equal(t, http.StatusUnprocessableEntity, code, "%s: %v", name, got)
		assert.Equal(t, c.code, got["code"], name)
	}
	code, body := get(t, api, "/v1/notify/"+strings.Repeat("0", 64))
	assert.Equal(t, http.StatusNotFound, code, body)
	code, body = get(t, api, "/v1/notify/not-an-id")
	assert.Equal(t, http.StatusBadRequest, code, body)

	// The Go API shares the records with the sidecar.
	n, err := h.Notify()
	require.NoError(t, err)
	sub, err := n.Submit(context.Background(), notify.Request{IdempotencyKey: "welcome-ada", Channel: render.Slack,
		Recipient: "ada@example.com", Template: "welcome", Version: 1, Locale: "en-GB",
		Params: []render.Param{render.String("name", "Ada"), render.String("account", "A-1")}})
	require.NoError(t, err)
	assert.True(t, sub.Duplicate)
	assert.Equal(t, intent.ID(enID), sub.ID)

	assert.Empty(t, rcv.forged)
	assert.Len(t, rcv.deliveries(enID), 1, "the duplicates sent nothing")
	reg := h.Registry()
	assert.Equal(t, 2.0, gaugeValue(t, reg, "caphost_notify_intents_total", map[string]string{"outcome": "submitted"}))
	assert.Equal(t, 2.0, gaugeValue(t, reg, "caphost_notify_intents_total", map[string]string{"outcome": "duplicate"}))
	assert.Equal(t, 1.0, gaugeValue(t, reg, "caphost_notify_intents_total", map[string]string{"outcome": "conflict"}))
	assert.Equal(t, 2.0, gaugeValue(t, reg, "caphost_notify_dispatch_total", map[string]string{"transport": "webhook", "outcome": "ACCEPTED"}))
	assert.Equal(t, 2.0, gaugeValue(t, reg, "caphost_notify_final_total", map[string]string{"state": "DELIVERED"}))
	assert.Equal(t, 1.0, gaugeValue(t, reg, "caphost_notify_best_effort_total", map[string]string{"outcome": "ACCEPTED"}))
	assert.Equal(t, 1.0, gaugeValue(t, reg, "caphost_notify_transport_launches_total", map[string]string{"transport": "webhook", "result": "ok"}))
	// The webhook plugin confined itself (this needs a kernel with Landlock
	// ABI 4 or later: files, TCP ports and the socket filter, and user
	// namespaces for its own root), reaches its receiver through the
	// host's connect broker only, and sees no path of the host's.
	assert.GreaterOrEqual(t, gaugeValue(t, reg, "caphost_notify_transport_sandbox", map[string]string{"transport": "webhook", "restricted": "fs,tcp,sockets,hosts,paths"}), 4.0)

	st := statusOf(t, h, notify.CapabilityID)
	assert.Equal(t, capability.StateActive, st.State)
	assert.Equal(t, []string{"renderer"}, st.Guests)
	require.NotNil(t, st.Descriptor)
	assert.Contains(t, st.Descriptor.Guarantees, capability.GuaranteeAtLeastOnceDelivery)
	assert.LessOrEqual(t, st.Readiness, st.Claimed)
}

// TestNotifyPlansSealedAtRest: with intents.encryption configured (key
// material from secret references, a rotation in progress), an intent is
// delivered as usual while nothing Redis holds names its recipient or
// content; a repeat is still recognised.
func TestNotifyPlansSealedAtRest(t *testing.T) {
	srv := redistest.StartStandalone(t)
	rcv := newReceiver(t)
	_, api, _ := notifyHostIntents(t, srv.Addr(), rcv,
		`{shards: 2, encryption: {write-version: 2, versions: {1: "secret://env/SEAL_V1", 2: "secret://env/SEAL_V2"}}}`,
		map[string]string{"SEAL_V1": strings.Repeat("1", 32), "SEAL_V2": strings.Repeat("2", 48)})

	body := welcomeBody("sealed-zora", "zora-7f3q@example.com", "en", "Zorabelle")
	code, first := postJSON(t, api, "/v1/notify", body)
	require.Equal(t, http.StatusAccepted, code, first)
	id := first["id"].(string)
	awaitState(t, api, id, "DELIVERED")
	docs := rcv.deliveries(id)
	require.Len(t, docs, 1)
	assert.Contains(t, docs[0].Parts[0].Body, "Hello Zorabelle")
	code, again := postJSON(t, api, "/v1/notify", body)
	assert.Equal(t, http.StatusOK, code, again)
	assert.Equal(t, true, again["duplicate"])

	ctx := context.Background()
	c := srv.Admin()
	var held strings.Builder
	for _, k := range c.Keys(ctx, "*").Val() {
		switch c.Type(ctx, k).Val() {
		case "stream":
			for _, e := range c.XRange(ctx, k, "-", "+").Val() {
				fmt.Fprint(&held, e.Values)
			}
		case "hash":
			fmt.Fprint(&held, c.HGetAll(ctx, k).Val())
		case "string":
			held.WriteString(c.Get(ctx, k).Val())
		}
	}
	require.Contains(t, held.String(), id, "the scan reads the intent's entry and record")
	for _, leak := range []string{"zora-7f3q", "Zorabelle", "CNIP"} {
		assert.NotContains(t, held.String(), leak, "Redis holds %q in plain text", leak)
	}
}

// TestRepeatAfterRendererSwapReturnsTheFirstIntent: a repeated submit is
// recognised by its request, not by its rendering. After the renderer is
// swapped for an edition without the slack channel, the same request
// can no longer render, yet its repeat still answers the first intent
// (and its reuse with another request the 409), while a new key with
// that request is the render failure it now is.
func TestRepeatAfterRendererSwapReturnsTheFirstIntent(t *testing.T) {
	srv := redistest.StartStandalone(t)
	rcv := newReceiver(t)
	h, api, _ := notifyHost(t, srv.Addr(), rcv)

	code, first := postJSON(t, api, "/v1/notify", welcomeBody("swap-ada", "ada@example.com", "en", "Ada"))
	require.Equal(t, http.StatusAccepted, code, first)
	id := first["id"].(string)
	awaitState(t, api, id, "DELIVERED")

	st, err := h.SwapGuest(context.Background(), "renderer", th.wasm["altrenderer"], nil)
	require.NoError(t, err)
	require.True(t, st.LastSwapOK)

	code, fresh := postJSON(t, api, "/v1/notify", welcomeBody("swap-new", "ada@example.com", "en", "Ada"))
	require.Equal(t, http.StatusUnprocessableEntity, code, "the swapped renderer has no slack channel: %v", fresh)
	assert.Equal(t, "render-failed", fresh["code"])

	code, again := postJSON(t, api, "/v1/notify", welcomeBody("swap-ada", "ada@example.com", "en", "Ada"))
	require.Equal(t, http.StatusOK, code, again)
	assert.Equal(t, true, again["duplicate"])
	assert.Equal(t, id, again["id"])
	assert.Equal(t, "DELIVERED", again["state"])
	assert.Equal(t, "APPLIED", again["certainty"])
	assert.NotContains(t, again, "locale", "nothing was rendered for the repeat")

	code, other := postJSON(t, api, "/v1/notify", welcomeBody("swap-ada", "ada@example.com", "en", "Eve"))
	assert.Equal(t, http.StatusConflict, code, other)
	assert.Equal(t, "idempotency-key-reused", other["code"])
	assert.Equal(t, id, other["id"], "the first intent stands")

	assert.Len(t, rcv.deliveries(id), 1, "the repeats sent nothing")
	reg := h.Registry()
	assert.Equal(t, 1.0, gaugeValue(t, reg, "caphost_notify_intents_total", map[string]string{"outcome": "duplicate"}))
	assert.Equal(t, 1.0, gaugeValue(t, reg, "caphost_notify_intents_total", map[string]string{"outcome": "conflict"}))
	assert.Equal(t, 1.0, gaugeValue(t, reg, "caphost_notify_intents_total", map[string]string{"outcome": "render-failed"}))
}

// TestNotifyCapabilityFailures: a receiver that refuses definitely gets
// the configured attempts and the intent ends FAILED; the plugin killed
// while a call is in flight makes that intent INDETERMINATE with exactly
// one request at the receiver, and the restarted plugin delivers the
// next one; with Redis gone a submit is 503 and nothing is sent.
func TestNotifyCapabilityFailures(t *testing.T) {
	srv := redistest.StartStandalone(t)
	rcv := newReceiver(t)
	h, api, bin := notifyHost(t, srv.Addr(), rcv)

	code, got := postJSON(t, api, "/v1/notify", welcomeBody("refused", "refuse@example.com", "en", "R"))
	require.Equal(t, http.StatusAccepted, code, got)
	refused := got["id"].(string)
	st := awaitState(t, api, refused, "FAILED")
	assert.Len(t, st["receipts"], 2, "attempts-per-transport: 2, no fallback configured")
	assert.Len(t, rcv.deliveries(refused), 2)
	assert.Equal(t, 1.0, gaugeValue(t, h.Registry(), "caphost_notify_retries_total", map[string]string{"transport": "webhook"}))

	code, got = postJSON(t, api, "/v1/notify", welcomeBody("held", "hold@example.com", "en", "H"))
	require.Equal(t, http.StatusAccepted, code, got)
	held := got["id"].(string)
	select {
	case id := <-rcv.entered:
		require.Equal(t, held, id)
	case <-time.After(30 * time.Second):
		t.Fatal("the held delivery never reached the receiver")
	}
	pid := childWithExe(t, bin)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	st = awaitState(t, api, held, "INDETERMINATE")
	assert.Len(t, st["receipts"], 1)
	// The next intent goes to the relaunched plugin (one sent while it is
	// down is a definite rejection, retried: a test with production
	// backoffs would not need the wait).
	require.Eventually(t, func() bool {
		return gaugeValue(t, h.Registry(), "caphost_notify_transport_launches_total", map[string]string{"transport": "webhook", "result": "ok"}) == 2
	}, 30*time.Second, 10*time.Millisecond)
	code, got = postJSON(t, api, "/v1/notify", welcomeBody("after-crash", "carl@example.com", "en", "C"))
	require.Equal(t, http.StatusAccepted, code, got)
	awaitState(t, api, got["id"].(string), "DELIVERED")
	assert.Len(t, rcv.deliveries(held), 1, "an indeterminate send is never repeated")
	assert.GreaterOrEqual(t, gaugeValue(t, h.Registry(), "caphost_notify_transport_restarts_total", map[string]string{"transport": "webhook"}), 1.0)

	srv.Kill()
	code, got = postJSON(t, api, "/v1/notify", welcomeBody("redis-gone", "dora@example.com", "en", "D"))
	assert.Equal(t, http.StatusServiceUnavailable, code, got)
	assert.Contains(t, []any{"unavailable", "indeterminate"}, got["code"])
	assert.Empty(t, rcv.forged)
}

// childWithExe returns the pid of this process's child running exe.
func childWithExe(t *testing.T, exe string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		target, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || target != exe {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(os.Getpid()) {
			return pid
		}
	}
	t.Fatalf("no child process runs %s", exe)
	return 0
}

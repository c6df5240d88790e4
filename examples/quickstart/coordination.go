package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // the fenced scene's protected database

	"github.com/caphost/caphost/host/config"
	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/idempotency"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/host/lease/fenced"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

// The coordination scene runs caphost embedded, as a Go library in the
// demo's own process: the runtime is built from the same caphost.yaml the
// replicas serve (host/config), so it reaches the same Redis as the same
// ACL user (demo-app) under the same key namespace and HMAC material.
const (
	// fencePurpose and fenceAccount name the fenced lease and the protected
	// row: account acct-7 in a SQLite database in the demo's work dir.
	fencePurpose = "payments"
	fenceAccount = "acct-7"
	// staleTTL is worker A's lease; stalePause is how long A "pauses" (a GC
	// pause, a stalled VM) before it writes, well past its lease.
	staleTTL   = 200 * time.Millisecond
	stalePause = 300 * time.Millisecond
	// holderTTL is worker B's lease, long enough for its write.
	holderTTL = 10 * time.Second
	// paymentRoute is the idempotent route's key region.
	paymentRoute = "create-payment"
)

// coordinationScene shows the two coordination primitives a service embeds:
// a fenced lease whose stale holder's late write the protected database
// rejects, and an Idempotency-Key retry answered from the stored response
// without running the action again. cfgPath is replica A's configuration.
func (d *demo) coordinationScene(ctx context.Context, cfgPath string) (err error) {
	d.say("coordination, embedded: caphost as a Go library in this process (runtime from caphost.yaml: user %s, same Redis, same keys)", appUser)
	rt, err := d.embeddedRuntime(ctx, cfgPath)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if cerr := rt.Close(cctx); err == nil && cerr != nil {
			err = fmt.Errorf("closing the embedded runtime: %w", cerr)
		}
	}()
	if err := d.fencedWrites(ctx, rt); err != nil {
		return fmt.Errorf("fenced lease: %w", err)
	}
	if err := d.idempotentRetry(ctx, rt); err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	return nil
}

// embeddedRuntime loads cfgPath as `caphost serve` does, with the demo's
// environment (the passwords and key material are secret://env
// references), and builds the runtime for the coordination role.
func (d *demo) embeddedRuntime(ctx context.Context, cfgPath string) (*runtime.Runtime, error) {
	env := map[string]string{}
	for _, kv := range d.env { // later entries win, as for a process
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err := config.Load(ctx, cfgPath, config.WithEnv(lookup), config.WithRoles(policy.RoleCoordination))
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", filepath.Base(cfgPath), err)
	}
	return runtime.New(ctx, cfg.Redis, runtime.WithLogger(slog.New(slog.DiscardHandler)))
}

// fencedWrites: worker A acquires the fenced lease, pauses past it, B
// acquires and writes, then A's late write is rejected by the database.
func (d *demo) fencedWrites(ctx context.Context, rt *runtime.Runtime) error {
	quiet := fenced.WithLogger(slog.New(slog.DiscardHandler))
	leases, err := fenced.New(rt, fenced.Config{}, quiet)
	if err != nil {
		return err
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(d.work, "bank.db")+"?_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := fence.NewStore(db, fence.SQLite, fence.Strict)
	if err != nil {
		return err
	}
	if err := store.CreateTable(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)`); err != nil {
		return err
	}
	// The account and its PENDING registration commit together; Activate
	// then provisions the Redis counter from the registration.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO accounts VALUES (?, 100)`, fenceAccount); err != nil {
		_ = tx.Rollback()
		return err
	}
	if _, err := store.RegisterTx(ctx, tx, fenceAccount); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	reg, err := leases.Activate(ctx, fencePurpose, store, fenceAccount)
	if err != nil {
		return err
	}
	d.line("fenced lease  %s on %s, a row of SQLite bank.db (fence.Strict): registered, counter provisioned, %s epoch %d",
		fencePurpose, fenceAccount, reg.State, reg.Epoch)

	acquire := func(worker string, ttl time.Duration) (*fenced.Handle, error) {
		a, err := lease.NewAttempt(worker)
		if err != nil {
			return nil, err
		}
		got, err := leases.Acquire(ctx, fenced.Request{Purpose: fencePurpose, Registration: reg, TTL: ttl, Attempt: a})
		if err != nil {
			return nil, err
		}
		if !got.Kind.Held() {
			return nil, fmt.Errorf("%s: acquire answered %s", worker, got.Kind)
		}
		return got.Handle, nil
	}
	write := func(tok fence.Token, balance int) error {
		return store.Write(ctx, fenceAccount, tok, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = ? WHERE id = ?`, balance, fenceAccount)
			return err
		})
	}

	a, err := acquire("worker-a", staleTTL)
	if err != nil {
		return err
	}
	d.line("worker A      ACQUIRED token %s (TTL %s), then pauses %s (a GC pause, a stalled VM): its lease expires",
		a.Token(), staleTTL, stalePause)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(stalePause):
	}
	b, err := acquire("worker-b", holderTTL)
	if err != nil {
		return err
	}
	defer func() { _, _ = b.Release(context.WithoutCancel(ctx)) }()
	if err := write(b.Token(), 70); err != nil {
		return fmt.Errorf("B's write with token %s: %w", b.Token(), err)
	}
	d.line("worker B      ACQUIRED token %s (TTL %s); writes balance 70: committed", b.Token(), holderTTL)
	err = write(a.Token(), 40)
	if !errors.Is(err, fence.ErrStaleToken) {
		return fmt.Errorf("A's late write with token %s: got %v, want %v", a.Token(), err, fence.ErrStaleToken)
	}
	d.line("worker A      wakes, writes balance 40 with token %s: REJECTED", a.Token())
	d.line("              %v", err)
	var balance int
	if err := db.QueryRowContext(ctx, `SELECT balance FROM accounts WHERE id = ?`, fenceAccount).Scan(&balance); err != nil {
		return err
	}
	if balance != 70 {
		return fmt.Errorf("balance %d after the fenced writes, want B's 70", balance)
	}
	d.line("bank.db       %s balance %d: B's write kept, A's never landed", fenceAccount, balance)
	return nil
}

// idempotentRetry serves a "create payment" handler behind the
// idempotency middleware on a loopback listener, and plays a client whose
// first answer is lost, which retries, then reuses the key for another
// payment.
func (d *demo) idempotentRetry(ctx context.Context, rt *runtime.Runtime) error {
	exec, err := idempotency.New(rt, idempotency.Config{ReplayTTL: time.Hour},
		idempotency.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	var charges atomic.Int64
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := charges.Add(1) // the side effect: charge the card
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"payment":"pay-%d","request":%s}`, n, bytes.TrimSpace(body))
	})
	h, err := exec.Middleware(idempotency.MiddlewareConfig{Route: paymentRoute,
		Principal: func(r *http.Request) ([]byte, error) { return []byte(r.Header.Get("X-Tenant")), nil }}, pay)
	if err != nil {
		return err
	}
	// served is signalled once the middleware has finished a request
	// (recorded its outcome), so the simulated drop below is one after
	// the server's work, as a real one the client cannot tell apart.
	served := make(chan struct{}, 4)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		served <- struct{}{}
	})}
	go func() { _ = srv.Serve(l) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 5 * time.Second}

	url := "http://" + l.Addr().String() + "/v1/payments"
	key := fmt.Sprintf("%q", randomHex(16))
	post := func(hc *http.Client, body string) (*http.Response, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Tenant", "shop-7")
		req.Header.Set("Idempotency-Key", key)
		resp, err := hc.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return resp, b, err
	}
	waitServed := func() error {
		select {
		case <-served:
			return nil
		case <-time.After(5 * time.Second):
			return errors.New("the server did not finish the request")
		}
	}
	d.line("idempotency   POST /v1/payments on %s: a handler behind Executor.Middleware (route %s)", l.Addr(), paymentRoute)

	// The first attempt: the server charges and answers; the client's
	// connection drops before it reads the answer.
	const amount = `{"amount_cents":500}`
	lossy := &http.Client{Transport: droppedAnswer{tr}, Timeout: 5 * time.Second}
	_, _, dropped := post(lossy, amount)
	if !errors.Is(dropped, errDropped) {
		return fmt.Errorf("first attempt: got %v, want the simulated drop", dropped)
	}
	if err := waitServed(); err != nil {
		return err
	}
	if n := charges.Load(); n != 1 {
		return fmt.Errorf("%d charges after the first attempt, want 1", n)
	}
	d.line("attempt 1     Idempotency-Key %s, %s: charged (charges 1); the client saw %v", key, amount, errDropped)

	resp, body, err := post(hc, amount)
	if err != nil {
		return err
	}
	if err := waitServed(); err != nil {
		return err
	}
	replayed := resp.Header.Get(idempotency.HeaderReplayed)
	if resp.StatusCode != http.StatusCreated || replayed != "true" || charges.Load() != 1 {
		return fmt.Errorf("retry: %d %s (%s %q), %d charges; want 201, replayed, 1 charge",
			resp.StatusCode, body, idempotency.HeaderReplayed, replayed, charges.Load())
	}
	d.line("retry         same key, same body -> %d %s, %s: %s; charges still %d",
		resp.StatusCode, bytes.TrimSpace(body), idempotency.HeaderReplayed, replayed, charges.Load())

	const other = `{"amount_cents":900}`
	resp, body, err = post(hc, other)
	if err != nil {
		return err
	}
	if err := waitServed(); err != nil {
		return err
	}
	var refusal struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &refusal)
	if resp.StatusCode != http.StatusUnprocessableEntity || charges.Load() != 1 {
		return fmt.Errorf("key reuse: %d %s, %d charges; want 422, 1 charge", resp.StatusCode, body, charges.Load())
	}
	d.line("key reuse     same key, %s -> %d %s; charges still %d", other, resp.StatusCode, refusal.Code, charges.Load())
	return nil
}

// errDropped is the first attempt's simulated network failure.
var errDropped = errors.New("connection reset (simulated)")

// droppedAnswer is a transport whose connection drops once the server has
// answered: the request had its effect, the client never sees the answer.
type droppedAnswer struct{ next http.RoundTripper }

func (t droppedAnswer) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	_ = resp.Body.Close() // unread: the connection is closed, not reused
	return nil, errDropped
}

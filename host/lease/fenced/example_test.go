package fenced_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // the example's protected store

	"github.com/caphost/caphost/host/fence"
	"github.com/caphost/caphost/host/lease"
	"github.com/caphost/caphost/host/lease/fenced"
	"github.com/caphost/caphost/internal/redistest"
	"github.com/caphost/caphost/policy"
	"github.com/caphost/caphost/runtime"
)

func exampleRuntime(ctx context.Context, addr string) (*runtime.Runtime, error) {
	return runtime.New(ctx, redistest.ExampleConfig(addr, policy.RoleCoordination), runtime.WithLogger(slog.New(slog.DiscardHandler)))
}

// A payment worker pauses (GC, a stalled VM) past its lease; another
// worker takes over and writes. When the first one wakes, the protected
// database rejects its write: its fencing token is older.
func ExampleClient_Acquire() {
	addr, stop := redistest.ForExample()
	defer stop()
	ctx := context.Background()
	rt, err := exampleRuntime(ctx, addr)
	if err != nil {
		panic(err)
	}
	defer rt.Close(ctx)
	leases, err := fenced.New(rt, fenced.Config{})
	if err != nil {
		panic(err)
	}

	// The protected resource: a SQL database that checks tokens.
	dir, _ := os.MkdirTemp("", "fenced-example-")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "bank.db")+"?_txlock=immediate")
	defer db.Close()
	store, _ := fence.NewStore(db, fence.SQLite, fence.Strict)
	_ = store.CreateTable(ctx)
	_, _ = db.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, balance INTEGER)`)
	_, _ = db.Exec(`INSERT INTO accounts VALUES ('acct-7', 100)`)
	// Registered when the account is created, then activated (the Redis
	// counter is provisioned from the durable registration).
	_, _ = store.Register(ctx, "acct-7")
	reg, err := leases.Activate(ctx, "payments", store, "acct-7")
	if err != nil {
		panic(err)
	}
	write := func(tok fence.Token, balance int) error {
		return store.Write(ctx, "acct-7", tok, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = ? WHERE id = 'acct-7'`, balance)
			return err
		})
	}
	acquire := func(op string, ttl time.Duration) *fenced.Handle {
		a, _ := lease.NewAttempt(op)
		got, err := leases.Acquire(ctx, fenced.Request{Purpose: "payments", Registration: reg, TTL: ttl, Attempt: a})
		if err != nil || !got.Kind.Held() {
			panic(fmt.Sprint(got.Kind, err))
		}
		return got.Handle
	}

	a := acquire("worker-a", 200*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // worker A pauses past its lease
	b := acquire("worker-b", 10*time.Second)
	fmt.Println("B writes with token", b.Token().Counter, "->", write(b.Token(), 70))
	err = write(a.Token(), 40)
	fmt.Println("A writes with token", a.Token().Counter, "-> stale:", errors.Is(err, fence.ErrStaleToken))
	var balance int
	_ = db.QueryRow(`SELECT balance FROM accounts WHERE id = 'acct-7'`).Scan(&balance)
	fmt.Println("balance:", balance)
	// Output:
	// B writes with token 2 -> <nil>
	// A writes with token 1 -> stale: true
	// balance: 70
}

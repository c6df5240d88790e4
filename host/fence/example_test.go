package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/caphost/caphost/host/fence"
	_ "modernc.org/sqlite"
)

// A Guard protects in-process state: the write runs iff the token is
// admitted, atomically with the watermark advance.
func ExampleGuard() {
	g, err := fence.NewGuard(7, 0, fence.Repeatable)
	if err != nil {
		panic(err)
	}
	var owner string
	write := func(tok fence.Token, who string) {
		err := g.Do(tok, func() error { owner = who; return nil })
		fmt.Printf("%s with %v: %v\n", who, tok, err)
	}
	write(fence.Token{Epoch: 7, Counter: 6}, "B")   // the newer holder
	write(fence.Token{Epoch: 7, Counter: 5}, "A")   // the paused one, late
	write(fence.Token{Epoch: 7, Counter: 6}, "B")   // B again, same lease
	write(fence.Token{Epoch: 8, Counter: 900}, "C") // an unregistered epoch
	fmt.Println("owner:", owner, "watermark:", g.Watermark())
	// Output:
	// B with 7.6: <nil>
	// A with 7.5: fence: stale token: token 7.5 rejected (STALE, registration ACTIVE at 7.6)
	// B with 7.6: <nil>
	// C with 8.900: fence: token epoch not registered: token 8.900 rejected (EPOCH_UNREGISTERED, registration ACTIVE at 7.6)
	// owner: B watermark: 7.6
}

func ExampleGuard_Admit() {
	g, _ := fence.NewGuard(3, 10, fence.Strict)
	for _, c := range []int64{11, 11, 9, 12} {
		fmt.Println(c, g.Admit(fence.Token{Epoch: 3, Counter: c}))
	}
	// Output:
	// 11 ADMITTED
	// 11 STALE
	// 9 STALE
	// 12 ADMITTED
}

func ExampleParseToken() {
	tok, err := fence.ParseToken("7.42")
	fmt.Println(tok.Epoch, tok.Counter, err)
	_, err = fence.ParseToken("7.042")
	fmt.Println(errors.Is(err, fence.ErrSyntax), err)
	_, err = fence.ParseToken("7.9007199254740992")
	fmt.Println(errors.Is(err, fence.ErrRange), err)
	// Output:
	// 7 42 <nil>
	// true fence: malformed token: "7.042"
	// true fence: token out of range: "7.9007199254740992"
}

// Store keeps the registration in the resource's own database and runs the
// protected write in the transaction that advances the watermark.
func ExampleStore() {
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:example?mode=memory&_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	_, err = db.Exec(`CREATE TABLE docs (id TEXT PRIMARY KEY, body TEXT)`)
	if err != nil {
		panic(err)
	}
	store, err := fence.NewStore(db, fence.SQLite, fence.Repeatable)
	if err != nil {
		panic(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		panic(err)
	}

	// Create the resource and its PENDING registration in one transaction.
	tx, _ := db.BeginTx(ctx, nil)
	_, _ = tx.Exec(`INSERT INTO docs VALUES ('doc-1', 'v0')`)
	reg, err := store.RegisterTx(ctx, tx, "doc-1")
	if err != nil {
		panic(err)
	}
	_ = tx.Commit()
	// ... the reconciler provisions the Redis counter with reg.Epoch,
	// reg.Digest and reg.HighWatermark, verifies the receipt, then:
	if err := store.Activate(ctx, "doc-1", reg.Epoch, reg.Digest); err != nil {
		panic(err)
	}

	save := func(tok fence.Token, body string) error {
		return store.Write(ctx, "doc-1", tok, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `UPDATE docs SET body = ? WHERE id = 'doc-1'`, body)
			return err
		})
	}
	a := fence.Token{Epoch: reg.Epoch, Counter: 5} // holder A, then paused
	b := fence.Token{Epoch: reg.Epoch, Counter: 6} // holder B
	fmt.Println("B:", save(b, "from B"))
	err = save(a, "from A")
	fmt.Println("A stale:", errors.Is(err, fence.ErrStaleToken))

	var body string
	_ = db.QueryRow(`SELECT body FROM docs WHERE id = 'doc-1'`).Scan(&body)
	now, _ := store.Lookup(ctx, "doc-1")
	fmt.Println(body, now.State, now.HighWatermark)
	// Output:
	// B: <nil>
	// A stale: true
	// from B ACTIVE 6
}

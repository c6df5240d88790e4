package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// account is the caller's protected table in these tests.
func createAccounts(t *testing.T, tdb testDB) {
	t.Helper()
	_, err := tdb.db.Exec(`CREATE TABLE accounts (id TEXT PRIMARY KEY, value TEXT NOT NULL, fence TEXT NOT NULL)`)
	require.NoError(t, err)
	seq := "INTEGER PRIMARY KEY AUTOINCREMENT"
	if tdb.dialect == PostgreSQL {
		seq = "BIGSERIAL PRIMARY KEY"
	}
	_, err = tdb.db.Exec(`CREATE TABLE audit (seq ` + seq + `, counter BIGINT NOT NULL)`)
	require.NoError(t, err)
	_, err = tdb.db.Exec(tdb.dialect.bind(`INSERT INTO accounts (id, value, fence) VALUES (?, 'initial', '')`), "acct")
	require.NoError(t, err)
}

// accountFixture: a Store, the accounts table and an ACTIVE registration
// for resource "acct".
func accountFixture(t *testing.T, tdb testDB, mode Mode) (*Store, Registration) {
	t.Helper()
	s := newStore(t, tdb, mode)
	createAccounts(t, tdb)
	return s, activeResource(t, s, "acct")
}

// setValue is a protected write: it must run in the admitting transaction.
func setValue(value string, tok Token) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		d := SQLite
		if isPostgres(tx) {
			d = PostgreSQL
		}
		if _, err := tx.ExecContext(ctx, d.bind(`UPDATE accounts SET value = ?, fence = ? WHERE id = 'acct'`), value, tok.String()); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, d.bind(`INSERT INTO audit (counter) VALUES (?)`), tok.Counter)
		return err
	}
}

// isPostgres tells the dialect from inside a transaction (the protected
// write helpers get only the *sql.Tx).
func isPostgres(tx *sql.Tx) bool {
	var v string
	return tx.QueryRow(`SELECT version()`).Scan(&v) == nil && strings.Contains(v, "PostgreSQL")
}

func readAccount(t *testing.T, tdb testDB) (value, fence string) {
	t.Helper()
	require.NoError(t, tdb.db.QueryRow(`SELECT value, fence FROM accounts WHERE id = 'acct'`).Scan(&value, &fence))
	return value, fence
}

func auditLog(t *testing.T, tdb testDB) []int64 {
	t.Helper()
	rows, err := tdb.db.Query(`SELECT counter FROM audit ORDER BY seq`)
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var c int64
		require.NoError(t, rows.Scan(&c))
		out = append(out, c)
	}
	require.NoError(t, rows.Err())
	return out
}

func watermark(t *testing.T, s *Store, resource string) Token {
	t.Helper()
	reg, err := s.Lookup(context.Background(), resource)
	require.NoError(t, err)
	return reg.Watermark()
}

// The key test: holder A gets (e, 5) and pauses; holder B gets (e, 6) and
// writes; A's late write is rejected and the row keeps B's value.
func TestStoreStaleHolderAfterPause(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb testDB) {
		ctx := context.Background()
		s, reg := accountFixture(t, tdb, Repeatable)
		a, b := Token{reg.Epoch, 5}, Token{reg.Epoch, 6}

		require.NoError(t, s.Write(ctx, "acct", b, setValue("B", b)))
		err := s.Write(ctx, "acct", a, setValue("A", a))
		require.ErrorIs(t, err, ErrStaleToken)
		var rej *RejectError
		require.ErrorAs(t, err, &rej)
		assert.Equal(t, RejectError{Resource: "acct", Token: a, Outcome: Stale, State: Active, Watermark: b}, *rej)

		value, fence := readAccount(t, tdb)
		assert.Equal(t, "B", value)
		assert.Equal(t, b.String(), fence)
		assert.Equal(t, b, watermark(t, s, "acct"))
		assert.Equal(t, []int64{6}, auditLog(t, tdb), "A's write was rolled back whole")

		// B writes again under the same lease (Repeatable).
		require.NoError(t, s.Write(ctx, "acct", b, setValue("B2", b)))
		value, _ = readAccount(t, tdb)
		assert.Equal(t, "B2", value)
	})
}

// A is admitted and pauses inside its transaction; B's write must wait for
// it and land after it. Then the mirror case: B is admitted and pauses;
// A's write waits, re-checks the committed watermark and is rejected.
func TestStorePauseInsideTransaction(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb testDB) {
		ctx := context.Background()
		s, reg := accountFixture(t, tdb, Repeatable)
		tok := func(c int64) Token { return Token{reg.Epoch, c} }

		// queueBehind: holder's Write is admitted and pauses inside its
		// transaction; late's Write starts and must not finish while the
		// holder's transaction is open; then the holder commits. It returns
		// both results.
		queueBehind := func(holder Token, holderValue string, late Token, lateValue string) (holderErr, lateErr error) {
			admitted, release, holderDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			go func() {
				holderDone <- s.Write(ctx, "acct", holder, func(ctx context.Context, tx *sql.Tx) error {
					close(admitted)
					<-release
					return setValue(holderValue, holder)(ctx, tx)
				})
			}()
			<-admitted
			lateDone := make(chan error, 1)
			go func() { lateDone <- s.Write(ctx, "acct", late, setValue(lateValue, late)) }()
			select {
			case err := <-lateDone:
				t.Fatalf("the write with %v finished while %v's transaction held the fence: %v", late, holder, err)
			default:
			}
			close(release)
			return <-holderDone, <-lateDone
		}

		// 1. A (5) holds its transaction; B (6) queues behind it and lands
		// after it.
		aErr, bErr := queueBehind(tok(5), "A", tok(6), "B")
		require.NoError(t, aErr)
		require.NoError(t, bErr)
		value, _ := readAccount(t, tdb)
		assert.Equal(t, "B", value)
		assert.Equal(t, []int64{5, 6}, auditLog(t, tdb))

		// 2. B (8) holds its transaction; A (7), late, queues and is then
		// rejected against B's committed watermark.
		bErr, aErr = queueBehind(tok(8), "B8", tok(7), "A7")
		require.NoError(t, bErr)
		require.ErrorIs(t, aErr, ErrStaleToken)
		value, _ = readAccount(t, tdb)
		assert.Equal(t, "B8", value)
		assert.Equal(t, []int64{5, 6, 8}, auditLog(t, tdb))
		assert.Equal(t, tok(8), watermark(t, s, "acct"))
	})
}

func TestStoreLifecycle(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb testDB) {
		ctx := context.Background()
		s := newStore(t, tdb, Repeatable)
		createAccounts(t, tdb)
		noWrite := func(context.Context, *sql.Tx) error { t.Error("a rejected token ran its write"); return nil }

		_, err := s.Lookup(ctx, "acct")
		require.ErrorIs(t, err, ErrUnknownResource)
		require.ErrorIs(t, s.Write(ctx, "acct", Token{1, 1}, noWrite), ErrUnknownResource)

		reg, err := s.Register(ctx, "acct")
		require.NoError(t, err)
		assert.Equal(t, Pending, reg.State)
		assert.NotZero(t, reg.Epoch)
		assert.Zero(t, reg.HighWatermark)
		got, err := s.Lookup(ctx, "acct")
		require.NoError(t, err)
		assert.Equal(t, reg, got)
		_, err = s.Register(ctx, "acct")
		require.ErrorIs(t, err, ErrRegistrationConflict)

		e1 := reg.Epoch
		err = s.Write(ctx, "acct", Token{e1, 1}, noWrite)
		require.ErrorIs(t, err, ErrResourceNotActive, "PENDING: fail closed")
		assert.Equal(t, NotActive, OutcomeOf(err))

		require.ErrorIs(t, s.Activate(ctx, "acct", e1, NewDigest()), ErrRegistrationConflict, "digest must match the receipt")
		require.ErrorIs(t, s.Activate(ctx, "acct", e1+1, reg.Digest), ErrRegistrationConflict)
		require.ErrorIs(t, s.Activate(ctx, "nope", e1, reg.Digest), ErrUnknownResource)
		require.NoError(t, s.Activate(ctx, "acct", e1, reg.Digest))
		require.NoError(t, s.Activate(ctx, "acct", e1, reg.Digest), "a reconciler retry is a no-op")

		require.NoError(t, s.Write(ctx, "acct", Token{e1, 5}, setValue("e1", Token{e1, 5})))
		require.ErrorIs(t, s.Write(ctx, "acct", Token{e1 + 1, 1}, noWrite), ErrEpochUnregistered, "a token never raises the epoch")
		require.ErrorIs(t, s.Write(ctx, "acct", Token{e1 - 1, MaxCounter}, noWrite), ErrEpochRetired)
		require.ErrorIs(t, s.Write(ctx, "acct", Token{e1, 0}, noWrite), ErrRange)
		require.ErrorIs(t, s.Abandon(ctx, "acct", reg.Digest), ErrRegistrationConflict, "an ACTIVE registration is never abandoned")

		// Retirement: a tombstone rejects everything; a re-registration
		// takes a strictly larger epoch and old tokens never pass again.
		require.ErrorIs(t, s.Retire(ctx, "acct", e1+1), ErrRegistrationConflict)
		require.NoError(t, s.Retire(ctx, "acct", e1))
		require.NoError(t, s.Retire(ctx, "acct", e1), "idempotent")
		require.ErrorIs(t, s.Write(ctx, "acct", Token{e1, 6}, noWrite), ErrResourceNotActive)
		require.ErrorIs(t, s.Activate(ctx, "acct", e1, reg.Digest), ErrRegistrationConflict, "RETIRED is final for its epoch")
		retired, err := s.Lookup(ctx, "acct")
		require.NoError(t, err)
		assert.Equal(t, Registration{Resource: "acct", Epoch: e1, Digest: reg.Digest, State: Retired, HighWatermark: 5}, retired)

		_, err = s.Reregister(ctx, "acct", e1+1)
		require.ErrorIs(t, err, ErrRegistrationConflict)
		_, err = s.Reregister(ctx, "nope", e1)
		require.ErrorIs(t, err, ErrUnknownResource)
		reg2, err := s.Reregister(ctx, "acct", e1)
		require.NoError(t, err)
		e2 := reg2.Epoch
		assert.Greater(t, e2, e1)
		assert.NotEqual(t, reg.Digest, reg2.Digest)
		assert.Equal(t, Pending, reg2.State)
		_, err = s.Reregister(ctx, "acct", e1)
		require.ErrorIs(t, err, ErrRegistrationConflict, "only from RETIRED")
		require.ErrorIs(t, s.Write(ctx, "acct", Token{e2, 1}, noWrite), ErrResourceNotActive)
		require.NoError(t, s.Activate(ctx, "acct", e2, reg2.Digest))
		require.NoError(t, s.Write(ctx, "acct", Token{e2, 1}, setValue("e2", Token{e2, 1})))
		require.ErrorIs(t, s.Write(ctx, "acct", Token{e1, MaxCounter}, noWrite), ErrEpochRetired)
		value, _ := readAccount(t, tdb)
		assert.Equal(t, "e2", value)
		assert.Equal(t, []int64{5, 1}, auditLog(t, tdb))

		// Abandon: only a PENDING registration with a matching digest.
		p, err := s.Register(ctx, "other")
		require.NoError(t, err)
		require.ErrorIs(t, s.Abandon(ctx, "other", NewDigest()), ErrRegistrationConflict)
		require.NoError(t, s.Abandon(ctx, "other", p.Digest))
		_, err = s.Lookup(ctx, "other")
		require.ErrorIs(t, err, ErrUnknownResource)
		require.NoError(t, s.Abandon(ctx, "other", p.Digest), "desired-absent repeat")

		// Resource ids are bounded.
		_, err = s.Register(ctx, "")
		require.Error(t, err)
		_, err = s.Register(ctx, strings.Repeat("r", MaxResourceLen+1))
		require.Error(t, err)
		_, err = s.Register(ctx, "\xff")
		require.Error(t, err)
		_, err = s.Register(ctx, strings.Repeat("r", MaxResourceLen))
		require.NoError(t, err)
	})
}

func TestStoreRegisterTxRollsBackWithTheResource(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb testDB) {
		ctx := context.Background()
		s := newStore(t, tdb, Repeatable)
		tx, err := tdb.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		_, err = s.RegisterTx(ctx, tx, "doc-1")
		require.NoError(t, err)
		require.NoError(t, tx.Rollback())
		_, err = s.Lookup(ctx, "doc-1")
		require.ErrorIs(t, err, ErrUnknownResource, "the registration is part of the creating transaction")
	})
}

func TestStoreWriteRollsBackOnError(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb testDB) {
		ctx := context.Background()
		s, reg := accountFixture(t, tdb, Repeatable)
		boom := errors.New("protected write failed")
		err := s.Write(ctx, "acct", Token{reg.Epoch, 9}, func(ctx context.Context, tx *sql.Tx) error {
			if err := setValue("half", Token{reg.Epoch, 9})(ctx, tx); err != nil {
				return err
			}
			return boom
		})
		require.ErrorIs(t, err, boom)
		assert.Equal(t, Token{reg.Epoch, 0}, watermark(t, s, "acct"), "the watermark rolled back with the write")
		value, _ := readAccount(t, tdb)
		assert.Equal(t, "initial", value)

		require.Panics(t, func() {
			_ = s.Write(ctx, "acct", Token{reg.Epoch, 9}, func(ctx context.Context, tx *sql.Tx) error {
				_ = setValue("half", Token{reg.Epoch, 9})(ctx, tx)
				panic("boom")
			})
		})
		assert.Equal(t, Token{reg.Epoch, 0}, watermark(t, s, "acct"))
		value, _ = readAccount(t, tdb)
		assert.Equal(t, "initial", value)
		assert.Empty(t, auditLog(t, tdb))
		// The connection was released: the next write goes through.
		require.NoError(t, s.Write(ctx, "acct", Token{reg.Epoch, 9}, setValue("ok", Token{reg.Epoch, 9})))
	})
}

// AdmitTx in a transaction the caller owns.
func TestStoreAdmitTx(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb testDB) {
		ctx := context.Background()
		s, reg := accountFixture(t, tdb, Strict)
		tk := Token{reg.Epoch, 3}

		tx, err := tdb.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, s.AdmitTx(ctx, tx, "acct", tk))
		require.NoError(t, setValue("caller", tk)(ctx, tx))
		require.NoError(t, tx.Commit())
		assert.Equal(t, tk, watermark(t, s, "acct"))

		// Strict: the same token is not admitted twice.
		tx, err = tdb.db.BeginTx(ctx, nil)
		require.NoError(t, err)
		err = s.AdmitTx(ctx, tx, "acct", tk)
		require.ErrorIs(t, err, ErrStaleToken)
		require.NoError(t, tx.Rollback())
		value, _ := readAccount(t, tdb)
		assert.Equal(t, "caller", value)
	})
}

// Concurrent writers, each with its own counter, all released at once:
// whatever the schedule, the admitted writes commit in increasing counter
// order, the largest counter is always admitted and its value is the one
// left, and every rejection is ErrStaleToken.
func TestStoreConcurrentWriters(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb testDB) {
		const writers = 24
		ctx := context.Background()
		s, reg := accountFixture(t, tdb, Repeatable)
		errs := raceWriters(writers, 7, func(c int64) error {
			tk := Token{reg.Epoch, c}
			return s.Write(ctx, "acct", tk, setValue(fmt.Sprint("w", c), tk))
		})
		log := auditLog(t, tdb) // in commit order
		checkAdmissions(t, errs, log)
		value, fence := readAccount(t, tdb)
		assert.Equal(t, fmt.Sprint("w", writers), value)
		assert.Equal(t, Token{reg.Epoch, writers}.String(), fence)
		assert.Equal(t, Token{reg.Epoch, writers}, watermark(t, s, "acct"))
		t.Logf("%s: %d of %d writers admitted, in order %v", tdb.name, len(log), writers, log)
	})
}

func TestStoreEpochAtTheTop(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb testDB) {
		// Re-registration climbs towards MaxEpoch (the bound the Redis
		// programs accept) and never past it; at the top it is refused.
		ctx := context.Background()
		s := newStore(t, tdb, Repeatable)
		setEpoch := func(resource string, epoch uint64) {
			_, err := tdb.db.Exec(tdb.dialect.bind(`UPDATE `+Table+` SET epoch = ? WHERE resource = ?`), int64(epoch), resource)
			require.NoError(t, err)
		}
		reg := activeResource(t, s, "big")
		assert.LessOrEqual(t, reg.Epoch, uint64(1)<<48, "first epochs leave room below MaxEpoch")
		require.NoError(t, s.Retire(ctx, "big", reg.Epoch))
		setEpoch("big", MaxEpoch-1)
		r2, err := s.Reregister(ctx, "big", MaxEpoch-1)
		require.NoError(t, err)
		assert.Equal(t, MaxEpoch, r2.Epoch)
		require.NoError(t, s.Activate(ctx, "big", r2.Epoch, r2.Digest))
		require.NoError(t, s.Write(ctx, "big", Token{r2.Epoch, 1}, func(context.Context, *sql.Tx) error { return nil }))
		require.ErrorIs(t, s.Write(ctx, "big", Token{MaxEpoch - 1, 2}, func(context.Context, *sql.Tx) error { return nil }), ErrEpochRetired)
		got, err := s.Lookup(ctx, "big")
		require.NoError(t, err)
		assert.Equal(t, Token{r2.Epoch, 1}, got.Watermark())

		require.NoError(t, s.Retire(ctx, "big", r2.Epoch))
		_, err = s.Reregister(ctx, "big", MaxEpoch)
		require.ErrorIs(t, err, ErrEpochExhausted)
	})
}

func TestNewStoreRejects(t *testing.T) {
	db := openSQLite(t)
	_, err := NewStore(nil, SQLite, Repeatable)
	assert.Error(t, err)
	_, err = NewStore(db, Dialect{}, Repeatable)
	assert.Error(t, err)
	_, err = NewStore(db, SQLite, Mode(7))
	assert.Error(t, err)
	assert.Equal(t, "UPDATE t SET a = $1 WHERE b = $2", PostgreSQL.bind("UPDATE t SET a = ? WHERE b = ?"))
	assert.Equal(t, "postgresql", PostgreSQL.String())
	assert.Equal(t, "sqlite", SQLite.String())
}

// Guard and Store apply one rule: over a grid of registrations and tokens
// they reach the same outcome (the Store does not tell Readmitted from
// Admitted) and leave the same watermark.
func TestGuardAndStoreAgree(t *testing.T) {
	eachDB(t, func(t *testing.T, tdb testDB) {
		ctx := context.Background()
		const hwm = 10
		cases := 0
		for _, mode := range []Mode{Repeatable, Strict} {
			s := newStore(t, tdb, mode)
			for _, retired := range []bool{false, true} {
				for de := -1; de <= 1; de++ {
					for _, c := range []int64{0, hwm - 1, hwm, hwm + 1, MaxCounter} {
						resource := fmt.Sprintf("r-%d-%t-%d-%d", mode, retired, de, c)
						reg := activeResource(t, s, resource)
						require.NoError(t, s.Write(ctx, resource, Token{reg.Epoch, hwm}, func(context.Context, *sql.Tx) error { return nil }))
						g, err := NewGuard(reg.Epoch, hwm, mode)
						require.NoError(t, err)
						if retired {
							require.NoError(t, s.Retire(ctx, resource, reg.Epoch))
							require.NoError(t, g.Retire(reg.Epoch))
						}
						tok := Token{uint64(int64(reg.Epoch) + int64(de)), c}

						want := g.Admit(tok)
						if want == Readmitted {
							want = Admitted
						}
						got := Admitted
						if err := s.Write(ctx, resource, tok, func(context.Context, *sql.Tx) error { return nil }); err != nil {
							got = OutcomeOf(err)
							require.ErrorIs(t, err, got.Err())
						}
						require.Equal(t, want, got, "mode %d retired %t token %v over %v", mode, retired, tok, reg.Watermark())
						require.Equal(t, g.Watermark(), watermark(t, s, resource))
						cases++
					}
				}
			}
		}
		require.Equal(t, 60, cases)
	})
}

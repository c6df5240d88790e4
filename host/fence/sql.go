package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Table is the name of the registration table that DDL creates.
const Table = "fence_resources"

// Dialect adapts the helper's SQL to one database: today only the bind
// parameter style differs (the DDL and statements are portable SQL). The
// zero Dialect is invalid; use SQLite or PostgreSQL.
type Dialect struct {
	name   string
	dollar bool // $1, $2, ... instead of ?
}

var (
	// SQLite (3.24 or later: ON CONFLICT DO NOTHING), for example through
	// modernc.org/sqlite. Open it with a busy timeout and immediate
	// transactions (modernc: "_pragma=busy_timeout(10000)&_txlock=immediate")
	// so concurrent writers queue instead of failing with SQLITE_BUSY.
	SQLite = Dialect{name: "sqlite"}
	// PostgreSQL (9.5 or later), for example through pgx's database/sql
	// driver.
	PostgreSQL = Dialect{name: "postgresql", dollar: true}
)

// String returns "sqlite" or "postgresql".
func (d Dialect) String() string { return d.name }

// bind rewrites ? placeholders for the dialect. The statements here hold
// no ? inside string literals.
func (d Dialect) bind(q string) string {
	if !d.dollar {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// DDL returns the statement that creates the registration table if it does
// not exist:
//
//	CREATE TABLE IF NOT EXISTS fence_resources (
//	    resource TEXT   NOT NULL PRIMARY KEY,  -- resource id, 1..255 bytes
//	    epoch    BIGINT NOT NULL,              -- uint64 epoch, stored bit for bit as int64
//	    state    TEXT   NOT NULL,              -- PENDING | ACTIVE | RETIRED
//	    counter  BIGINT NOT NULL,              -- high watermark, 0..2^53-1
//	    digest   TEXT   NOT NULL               -- registration digest, 64 hex digits
//	    -- plus CHECK constraints on each column
//	)
//
// Run it from a migration, or with Store.CreateTable. The helper owns
// the table: protected data lives in the caller's own tables, written in
// the transaction that admitted the token (Store.Write).
func (d Dialect) DDL() string {
	return `CREATE TABLE IF NOT EXISTS ` + Table + ` (
    resource TEXT   NOT NULL PRIMARY KEY CHECK (length(resource) BETWEEN 1 AND ` + strconv.Itoa(MaxResourceLen) + `),
    epoch    BIGINT NOT NULL CHECK (epoch <> 0),
    state    TEXT   NOT NULL CHECK (state IN ('PENDING', 'ACTIVE', 'RETIRED')),
    counter  BIGINT NOT NULL CHECK (counter BETWEEN 0 AND ` + strconv.FormatInt(MaxCounter, 10) + `),
    digest   TEXT   NOT NULL CHECK (length(digest) = 64)
)`
}

// Store is the durable protected side: it keeps each resource's
// Registration in the table of DDL and admits tokens inside the caller's
// transaction with one conditional UPDATE — compare-and-advance of the high
// watermark — so the protected write and the watermark commit or roll back
// together.
//
// # Isolation
//
// The admission UPDATE writes the registration row, so two transactions
// presenting tokens for one resource serialize on it until the first ends,
// and the second re-evaluates its condition against the committed
// watermark. That holds at PostgreSQL's default READ COMMITTED (a blocked
// UPDATE re-checks the updated row) and above (REPEATABLE READ and
// SERIALIZABLE may instead fail with a serialization error, SQLSTATE 40001,
// which the caller retries as a new transaction), and in SQLite, where
// write transactions are serialized whole. Requirements on the caller:
//
//   - The protected write must run in the same transaction, after the
//     admission (Write does both); a write made outside it is not fenced.
//   - Protect only data that belongs to the resource: the fence orders
//     writers of one resource, nothing else.
//   - A Commit error is indeterminate (the write may have landed): read
//     back before concluding anything; never retry with an older token.
//   - Do not lower counter or change epoch/state by hand: the lifecycle
//     methods are the only writers of the table besides admission.
type Store struct {
	db   *sql.DB
	d    Dialect
	mode Mode
	cfg  config

	qSelect, qInsert, qActivate, qRetire, qReregister, qAbandon, qAdmit string
}

// NewStore returns a Store over db in dialect d. It does not touch the
// database; see CreateTable. WithObserver counts its decisions: a token
// the UPDATE admitted is reported Admitted (also an equal one in
// Repeatable mode: telling Readmitted apart would cost a read), and the
// decision is reported before the caller's transaction commits.
func NewStore(db *sql.DB, d Dialect, mode Mode, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, errors.New("fence: nil *sql.DB")
	}
	if d.name == "" {
		return nil, errors.New("fence: zero Dialect (use fence.SQLite or fence.PostgreSQL)")
	}
	if mode != Repeatable && mode != Strict {
		return nil, fmt.Errorf("fence: unknown mode %d", mode)
	}
	cmp := "<="
	if mode == Strict {
		cmp = "<"
	}
	return &Store{
		db: db, d: d, mode: mode, cfg: configOf(opts),
		qSelect:     d.bind(`SELECT epoch, state, counter, digest FROM ` + Table + ` WHERE resource = ?`),
		qInsert:     d.bind(`INSERT INTO ` + Table + ` (resource, epoch, state, counter, digest) VALUES (?, ?, 'PENDING', 0, ?) ON CONFLICT (resource) DO NOTHING`),
		qActivate:   d.bind(`UPDATE ` + Table + ` SET state = 'ACTIVE' WHERE resource = ? AND state = 'PENDING' AND epoch = ? AND digest = ?`),
		qRetire:     d.bind(`UPDATE ` + Table + ` SET state = 'RETIRED' WHERE resource = ? AND state <> 'RETIRED' AND epoch = ?`),
		qReregister: d.bind(`UPDATE ` + Table + ` SET epoch = ?, state = 'PENDING', counter = 0, digest = ? WHERE resource = ? AND state = 'RETIRED' AND epoch = ?`),
		qAbandon:    d.bind(`DELETE FROM ` + Table + ` WHERE resource = ? AND state = 'PENDING' AND counter = 0 AND digest = ?`),
		qAdmit:      d.bind(`UPDATE ` + Table + ` SET counter = ? WHERE resource = ? AND state = 'ACTIVE' AND epoch = ? AND counter ` + cmp + ` ?`),
	}, nil
}

// CreateTable runs the dialect's DDL.
func (s *Store) CreateTable(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, s.d.DDL())
	return err
}

// queryer is what *sql.DB and *sql.Tx have in common.
type queryer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func checkResource(resource string) error {
	if !validResource(resource) {
		return fmt.Errorf("fence: resource id must be 1..%d bytes of UTF-8", MaxResourceLen)
	}
	return nil
}

// Register creates a PENDING registration for resource with a random epoch
// and digest and high watermark 0, in its own transaction. Prefer
// RegisterTx inside the transaction that creates the resource itself.
func (s *Store) Register(ctx context.Context, resource string) (Registration, error) {
	var reg Registration
	err := s.inTx(ctx, func(tx *sql.Tx) (err error) {
		reg, err = s.RegisterTx(ctx, tx, resource)
		return err
	})
	return reg, err
}

// RegisterTx is step 1 of the provisioning protocol: in tx it records a
// PENDING registration with a random epoch and digest and high watermark
// 0. After tx commits, a reconciler provisions the Redis counter with the
// returned epoch, digest and watermark and then calls Activate. A resource
// id that is already registered fails with ErrRegistrationConflict.
func (s *Store) RegisterTx(ctx context.Context, tx *sql.Tx, resource string) (Registration, error) {
	if err := checkResource(resource); err != nil {
		return Registration{}, err
	}
	reg := Registration{Resource: resource, Epoch: firstEpoch(), Digest: NewDigest(), State: Pending}
	res, err := tx.ExecContext(ctx, s.qInsert, resource, int64(reg.Epoch), reg.Digest.String())
	if err != nil {
		return Registration{}, fmt.Errorf("fence: register %q: %w", resource, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Registration{}, err
	} else if n != 1 {
		return Registration{}, fmt.Errorf("%w: resource %q is already registered", ErrRegistrationConflict, resource)
	}
	return reg, nil
}

// Lookup returns the registration of resource, or an error wrapping
// ErrUnknownResource.
func (s *Store) Lookup(ctx context.Context, resource string) (Registration, error) {
	reg, found, err := s.lookup(ctx, s.db, resource)
	if err == nil && !found {
		err = fmt.Errorf("%w: %q", ErrUnknownResource, resource)
	}
	return reg, err
}

func (s *Store) lookup(ctx context.Context, q queryer, resource string) (Registration, bool, error) {
	var (
		epoch, counter int64
		state, digest  string
	)
	err := q.QueryRowContext(ctx, s.qSelect, resource).Scan(&epoch, &state, &counter, &digest)
	if errors.Is(err, sql.ErrNoRows) {
		return Registration{}, false, nil
	}
	if err != nil {
		return Registration{}, false, fmt.Errorf("fence: read registration %q: %w", resource, err)
	}
	reg := Registration{Resource: resource, Epoch: uint64(epoch), HighWatermark: counter}
	var ok bool
	if reg.State, ok = parseState(state); !ok {
		return Registration{}, false, fmt.Errorf("fence: registration %q has state %q", resource, state)
	}
	if reg.Digest, err = ParseDigest(digest); err != nil {
		return Registration{}, false, fmt.Errorf("fence: registration %q: %w", resource, err)
	}
	return reg, true, nil
}

// Activate is step 3 of the provisioning protocol: after the reconciler has
// provisioned the Redis counter and verified its read-back receipt (epoch,
// digest, counter), it moves the registration from PENDING to ACTIVE. The
// epoch and digest must match the PENDING row; repeating a successful
// Activate is a no-op. Anything else is ErrRegistrationConflict (or
// ErrUnknownResource).
func (s *Store) Activate(ctx context.Context, resource string, epoch uint64, digest Digest) error {
	return s.transition(ctx, resource, "activate", s.qActivate, []any{resource, int64(epoch), digest.String()},
		func(r Registration) bool { return r.State == Active && r.Epoch == epoch && r.Digest == digest })
}

// Retire moves the registration at epoch (PENDING or ACTIVE) to RETIRED, a
// durable tombstone: every token is rejected from then on, and the epoch is
// never used again. Drain holders and work before the operator cleans the
// Redis counter up. Retiring a retired epoch again is a no-op; another
// epoch is ErrRegistrationConflict.
func (s *Store) Retire(ctx context.Context, resource string, epoch uint64) error {
	return s.transition(ctx, resource, "retire", s.qRetire, []any{resource, int64(epoch)},
		func(r Registration) bool { return r.State == Retired && r.Epoch == epoch })
}

// Abandon deletes a PENDING registration that has admitted nothing,
// comparing its digest: the rollback of a resource creation, after the
// reconciler compare-deleted any counter it provisioned. An absent
// registration is a no-op; an ACTIVE or RETIRED one, or another digest, is
// ErrRegistrationConflict.
func (s *Store) Abandon(ctx context.Context, resource string, digest Digest) error {
	return s.transition(ctx, resource, "abandon", s.qAbandon, []any{resource, digest.String()}, nil)
}

// transition runs one conditional lifecycle statement; when it changes
// nothing, done reports whether the row already is in the target state
// (an idempotent repeat), and a missing row is ErrUnknownResource (for
// Abandon, success).
func (s *Store) transition(ctx context.Context, resource, what, stmt string, args []any, done func(Registration) bool) error {
	if err := checkResource(resource); err != nil {
		return err
	}
	return s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, stmt, args...)
		if err != nil {
			return fmt.Errorf("fence: %s %q: %w", what, resource, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			return nil
		}
		reg, found, err := s.lookup(ctx, tx, resource)
		switch {
		case err != nil:
			return err
		case !found && done == nil:
			return nil
		case !found:
			return fmt.Errorf("fence: %s: %w: %q", what, ErrUnknownResource, resource)
		case done != nil && done(reg):
			return nil
		}
		return fmt.Errorf("%w: cannot %s %q: it is %v at epoch %d", ErrRegistrationConflict, what, resource, reg.State, reg.Epoch)
	})
}

// Reregister gives a RETIRED resource a new registration: a random epoch
// strictly above the retired one, a new digest, high watermark 0, state
// PENDING; provisioning then proceeds as after RegisterTx. Tokens of the
// retired epoch stay rejected (EpochRetired) forever. retiredEpoch must be
// the current, RETIRED epoch (ErrRegistrationConflict otherwise).
func (s *Store) Reregister(ctx context.Context, resource string, retiredEpoch uint64) (Registration, error) {
	if err := checkResource(resource); err != nil {
		return Registration{}, err
	}
	next, ok := nextEpoch(retiredEpoch)
	if !ok {
		return Registration{}, fmt.Errorf("%w: resource %q at epoch %d", ErrEpochExhausted, resource, retiredEpoch)
	}
	reg := Registration{Resource: resource, Epoch: next, Digest: NewDigest(), State: Pending}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, s.qReregister, int64(reg.Epoch), reg.Digest.String(), resource, int64(retiredEpoch))
		if err != nil {
			return fmt.Errorf("fence: reregister %q: %w", resource, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 1 {
			return nil
		}
		cur, found, err := s.lookup(ctx, tx, resource)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("fence: reregister: %w: %q", ErrUnknownResource, resource)
		}
		return fmt.Errorf("%w: cannot reregister %q from epoch %d: it is %v at epoch %d", ErrRegistrationConflict, resource, retiredEpoch, cur.State, cur.Epoch)
	})
	if err != nil {
		return Registration{}, err
	}
	return reg, nil
}

// AdmitTx admits tok for resource inside the caller's transaction: one
// conditional UPDATE raises the high watermark to tok.Counter iff the
// registration is ACTIVE, its epoch is tok.Epoch and its watermark is at or
// below tok.Counter (strictly below in Strict mode). A rejected token
// returns a *RejectError (errors.Is with ErrStaleToken, ErrEpochRetired,
// ErrEpochUnregistered, ErrResourceNotActive, ErrUnknownResource or
// ErrRange); the caller must then roll tx back and must not write. On
// success the caller performs its protected write in tx and commits; the
// watermark commits with it. See Store for the isolation requirements.
func (s *Store) AdmitTx(ctx context.Context, tx *sql.Tx, resource string, tok Token) error {
	o, err := s.admitTx(ctx, tx, resource, tok)
	if o != 0 {
		s.cfg.observed(o)
	}
	return err
}

// admitTx is AdmitTx without the Observer: the outcome (0 when no
// decision was reached: a bad resource id, a database error) and the
// error.
func (s *Store) admitTx(ctx context.Context, tx *sql.Tx, resource string, tok Token) (Outcome, error) {
	if err := checkResource(resource); err != nil {
		return 0, err
	}
	if tok.Validate() != nil {
		return Invalid, &RejectError{Resource: resource, Token: tok, Outcome: Invalid}
	}
	res, err := tx.ExecContext(ctx, s.qAdmit, tok.Counter, resource, int64(tok.Epoch), tok.Counter)
	if err != nil {
		return 0, fmt.Errorf("fence: admit %v for %q: %w", tok, resource, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	if n == 1 {
		return Admitted, nil
	}
	// Rejected. Read the row in the same transaction to say why.
	reg, found, err := s.lookup(ctx, tx, resource)
	if err != nil {
		return 0, err
	}
	if !found {
		return UnknownResource, &RejectError{Resource: resource, Token: tok, Outcome: UnknownResource}
	}
	o := decide(reg.State, reg.Epoch, reg.HighWatermark, tok, s.mode)
	if o.OK() {
		// The UPDATE saw a registration that rejected the token and a
		// concurrent lifecycle step (Activate) committed before this read:
		// at the moment of the UPDATE the resource was not admitting.
		o = NotActive
	}
	return o, &RejectError{Resource: resource, Token: tok, Outcome: o, State: reg.State, Watermark: reg.Watermark()}
}

// Write runs the caller's protected write under tok in one transaction:
// it begins a transaction, admits tok (AdmitTx), calls fn with the
// transaction, and commits. A rejected token, or an error from fn, rolls
// everything back — the protected write and the watermark — and is
// returned as is. fn must do all its writes through tx and must not commit
// or roll back.
func (s *Store) Write(ctx context.Context, resource string, tok Token, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.inTx(ctx, func(tx *sql.Tx) error {
		if err := s.AdmitTx(ctx, tx, resource, tok); err != nil {
			return err
		}
		return fn(ctx, tx)
	})
}

// inTx runs fn in a transaction, committing iff fn returns nil.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) (err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fence: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed { // an error, or a panic in fn
			_ = tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	committed = true
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("fence: commit (outcome unknown): %w", err)
	}
	return nil
}

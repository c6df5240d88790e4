package fence

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL driver "pgx", tests only
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // pure-Go SQLite driver "sqlite", tests only
)

// The machine (and CI) runs PostgreSQL on 127.0.0.1:5432 with trust auth.
// The tests create a private database per run, one schema per test in it,
// and drop the database at the end; they never touch another database. A
// missing server fails the tests: nothing is skipped.
const pgServer = "postgres://postgres@127.0.0.1:5432/"

func postgresAdminURL() string { return pgServer + "postgres?sslmode=disable" }

var pgRun struct {
	name   string // private database of this test run
	base   string // its connection URL
	err    error
	create bool
}

func TestMain(m *testing.M) {
	code := m.Run()
	if pgRun.create {
		if err := dropPrivateDatabase(); err != nil {
			fmt.Fprintln(os.Stderr, "fence tests: drop private database:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// privateDatabase creates this run's database on first use.
func privateDatabase(t testing.TB) string {
	t.Helper()
	if !pgRun.create && pgRun.err == nil {
		pgRun.create = true
		pgRun.name = "caphost_fence_test_" + randomHex(6)
		admin, err := sql.Open("pgx", postgresAdminURL())
		if err == nil {
			_, err = admin.ExecContext(context.Background(), "CREATE DATABASE "+pgRun.name)
			_ = admin.Close()
		}
		if err != nil {
			pgRun.create = false
			pgRun.err = fmt.Errorf("create private database on %s: %w", postgresAdminURL(), err)
		}
		pgRun.base = pgServer + pgRun.name + "?sslmode=disable"
	}
	require.NoError(t, pgRun.err, "PostgreSQL on 127.0.0.1:5432 with trust auth is a prerequisite of these tests: "+
		"apt-get install -y postgresql, then pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start")
	return pgRun.base
}

func dropPrivateDatabase() error {
	admin, err := sql.Open("pgx", postgresAdminURL())
	if err != nil {
		return err
	}
	defer admin.Close()
	_, err = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+pgRun.name+" WITH (FORCE)")
	return err
}

// testDB is one real database for one test: a fresh SQLite file, or a
// fresh schema in this run's PostgreSQL database.
type testDB struct {
	name    string
	db      *sql.DB
	dialect Dialect
}

func openSQLite(t testing.TB) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fence.db")
	// Immediate transactions plus a busy timeout make concurrent writers
	// queue on the database lock instead of failing with SQLITE_BUSY.
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping())
	return db
}

func openPostgres(t testing.TB) *sql.DB {
	t.Helper()
	base := privateDatabase(t)
	schema := "t_" + randomHex(6)
	ctx := context.Background()
	setup, err := sql.Open("pgx", base)
	require.NoError(t, err)
	_, err = setup.ExecContext(ctx, "CREATE SCHEMA "+schema)
	_ = setup.Close()
	require.NoError(t, err)
	db, err := sql.Open("pgx", base+"&search_path="+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	require.NoError(t, db.Ping())
	return db
}

// eachDB runs fn once per dialect against a real database.
func eachDB(t *testing.T, fn func(t *testing.T, tdb testDB)) {
	t.Run("sqlite", func(t *testing.T) {
		fn(t, testDB{"sqlite", openSQLite(t), SQLite})
	})
	t.Run("postgresql", func(t *testing.T) {
		fn(t, testDB{"postgresql", openPostgres(t), PostgreSQL})
	})
}

// newStore creates the registration table and a Store over it.
func newStore(t *testing.T, tdb testDB, mode Mode) *Store {
	t.Helper()
	s, err := NewStore(tdb.db, tdb.dialect, mode)
	require.NoError(t, err)
	require.NoError(t, s.CreateTable(context.Background()))
	require.NoError(t, s.CreateTable(context.Background()), "DDL is idempotent")
	return s
}

// activeResource registers and activates resource, as the reconciler
// would after provisioning the Redis counter.
func activeResource(t *testing.T, s *Store, resource string) Registration {
	t.Helper()
	ctx := context.Background()
	reg, err := s.Register(ctx, resource)
	require.NoError(t, err)
	require.NoError(t, s.Activate(ctx, resource, reg.Epoch, reg.Digest))
	reg.State = Active
	return reg
}

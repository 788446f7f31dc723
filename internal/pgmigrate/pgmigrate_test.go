package pgmigrate_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sluicegw/sluice/internal/pgmigrate"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// migs is a component's history. Each migration logs itself in applied,
// and those after the first create a table without IF NOT EXISTS, so one
// run twice fails or is counted twice.
var migs = []pgmigrate.Migration{
	{Version: 1, Name: "applied log", SQL: `CREATE TABLE applied (version int NOT NULL); INSERT INTO applied VALUES (1);`},
	{Version: 2, Name: "items", SQL: `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL); INSERT INTO applied VALUES (2);`},
	{Version: 3, Name: "notes", SQL: `CREATE TABLE notes (id int); INSERT INTO applied VALUES (3);`},
}

func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		migs []pgmigrate.Migration
		want string // "" for valid
	}{
		{"none", nil, ""},
		{"all", migs, ""},
		{"index only", []pgmigrate.Migration{{Version: 1, Name: "i", Concurrently: []string{
			`create unique index concurrently if not exists "i x" on public.t using btree (x)`,
		}}}, ""},
		{"from zero", []pgmigrate.Migration{{Version: 0, Name: "a", SQL: "SELECT 1"}}, "migrations[0] (a): version 0, want 1"},
		{"gap", []pgmigrate.Migration{migs[0], migs[2]}, "migrations[1] (notes): version 3, want 2"},
		{"empty", []pgmigrate.Migration{{Version: 1, Name: "a", SQL: " \n"}}, "migrations[0] (a): no SQL and no index to build"},
		{"not concurrently", []pgmigrate.Migration{{Version: 1, Name: "a", Concurrently: []string{"CREATE INDEX IF NOT EXISTS i ON t (x)"}}},
			"migrations[0] (a).concurrently[0]: want CREATE [UNIQUE] INDEX CONCURRENTLY IF NOT EXISTS"},
		{"no if not exists", []pgmigrate.Migration{{Version: 1, Name: "a", Concurrently: []string{"CREATE INDEX CONCURRENTLY i ON t (x)"}}},
			"migrations[0] (a).concurrently[0]: want"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pgmigrate.Validate(tt.migs)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate = %v; want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %v; want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestMigrateFresh: a new database is brought to the newest version, and
// migrating again does nothing.
func TestMigrateFresh(t *testing.T) {
	ctx := testctx.Deadline(t)
	p := newPool(t, pgtest.Database(t))
	from, to, err := pgmigrate.Migrate(ctx, p, "thing", migs, testenv.Quiet())
	if err != nil || from != 0 || to != 3 {
		t.Fatalf("Migrate = %d, %d, %v; want 0, 3, nil", from, to, err)
	}
	from, to, err = pgmigrate.Migrate(ctx, p, "thing", migs, nil)
	if err != nil || from != 3 || to != 3 {
		t.Fatalf("Migrate again = %d, %d, %v; want 3, 3, nil", from, to, err)
	}
	assertApplied(t, p, "1,2,3")
	if have, want, err := pgmigrate.Check(ctx, p, "thing", migs); err != nil || have != 3 || want != 3 {
		t.Errorf("Check = %d, %d, %v; want 3, 3, nil", have, want, err)
	}
	// Another component starts from its own version 0.
	if have, _, err := pgmigrate.Check(ctx, p, "other", migs[:1]); have != 0 || !errors.Is(err, pgmigrate.ErrTooOld) {
		t.Errorf("Check(other) = %d, %v; want 0, ErrTooOld", have, err)
	}
	var updated bool
	if err := p.QueryRow(ctx, `SELECT updated_at > now() - interval '1 hour' FROM sluice_schema WHERE component = 'thing'`).Scan(&updated); err != nil || !updated {
		t.Errorf("sluice_schema.updated_at recent: %v, %v", updated, err)
	}
}

// TestMigrateStepwise: a database at an older version gets only what is
// pending.
func TestMigrateStepwise(t *testing.T) {
	ctx := testctx.Deadline(t)
	p := newPool(t, pgtest.Database(t))
	if _, _, err := pgmigrate.Migrate(ctx, p, "thing", migs[:1], nil); err != nil {
		t.Fatal(err)
	}
	from, to, err := pgmigrate.Migrate(ctx, p, "thing", migs, nil)
	if err != nil || from != 1 || to != 3 {
		t.Fatalf("Migrate = %d, %d, %v; want 1, 3, nil", from, to, err)
	}
	assertApplied(t, p, "1,2,3")
}

// TestMigrateConcurrent: migrators on separate pools queue on the lock;
// one applies everything, once, and the others find nothing to do. Two
// components migrate a new database at once too.
func TestMigrateConcurrent(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := pgtest.Database(t)
	const n = 10
	type result struct{ from, to int }
	results := make([]result, n)
	errs := make([]error, n+1)
	pools := make([]*pgxpool.Pool, n+1)
	for i := range pools {
		pools[i] = newPool(t, url)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var r result
			r.from, r.to, errs[i] = pgmigrate.Migrate(ctx, pools[i], "thing", migs, testenv.Quiet())
			results[i] = r
		})
	}
	wg.Go(func() {
		_, _, errs[n] = pgmigrate.Migrate(ctx, pools[n], "other", []pgmigrate.Migration{
			{Version: 1, Name: "other", SQL: "CREATE TABLE other (x int)"},
		}, nil)
	})
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	count := map[result]int{}
	for _, r := range results {
		count[r]++
	}
	if count[result{0, 3}] != 1 || count[result{3, 3}] != n-1 {
		t.Errorf("results %v; want one 0→3 and %d 3→3", results, n-1)
	}
	assertApplied(t, pools[0], "1,2,3")
}

// TestTooNew: a schema newer than the code knows is refused by Migrate
// and Check, naming both versions, and left as it is.
func TestTooNew(t *testing.T) {
	ctx := testctx.Deadline(t)
	p := newPool(t, pgtest.Database(t))
	if _, _, err := pgmigrate.Migrate(ctx, p, "thing", migs, nil); err != nil {
		t.Fatal(err)
	}
	want := "thing schema version 3 is newer than this sluice knows (2); upgrade sluice"
	from, to, err := pgmigrate.Migrate(ctx, p, "thing", migs[:2], nil)
	if !errors.Is(err, pgmigrate.ErrTooNew) || !strings.Contains(err.Error(), want) || from != 3 || to != 3 {
		t.Errorf("Migrate = %d, %d, %v; want 3, 3 and %q", from, to, err, want)
	}
	have, wantV, err := pgmigrate.Check(ctx, p, "thing", migs[:2])
	var ve *pgmigrate.VersionError
	if !errors.As(err, &ve) || !errors.Is(err, pgmigrate.ErrTooNew) || err.Error() != want || have != 3 || wantV != 2 {
		t.Errorf("Check = %d, %d, %v; want 3, 2, %q", have, wantV, err, want)
	}
	assertApplied(t, p, "1,2,3")
}

// TestTooOld: Check reports a schema older than needed, saying what makes
// it current; a database never migrated is at version 0.
func TestTooOld(t *testing.T) {
	ctx := testctx.Deadline(t)
	p := newPool(t, pgtest.Database(t))
	have, want, err := pgmigrate.Check(ctx, p, "thing", migs)
	if !errors.Is(err, pgmigrate.ErrTooOld) || have != 0 || want != 3 {
		t.Errorf("Check(new database) = %d, %d, %v; want 0, 3, ErrTooOld", have, want, err)
	}
	if _, _, err := pgmigrate.Migrate(ctx, p, "thing", migs[:2], nil); err != nil {
		t.Fatal(err)
	}
	have, want, err = pgmigrate.Check(ctx, p, "thing", migs)
	msg := "thing schema version 2 is older than this sluice needs (3); run `sluice migrate`"
	if !errors.Is(err, pgmigrate.ErrTooOld) || err.Error() != msg || have != 2 || want != 3 {
		t.Errorf("Check = %d, %d, %v; want 2, 3, %q", have, want, err, msg)
	}
}

// TestFailedMigrationRollsBack: a migration that fails leaves nothing of
// itself or of the migrations applied before it in the same run.
func TestFailedMigrationRollsBack(t *testing.T) {
	ctx := testctx.Deadline(t)
	p := newPool(t, pgtest.Database(t))
	if _, _, err := pgmigrate.Migrate(ctx, p, "thing", migs[:1], nil); err != nil {
		t.Fatal(err)
	}
	bad := append(migs[:2:2], pgmigrate.Migration{Version: 3, Name: "broken", SQL: `CREATE TABLE broken (x int); SELECT 1/0;`})
	from, to, err := pgmigrate.Migrate(ctx, p, "thing", bad, nil)
	if err == nil || !strings.Contains(err.Error(), "migrate thing to version 3 (broken)") || !strings.Contains(err.Error(), "division by zero") {
		t.Fatalf("Migrate = %v; want the failure of version 3", err)
	}
	if from != 1 || to != 1 {
		t.Errorf("Migrate = %d, %d; want 1, 1", from, to)
	}
	assertVersion(t, p, "thing", 1)
	assertApplied(t, p, "1")
	for _, table := range []string{"items", "broken"} {
		if exists(t, p, table) {
			t.Errorf("table %s exists after the failed migration", table)
		}
	}
}

// TestConcurrentlyHoldsLock: an index on a table with rows is built
// concurrently while the migrator holds its lock: a second migrator
// started during the build waits, then finds nothing to do.
func TestConcurrentlyHoldsLock(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := pgtest.Database(t)
	p := newPool(t, url)
	if _, _, err := pgmigrate.Migrate(ctx, p, "thing", migs[:2], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, `INSERT INTO items SELECT i, i % 7 FROM generate_series(1, 10000) i`); err != nil {
		t.Fatal(err)
	}
	withIndex := append(migs[:2:2], pgmigrate.Migration{Version: 3, Name: "items by v",
		Concurrently: []string{"CREATE INDEX CONCURRENTLY IF NOT EXISTS items_v ON items (v)"}})

	// A writer that has not committed holds the build at its start, so
	// that the second migrator certainly arrives during it.
	writer, err := p.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(context.Background())
	if _, err := writer.Exec(ctx, `INSERT INTO items VALUES (0, 0)`); err != nil {
		t.Fatal(err)
	}

	type result struct {
		from, to int
		err      error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	p1, p2 := newPool(t, url), newPool(t, url)
	go func() {
		from, to, err := pgmigrate.Migrate(ctx, p1, "thing", withIndex, nil)
		first <- result{from, to, err}
	}()
	testctx.Wait(t, "the concurrent build to start", func() bool {
		var n int
		err := p.QueryRow(ctx, `SELECT count(*) FROM pg_stat_progress_create_index
			WHERE relid = 'items'::regclass AND command = 'CREATE INDEX CONCURRENTLY'`).Scan(&n)
		return err == nil && n == 1
	})
	// The migration transaction waits idle with no snapshot, which the
	// build would otherwise wait for.
	var idle, xmin int
	err = p.QueryRow(ctx, `SELECT count(*), count(backend_xmin) FROM pg_stat_activity
		WHERE datname = current_database() AND state = 'idle in transaction' AND pid <> $1`, writer.Conn().PgConn().PID()).Scan(&idle, &xmin)
	if err != nil || idle != 1 || xmin != 0 {
		t.Errorf("%d transactions idle, %d of them with a snapshot (%v); want 1, 0", idle, xmin, err)
	}
	waiting := make(chan string, 1)
	go func() {
		log := slog.New(msgHandler{waiting})
		from, to, err := pgmigrate.Migrate(ctx, p2, "thing", withIndex, log)
		second <- result{from, to, err}
	}()
	if msg := testctx.Receive(t, "the second migrator to wait", waiting); msg != "waiting for another migrator to finish" {
		t.Fatalf("second migrator logged %q first", msg)
	}
	select {
	case r := <-first:
		t.Fatalf("first migrator returned %+v while the build was held", r)
	default:
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := testctx.Receive(t, "the first migrator", first); r != (result{2, 3, nil}) {
		t.Errorf("first Migrate = %+v; want 2, 3", r)
	}
	if r := testctx.Receive(t, "the second migrator", second); r != (result{3, 3, nil}) {
		t.Errorf("second Migrate = %+v; want 3, 3 (nothing left to do)", r)
	}
	assertValidIndex(t, p, "items_v")
	assertVersion(t, p, "thing", 3)
}

// TestConcurrentlyOnNewTable: when the migration transaction has taken
// write locks (here it created the table, on a new database, which no
// other connection can see yet), the index is built inside it.
func TestConcurrentlyOnNewTable(t *testing.T) {
	ctx := testctx.Deadline(t)
	p := newPool(t, pgtest.Database(t))
	withIndex := append(migs[:2:2], pgmigrate.Migration{Version: 3, Name: "items by v",
		SQL:          `INSERT INTO items VALUES (1, 1), (2, 1)`,
		Concurrently: []string{"CREATE INDEX CONCURRENTLY IF NOT EXISTS items_v ON items (v)"}})
	from, to, err := pgmigrate.Migrate(ctx, p, "thing", withIndex, nil)
	if err != nil || from != 0 || to != 3 {
		t.Fatalf("Migrate = %d, %d, %v; want 0, 3, nil", from, to, err)
	}
	assertValidIndex(t, p, "items_v")
}

// TestConcurrentlyFails: a concurrent build that fails drops the INVALID
// index it left and rolls the migration back.
func TestConcurrentlyFails(t *testing.T) {
	ctx := testctx.Deadline(t)
	p := newPool(t, pgtest.Database(t))
	if _, _, err := pgmigrate.Migrate(ctx, p, "thing", migs[:2], nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Exec(ctx, `INSERT INTO items VALUES (1, 5), (2, 5)`); err != nil {
		t.Fatal(err)
	}
	unique := append(migs[:2:2], pgmigrate.Migration{Version: 3, Name: "unique v",
		Concurrently: []string{"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS items_v ON items (v)"}})
	_, _, err := pgmigrate.Migrate(ctx, p, "thing", unique, nil)
	if err == nil || !strings.Contains(err.Error(), "the invalid index it left was dropped") {
		t.Fatalf("Migrate = %v; want the failed build, its index dropped", err)
	}
	assertVersion(t, p, "thing", 2)
	if exists(t, p, "items_v") {
		t.Errorf("items_v exists after the failed migration")
	}
	var invalid int
	if err := p.QueryRow(ctx, `SELECT count(*) FROM pg_index WHERE NOT indisvalid`).Scan(&invalid); err != nil || invalid != 0 {
		t.Errorf("%d invalid indexes (%v); want none", invalid, err)
	}

	// An INVALID index left behind by a build that was interrupted is
	// rebuilt, not skipped by IF NOT EXISTS.
	_, err = p.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY items_v ON items (v)`)
	if err == nil {
		t.Fatal("a unique index on duplicates was built")
	}
	if _, err := p.Exec(ctx, `DELETE FROM items WHERE id = 2`); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pgmigrate.Migrate(ctx, p, "thing", unique, nil); err != nil {
		t.Fatal(err)
	}
	assertValidIndex(t, p, "items_v")
}

// msgHandler sends each record's message to ch, dropping it when ch is
// full.
type msgHandler struct{ ch chan string }

func (h msgHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h msgHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h.ch <- r.Message:
	default:
	}
	return nil
}
func (h msgHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h msgHandler) WithGroup(string) slog.Handler      { return h }

func assertApplied(t *testing.T, p *pgxpool.Pool, want string) {
	t.Helper()
	var got string
	if err := p.QueryRow(t.Context(), `SELECT string_agg(version::text, ',' ORDER BY version) FROM applied`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("applied migrations %s; want %s", got, want)
	}
}

func assertVersion(t *testing.T, p *pgxpool.Pool, component string, want int) {
	t.Helper()
	var got int
	if err := p.QueryRow(t.Context(), `SELECT version FROM sluice_schema WHERE component = $1`, component).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("%s version %d; want %d", component, got, want)
	}
}

func assertValidIndex(t *testing.T, p *pgxpool.Pool, index string) {
	t.Helper()
	var valid bool
	err := p.QueryRow(t.Context(), `SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)`, index).Scan(&valid)
	if err != nil || !valid {
		t.Errorf("index %s: valid %v, %v; want a valid index", index, valid, err)
	}
}

func exists(t *testing.T, p *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := p.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(fmt.Errorf("to_regclass(%s): %w", name, err))
	}
	return ok
}

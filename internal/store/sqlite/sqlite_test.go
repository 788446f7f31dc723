package sqlite

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"

	"github.com/sluicegw/sluice/internal/sqlitedb"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/storetest"
	"github.com/sluicegw/sluice/policies"
)

// database/sql's connection opener goroutine ends with DB.Close and the
// driver starts none of its own, so no goroutine needs ignoring.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openTest(t, filepath.Join(t.TempDir(), "store.sqlite"))
	})
}

// openTest opens the store at path and closes it when the test ends.
func openTest(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestPragmas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.sqlite")
	s := openTest(t, path)
	ctx := t.Context()
	// Pragmas are per connection: check one that the pool opened after
	// Open had returned.
	c1, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := s.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	for i, c := range []*sql.Conn{c1, c2} {
		got := map[string]string{}
		for _, p := range []string{"journal_mode", "synchronous", "foreign_keys", "busy_timeout", "user_version"} {
			var v string
			if err := c.QueryRowContext(ctx, "PRAGMA "+p).Scan(&v); err != nil {
				t.Fatalf("PRAGMA %s: %v", p, err)
			}
			got[p] = v
		}
		want := map[string]string{
			"journal_mode": "wal",
			"synchronous":  "2", // FULL
			"foreign_keys": "1",
			"busy_timeout": "5000",
			"user_version": strconv.Itoa(len(migrations)),
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("connection %d pragmas (-want +got):\n%s", i, diff)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("file mode = %v; want 0600", perm)
	}
}

func TestTimesComeBackUTC(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "store.sqlite"))
	ctx := t.Context()
	k := storetest.NewKey("key_zone")
	k.CreatedAt = time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("CET", 3600))
	k.ExpiresAt = k.CreatedAt.Add(time.Hour)
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	got, err := s.RevokeKey(ctx, k.ID, k.CreatedAt.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for name, tm := range map[string]time.Time{"created": got.CreatedAt, "expires": got.ExpiresAt, "revoked": got.RevokedAt} {
		if tm.Location() != time.UTC {
			t.Errorf("%s at %v is in %v; want UTC", name, tm, tm.Location())
		}
	}
	if !got.CreatedAt.Equal(k.CreatedAt) {
		t.Errorf("CreatedAt = %v; want %v", got.CreatedAt, k.CreatedAt)
	}
}

func TestRejectsUnstorable(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "store.sqlite"))
	ctx := t.Context()
	if err := s.CreateKey(ctx, storetest.NewKey("key_live")); err != nil {
		t.Fatal(err)
	}
	withKey := func(f func(*store.Key)) store.Key {
		k := storetest.NewKey("key_bad")
		f(&k)
		return k
	}
	tests := []struct {
		name string
		call func() error
		want string
	}{
		{"empty key id", func() error { return s.CreateKey(ctx, withKey(func(k *store.Key) { k.ID = "" })) }, "empty id"},
		{"year 1600", func() error {
			return s.CreateKey(ctx, withKey(func(k *store.Key) { k.CreatedAt = time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC) }))
		}, "created_at: 1600-01-01T00:00:00Z cannot be stored"},
		{"year 3000", func() error {
			return s.CreateKey(ctx, withKey(func(k *store.Key) { k.ExpiresAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }))
		}, "expires_at: 3000-01-01T00:00:00Z cannot be stored"},
		{"the epoch", func() error {
			return s.CreateKey(ctx, withKey(func(k *store.Key) { k.CreatedAt = time.Unix(0, 0) }))
		}, "created_at: 1970-01-01T00:00:00Z cannot be stored"},
		{"zero revocation time", func() error { _, err := s.RevokeKey(ctx, "key_live", time.Time{}); return err }, "zero revocation time"},
		{"empty team name", func() error { return s.PutTeam(ctx, store.Team{Org: "acme"}) }, "empty name"},
		{"empty org name", func() error { return s.PutOrg(ctx, store.Org{}) }, "empty name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v; want one containing %q", err, tt.want)
			}
		})
	}
	c, err := s.Changes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Keys) != 1 || len(c.Teams)+len(c.Orgs) != 0 || c.Rev != 1 {
		t.Errorf("after refused writes Changes(0) = %+v; want only key_live at Rev 1", c)
	}
}

// TestTwoHandles is `sluice keys revoke` and `sluice serve` sharing a file:
// what one handle writes, the other's Changes reports.
func TestTwoHandles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.sqlite")
	serve, cli := openTest(t, path), openTest(t, path)
	ctx := t.Context()

	if err := cli.CreateKey(ctx, storetest.NewKey("key_shared")); err != nil {
		t.Fatal(err)
	}
	c, err := serve.Changes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Keys) != 1 || c.Keys[0].ID != "key_shared" {
		t.Fatalf("serve's Changes(0) = %+v; want key_shared", c)
	}
	revoked, err := cli.RevokeKey(ctx, "key_shared", time.Date(2025, 6, 1, 0, 0, 0, 1, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	got, err := serve.Changes(ctx, c.Rev)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(store.Changes{Keys: []store.Key{revoked}, Rev: revoked.Rev}, got); diff != "" {
		t.Errorf("serve's Changes(%d) after cli's revoke (-want +got):\n%s", c.Rev, diff)
	}

	// Both handles writing at once never share a revision.
	const n = 30
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for h, s := range []*Store{serve, cli} {
		wg.Go(func() {
			for i := range n {
				if err := s.CreateKey(ctx, storetest.NewKey(fmt.Sprintf("key_h%d_%02d", h, i))); err != nil {
					errs[h] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	assertDistinctRevs(t, serve, 1+2*n)
}

// assertDistinctRevs checks that s holds want keys whose revisions are all
// different and that Changes reports the highest of them.
func assertDistinctRevs(t *testing.T, s *Store, want int) {
	t.Helper()
	keys, err := s.ListKeys(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != want {
		t.Fatalf("%d keys; want %d", len(keys), want)
	}
	seen := map[int64]string{}
	var maxRev int64
	for _, k := range keys {
		if other, dup := seen[k.Rev]; dup {
			t.Errorf("keys %s and %s share revision %d", other, k.ID, k.Rev)
		}
		seen[k.Rev] = k.ID
		maxRev = max(maxRev, k.Rev)
	}
	c, err := s.Changes(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if c.Rev != maxRev {
		t.Errorf("Changes(0).Rev = %d; want %d", c.Rev, maxRev)
	}
}

const helperEnv = "SLUICE_SQLITE_TEST_WRITER"

// TestTwoProcesses writes from this process and a child process at once:
// BEGIN IMMEDIATE must keep their revisions distinct across processes, not
// just across handles.
func TestTwoProcesses(t *testing.T) {
	const n = 40
	path := filepath.Join(t.TempDir(), "store.sqlite")
	s := openTest(t, path)
	ctx := t.Context()

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperWriter$")
	cmd.Env = append(os.Environ(), helperEnv+"="+path+"|"+strconv.Itoa(n))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewReader(stdout)
	line, err := out.ReadString('\n')
	if err != nil || line != "ready\n" {
		_ = cmd.Wait()
		t.Fatalf("child said %q, %v; stderr:\n%s", line, err, stderr.String())
	}
	// Both start writing now.
	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	var writeErr error
	for i := range n {
		if writeErr = s.CreateKey(ctx, storetest.NewKey(fmt.Sprintf("key_parent_%02d", i))); writeErr != nil {
			break
		}
	}
	rest, readErr := io.ReadAll(out)
	if err := errors.Join(writeErr, readErr, stdin.Close(), cmd.Wait()); err != nil {
		t.Fatalf("%v\nchild stdout:\n%s\nchild stderr:\n%s", err, rest, stderr.String())
	}
	assertDistinctRevs(t, s, 2*n)
}

// TestHelperWriter is the child process of TestTwoProcesses; it does
// nothing when run directly.
func TestHelperWriter(t *testing.T) {
	arg := os.Getenv(helperEnv)
	if arg == "" {
		t.Skip("child process of TestTwoProcesses")
	}
	path, count, _ := strings.Cut(arg, "|")
	n, err := strconv.Atoi(count)
	if err != nil {
		t.Fatal(err)
	}
	s := openTest(t, path)
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := s.CreateKey(t.Context(), storetest.NewKey(fmt.Sprintf("key_child_%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.sqlite")
	ctx := t.Context()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	k := storetest.NewKey("key_kept")
	k.Models = []string{"gpt-4o"}
	writes := errors.Join(
		s.CreateKey(ctx, k),
		s.PutOrg(ctx, store.Org{Name: "acme"}),
		s.PutTeam(ctx, store.Team{Name: "search", Org: "acme", Models: []string{"claude-*"}}),
	)
	if writes != nil {
		t.Fatal(writes)
	}
	before, err := s.Changes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openTest(t, path)
	after, err := s.Changes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("Changes(0) after reopen (-before +after):\n%s", diff)
	}
	if err := s.PutOrg(ctx, store.Org{Name: "globex"}); err != nil {
		t.Fatal(err)
	}
	next, err := s.Changes(ctx, before.Rev)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(store.Changes{Orgs: []store.Org{{Name: "globex", Rev: before.Rev + 1}}, Rev: before.Rev + 1}, next); diff != "" {
		t.Errorf("first write after reopen (-want +got):\n%s", diff)
	}
}

// TestMigrateOrgLimits opens a file as the first release left it (schema
// version 1, orgs without limits): Open migrates it, its orgs come back
// with no limits at their old revisions, and limits can be set.
func TestMigrateOrgLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.sqlite")
	ctx := t.Context()
	old, err := sqlitedb.Open(ctx, path, pragmas, migrations[:1], "database", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = old.ExecContext(ctx, `UPDATE revision SET rev = 2;
		INSERT INTO orgs (name, rev) VALUES ('acme', 1);
		INSERT INTO teams (name, org, models, limits, rev) VALUES ('search', 'acme', '[]', '{"requests":{"per_minute":5}}', 2);`)
	if err := errors.Join(err, old.Close()); err != nil {
		t.Fatal(err)
	}

	s := openTest(t, path)
	got, err := s.Changes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := store.Changes{
		Teams: []store.Team{{Name: "search", Org: "acme", Limits: policies.Limits{Requests: policies.RateLimits{PerMinute: 5}}, Rev: 2}},
		Orgs:  []store.Org{{Name: "acme", Rev: 1}},
		Rev:   2,
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Changes(0) after the migration (-want +got):\n%s", diff)
	}
	limits := policies.Limits{Budgets: []policies.Budget{{MicroUSD: 10_000_000, Period: policies.PeriodMonth}}}
	if err := s.PutOrg(ctx, store.Org{Name: "acme", Limits: limits}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Changes(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(store.Changes{Orgs: []store.Org{{Name: "acme", Limits: limits, Rev: 3}}, Rev: 3}, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Changes(2) after PutOrg (-want +got):\n%s", diff)
	}
}

func TestConcurrentOpenOfNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.sqlite")
	const n = 4
	stores := make([]*Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { stores[i], errs[i] = Open(t.Context(), path) })
	}
	wg.Wait()
	for _, s := range stores {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestSchemaTooNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.sqlite")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.ExecContext(t.Context(), "PRAGMA user_version = 99")
	if err := errors.Join(err, db.Close()); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), path)
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded; want an error")
	}
	want := fmt.Sprintf("database schema version 99 is newer than this sluice (max %d); upgrade sluice", len(migrations))
	if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
		t.Errorf("Open error = %q; want one naming %s and containing %q", err, path, want)
	}
}

func TestNotADatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	text := strings.Repeat("listen:\n  grpc: 127.0.0.1:9001\n", 200)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), path)
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded; want an error")
	}
	if want := path + ": not a SQLite database"; !strings.Contains(err.Error(), want) {
		t.Errorf("Open error = %q; want one containing %q", err, want)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != text {
		t.Errorf("Open modified the file it refused")
	}
}

func TestCreatesParentDirectories(t *testing.T) {
	path := filepath.Join(t.TempDir(), "var", "lib", "sluice", "store.sqlite")
	s := openTest(t, path)
	if err := s.PutOrg(t.Context(), store.Org{Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("database file: %v", err)
	}
}

func TestOpenDirectoryFails(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(t.Context(), dir)
	if err == nil {
		s.Close()
		t.Fatal("Open succeeded; want an error")
	}
	if !strings.Contains(err.Error(), dir) {
		t.Errorf("Open error = %q; want one naming %s", err, dir)
	}
}

func TestCloseTwice(t *testing.T) {
	s, err := Open(t.Context(), filepath.Join(t.TempDir(), "store.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(s.Close(), s.Close()); err != nil {
		t.Fatalf("Close twice: %v", err)
	}
}

// BenchmarkChanges is the polling cost: a server calls Changes every
// 250 ms, and almost every time nothing has changed.
func BenchmarkChanges(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "store.sqlite"))
	ctx := b.Context()
	for i := range 100 {
		if err := s.CreateKey(ctx, storetest.NewKey(fmt.Sprintf("key_%03d", i))); err != nil {
			b.Fatal(err)
		}
	}
	c, err := s.Changes(ctx, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		got, err := s.Changes(ctx, c.Rev)
		if err != nil {
			b.Fatal(err)
		}
		if got.Rev != c.Rev || len(got.Keys) != 0 {
			b.Fatalf("Changes(%d) = %+v; want nothing", c.Rev, got)
		}
	}
}

// TestCreateKeys: a bulk insert gives each key its own revision, in
// order, as one-by-one inserts would; a taken hash refuses the whole
// batch.
func TestCreateKeys(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, filepath.Join(t.TempDir(), "store.sqlite"))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := s.PutTeam(ctx, store.Team{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	keys := []store.Key{
		{ID: "key_1", Prefix: "p1", Hash: [32]byte{1}, Team: "t", Models: []string{"m"}, CreatedAt: t0},
		{ID: "key_2", Prefix: "p2", Hash: [32]byte{2}, Team: "t", Limits: policies.Limits{Requests: policies.RateLimits{PerMinute: 3}}, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)},
	}
	if err := s.CreateKeys(ctx, keys); err != nil {
		t.Fatal(err)
	}
	ch, err := s.Changes(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	keys[0].Rev, keys[1].Rev = 2, 3
	if diff := cmp.Diff(keys, ch.Keys); diff != "" || ch.Rev != 3 {
		t.Errorf("keys after CreateKeys (-want +got), rev %d:\n%s", ch.Rev, diff)
	}
	err = s.CreateKeys(ctx, []store.Key{{ID: "key_3", Hash: [32]byte{3}, Team: "t", CreatedAt: t0}, {ID: "key_4", Hash: [32]byte{1}, Team: "t", CreatedAt: t0}})
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("batch with a taken hash: %v, want ErrExists", err)
	}
	if ch, err := s.Changes(ctx, 3); err != nil || len(ch.Keys) != 0 || ch.Rev != 3 {
		t.Errorf("a refused batch left %d keys, rev %d (%v)", len(ch.Keys), ch.Rev, err)
	}
}

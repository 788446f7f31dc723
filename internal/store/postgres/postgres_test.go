package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/sluicegw/sluice/internal/pgmigrate"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/storetest"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
	"github.com/sluicegw/sluice/policies"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(t.Context(), newDatabase(t), Options{})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	})
}

// newDatabase is the URL of a new database migrated to the store's
// schema.
func newDatabase(t testing.TB) string {
	t.Helper()
	url := pgtest.Database(t)
	if _, _, err := Migrate(context.Background(), url, testenv.Quiet()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return url
}

// openTest opens the store at url and closes it when the test ends.
func openTest(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, Options{Log: testenv.Quiet()})
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

func TestMigrate(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := pgtest.Database(t)
	for _, want := range [][2]int{{0, len(migrations)}, {len(migrations), len(migrations)}} {
		from, to, err := Migrate(ctx, url, nil)
		if err != nil || from != want[0] || to != want[1] {
			t.Errorf("Migrate = %d, %d, %v; want %d, %d, nil", from, to, err, want[0], want[1])
		}
	}
}

// TestOpenRefusesSchema: Open never migrates; it refuses a schema other
// than its own and says what to do.
func TestOpenRefusesSchema(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := pgtest.Database(t)
	s, err := Open(ctx, url, Options{})
	want := fmt.Sprintf("store schema version 0 is older than this sluice needs (%d); run `sluice migrate`", len(migrations))
	if err == nil || !errors.Is(err, pgmigrate.ErrTooOld) || !strings.Contains(err.Error(), want) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open(new database) = %v; want %q", err, want)
	}

	if _, _, err := Migrate(ctx, url, nil); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `UPDATE sluice_schema SET version = 99 WHERE component = 'store'`); err != nil {
		t.Fatal(err)
	}
	s, err = Open(ctx, url, Options{})
	want = fmt.Sprintf("store schema version 99 is newer than this sluice knows (%d); upgrade sluice", len(migrations))
	if err == nil || !errors.Is(err, pgmigrate.ErrTooNew) || !strings.Contains(err.Error(), want) {
		if s != nil {
			s.Close()
		}
		t.Fatalf("Open(newer schema) = %v; want %q", err, want)
	}
	if _, _, err := Migrate(ctx, url, nil); !errors.Is(err, pgmigrate.ErrTooNew) {
		t.Errorf("Migrate(newer schema) = %v; want ErrTooNew", err)
	}
}

// TestTwoStores is two replicas on one database: what one writes, the
// other's Changes reports.
func TestTwoStores(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := newDatabase(t)
	a, b := openTest(t, url), openTest(t, url)
	if err := a.CreateKey(ctx, storetest.NewKey("key_shared")); err != nil {
		t.Fatal(err)
	}
	c, err := b.Changes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Keys) != 1 || c.Keys[0].ID != "key_shared" {
		t.Fatalf("b's Changes(0) = %+v; want key_shared", c)
	}
	revoked, err := b.RevokeKey(ctx, "key_shared", time.Date(2025, 6, 1, 0, 0, 0, 1, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	got, err := a.Changes(ctx, c.Rev)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(store.Changes{Keys: []store.Key{revoked}, Rev: revoked.Rev}, got); diff != "" {
		t.Errorf("a's Changes(%d) after b's revoke (-want +got):\n%s", c.Rev, diff)
	}
}

// TestFollowerNeverSkips: a follower polling Changes(since) while eight
// writers write through two stores sees every key, although it never
// reads from 0 again: no revision ever commits behind one it has read.
func TestFollowerNeverSkips(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := newDatabase(t)
	stores := []*Store{openTest(t, url), openTest(t, url)}
	follower := openTest(t, url)
	const writers, perWriter = 8, 40
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			s := stores[w%2]
			for i := range perWriter {
				var err error
				if i%10 == 9 {
					// A batch too: several revisions in one commit.
					err = s.CreateKeys(ctx, []store.Key{
						storetest.NewKey(fmt.Sprintf("key_w%d_%02d", w, i)),
						storetest.NewKey(fmt.Sprintf("key_w%d_%02db", w, i)),
					})
				} else {
					err = s.CreateKey(ctx, storetest.NewKey(fmt.Sprintf("key_w%d_%02d", w, i)))
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	seen := map[string]int64{}
	var since int64
	poll := func() {
		c, err := follower.Changes(ctx, since)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range c.Keys {
			if k.Rev <= since {
				t.Errorf("key %s at Rev %d in Changes(%d)", k.ID, k.Rev, since)
			}
			seen[k.ID] = k.Rev
		}
		if c.Rev < since {
			t.Fatalf("Changes(%d).Rev = %d went backwards", since, c.Rev)
		}
		since = c.Rev
	}
	for polling := true; polling; {
		select {
		case <-done:
			polling = false
		default:
		}
		poll()
	}
	poll()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	keys, err := follower.ListKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := writers * (perWriter + perWriter/10); len(keys) != want {
		t.Fatalf("%d keys stored; want %d", len(keys), want)
	}
	for _, k := range keys {
		if rev, ok := seen[k.ID]; !ok || rev != k.Rev {
			t.Errorf("key %s (Rev %d): the follower saw Rev %d (%v)", k.ID, k.Rev, rev, ok)
		}
	}
}

// manyKeys returns n distinct keys shaped like bench/keyscale's, their
// IDs starting with prefix.
func manyKeys(prefix string, n int) []store.Key {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	keys := make([]store.Key, n)
	for i := range keys {
		var buf [8]byte
		binary.LittleEndian.PutUint64(buf[:], uint64(i))
		keys[i] = store.Key{ID: prefix + strconv.Itoa(1e9+i), Prefix: "sk-sluice-" + strconv.Itoa(1e5+i),
			Hash: sha256.Sum256(append([]byte(prefix), buf[:]...)),
			Team: "team-" + strconv.Itoa(i/100), Name: "key-" + strconv.Itoa(i), CreatedAt: t0}
		if i%10 == 0 {
			keys[i].Models = []string{"gpt-4o-mini"}
		}
		if i%7 == 0 {
			keys[i].Limits = policies.Limits{Requests: policies.RateLimits{PerMinute: 600}}
		}
	}
	return keys
}

// TestCreateKeysMany: 100,000 keys go in one transaction, each with its
// own revision in order; a batch that repeats a stored hash in its last
// key writes nothing.
func TestCreateKeysMany(t *testing.T) {
	const n = 100_000
	ctx := testctx.Deadline(t)
	s := openTest(t, newDatabase(t))
	keys := manyKeys("key_", n)
	start := time.Now()
	if err := s.CreateKeys(ctx, keys); err != nil {
		t.Fatal(err)
	}
	t.Logf("CreateKeys of %d keys: %v", n, time.Since(start))
	var got int
	_, err := s.EachKey(ctx, nil, func(k store.Key) error {
		if want := &keys[k.Rev-1]; k.ID != want.ID || k.Hash != want.Hash {
			return fmt.Errorf("key %s at Rev %d; want %s", k.ID, k.Rev, want.ID)
		}
		got++
		return nil
	})
	if err != nil || got != n {
		t.Fatalf("EachKey: %d keys, %v; want %d", got, err, n)
	}

	more := manyKeys("key_more_", 1000)
	more[999].Hash = keys[500].Hash
	if err := s.CreateKeys(ctx, more); !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), "hash taken") {
		t.Fatalf("CreateKeys(taken hash) = %v; want ErrExists, hash taken", err)
	}
	if c, err := s.Changes(ctx, n); err != nil || len(c.Keys) != 0 || c.Rev != n {
		t.Errorf("after a refused batch Changes(%d) = %d keys at Rev %d, %v; want none at %d", n, len(c.Keys), c.Rev, err, n)
	}
}

// TestRefusedWrites: what neither backend can store is refused before
// anything is written.
func TestRefusedWrites(t *testing.T) {
	ctx := testctx.Deadline(t)
	s := openTest(t, newDatabase(t))
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
		{"empty id", func() error { return s.CreateKey(ctx, withKey(func(k *store.Key) { k.ID = "" })) }, "empty id"},
		{"year 3000", func() error {
			return s.CreateKey(ctx, withKey(func(k *store.Key) { k.ExpiresAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }))
		}, "expires_at: 3000-01-01T00:00:00Z cannot be stored"},
		{"zero revocation time", func() error { _, err := s.RevokeKey(ctx, "key_live", time.Time{}); return err }, "zero revocation time"},
		{"empty team name", func() error { return s.PutTeam(ctx, store.Team{Org: "acme"}) }, "empty name"},
		{"empty org name", func() error { return s.PutOrg(ctx, store.Org{}) }, "empty name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v; want one containing %q", err, tt.want)
			}
		})
	}
	c, err := s.Changes(ctx, 0)
	if err != nil || len(c.Keys) != 1 || c.Rev != 1 {
		t.Errorf("after refused writes Changes(0) = %+v, %v; want only key_live at Rev 1", c, err)
	}
}

func TestCloseTwice(t *testing.T) {
	s, err := Open(t.Context(), newDatabase(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(s.Close(), s.Close()); err != nil {
		t.Fatalf("Close twice: %v", err)
	}
}

// BenchmarkCreateKeys imports 100,000 keys in one CreateKeys, as
// `sluice keys import` does.
func BenchmarkCreateKeys(b *testing.B) {
	const n = 100_000
	s := openTest(b, newDatabase(b))
	batch := 0
	b.ReportAllocs()
	for b.Loop() {
		batch++
		b.StopTimer()
		keys := manyKeys(fmt.Sprintf("key_%d_", batch), n)
		b.StartTimer()
		if err := s.CreateKeys(b.Context(), keys); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChanges is the polling cost when nothing has changed, which
// is almost every time.
func BenchmarkChanges(b *testing.B) {
	s := openTest(b, newDatabase(b))
	ctx := b.Context()
	if err := s.CreateKeys(ctx, manyKeys("key_", 100)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		c, err := s.Changes(ctx, 100)
		if err != nil || c.Rev != 100 || len(c.Keys) != 0 {
			b.Fatalf("Changes(100) = %+v, %v; want nothing", c, err)
		}
	}
}

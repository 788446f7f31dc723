package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/storetest"
	"github.com/sluicegw/sluice/internal/testctx"
)

// runListener runs a listener on s until the test ends, and checks that
// Run then returns nil.
func runListener(t *testing.T, s *Store) *Listener {
	t.Helper()
	l := s.Listener()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := testctx.Receive(t, "Run to return", done); err != nil {
			t.Errorf("Run = %v; want nil", err)
		}
	})
	testctx.Receive(t, "the listener to connect", l.C())
	return l
}

// receiveWithin fails t unless ch delivers within d.
func receiveWithin(t *testing.T, what string, ch <-chan struct{}, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("no %s within %v", what, d)
	}
}

// TestListenerNotifies: a write through one store wakes a listener on
// another within a second of its commit, whatever kind of write it is.
func TestListenerNotifies(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := newDatabase(t)
	writer, follower := openTest(t, url), openTest(t, url)
	l := runListener(t, follower)
	writes := []struct {
		name  string
		write func() error
	}{
		{"create key", func() error { return writer.CreateKey(ctx, storetest.NewKey("key_a")) }},
		{"revoke key", func() error { _, err := writer.RevokeKey(ctx, "key_a", time.Now()); return err }},
		{"put team", func() error { return writer.PutTeam(ctx, store.Team{Name: "search"}) }},
		{"put org", func() error { return writer.PutOrg(ctx, store.Org{Name: "acme"}) }},
	}
	for _, w := range writes {
		if err := w.write(); err != nil {
			t.Fatalf("%s: %v", w.name, err)
		}
		receiveWithin(t, "notification of "+w.name, l.C(), time.Second)
	}
	// A write that changes nothing (a second revocation) commits nothing
	// and notifies nobody; the next real write is the next signal.
	if _, err := writer.RevokeKey(ctx, "key_a", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := writer.PutOrg(ctx, store.Org{Name: "globex"}); err != nil {
		t.Fatal(err)
	}
	receiveWithin(t, "notification of the last write", l.C(), time.Second)
	select {
	case <-l.C():
		t.Error("a signal beyond the writes that committed")
	default:
	}
}

// TestListenerReconnects: a listener whose connection is terminated
// connects again, signals that it did, and is woken by writes again.
func TestListenerReconnects(t *testing.T) {
	ctx := testctx.Deadline(t)
	url := newDatabase(t)
	s := openTest(t, url)
	l := runListener(t, s)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	pid := func() (p int32) {
		t.Helper()
		err := admin.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'sluice store listener'
			ORDER BY backend_start DESC LIMIT 1`).Scan(&p)
		if err != nil {
			t.Fatalf("the listener's backend: %v", err)
		}
		return p
	}
	for i := range 2 {
		old := pid()
		var ok bool
		if err := admin.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, old).Scan(&ok); err != nil || !ok {
			t.Fatalf("pg_terminate_backend(%d) = %v, %v", old, ok, err)
		}
		testctx.Receive(t, "the listener to reconnect", l.C())
		if now := pid(); now == old {
			t.Fatalf("round %d: the listener is still on backend %d", i, old)
		}
		if err := s.PutOrg(ctx, store.Org{Name: "acme"}); err != nil {
			t.Fatal(err)
		}
		receiveWithin(t, "notification after reconnecting", l.C(), time.Second)
	}
}

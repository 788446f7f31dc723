package app

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	ledgerpg "github.com/sluicegw/sluice/internal/ledger/postgres"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv/pgtest"
)

// pgQuickstart is the quickstart's config with its key store and its
// spend ledger in the PostgreSQL database at url, the ledger's spool in a
// directory of the test's.
func pgQuickstart(t *testing.T, url string) string {
	t.Helper()
	path := quickstart(t)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(data), "  sqlite: quickstart.db", "  postgres: \""+url+"\"", 1)
	if out == string(data) {
		t.Fatal("the quickstart's store section moved; update pgQuickstart")
	}
	out += "\nledger:\n  postgres: \"" + url + "\"\n  spool: " + filepath.Join(t.TempDir(), "ledger-spool") + "\n"
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestMigrateCommand: sluice migrate brings a new database's store schema
// to the current version, then finds nothing to do; the keys commands
// then work against it; on a SQLite config it says there is nothing to
// migrate.
func TestMigrateCommand(t *testing.T) {
	config := pgQuickstart(t, pgtest.Database(t))
	if _, _, err := run(t, "keys", "list", "--config", config); err == nil || !strings.Contains(err.Error(), "run `sluice migrate`") {
		t.Fatalf("keys list before migrate: %v; want the schema too old, and what to run", err)
	}
	out, _, err := run(t, "migrate", "--config", config)
	if err != nil || !regexp.MustCompile(`^store: schema version 0 → \d+\nledger: schema version 0 → \d+\n$`).MatchString(out) {
		t.Fatalf("migrate: %q, %v", out, err)
	}
	out, _, err = run(t, "migrate", "--config", config)
	if err != nil || !regexp.MustCompile(`^store: schema version \d+, up to date\nledger: schema version \d+, up to date\n$`).MatchString(out) {
		t.Fatalf("migrate again: %q, %v", out, err)
	}
	out, _, err = run(t, "keys", "create", "--config", config, "--team", "demo", "--name", "pg")
	if err != nil || !secretRE.MatchString(out) {
		t.Fatalf("keys create: %q, %v", out, err)
	}
	if out, _, err := run(t, "keys", "list", "--config", config); err != nil || !strings.Contains(out, "pg") {
		t.Errorf("keys list: %q, %v", out, err)
	}
	if out, _, err := run(t, "migrate", "--config", quickstart(t)); err != nil || !strings.Contains(out, "nothing to migrate") {
		t.Errorf("migrate on SQLite: %q, %v", out, err)
	}
}

// TestServeWaitsForMigrate: serve against a store schema older than it
// needs is alive and not ready — /healthz 200, /readyz 503 saying to run
// sluice migrate — until migrate runs, then starts; serve --migrate
// migrates first; a schema newer than this build knows refuses the start.
func TestServeWaitsForMigrate(t *testing.T) {
	url := pgtest.Database(t)
	config := pgQuickstart(t, url)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := ln.Addr().String()
	ln.Close() // a free port, for the admin server to take
	ready := filepath.Join(t.TempDir(), "ready.json")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"serve", "--config", config, "--grpc-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0",
			"--admin-addr", admin, "--ready-file", ready, "--log-level", "error", "--shutdown-drain", "0"}, io.Discard, io.Discard, noEnv)
	}()
	defer func() {
		cancel()
		if err := testctx.Receive(t, "serve to return", done); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testctx.Wait(t, "/readyz to say the schema is too old", func() bool {
		st, body := get("/readyz")
		return st == http.StatusServiceUnavailable && strings.Contains(body, "run `sluice migrate`")
	})
	if st, body := get("/healthz"); st != http.StatusOK {
		t.Errorf("/healthz while waiting: %d %s", st, body)
	}
	if _, err := os.Stat(ready); err == nil {
		t.Fatal("the ready file was written before the schema was migrated")
	}
	if _, _, err := run(t, "migrate", "--config", config); err != nil {
		t.Fatal(err)
	}
	testctx.Wait(t, "serve to start once migrated", func() bool { _, err := os.Stat(ready); return err == nil })
	if st, body := get("/readyz"); st != http.StatusOK {
		t.Errorf("/readyz after migrate: %d %s", st, body)
	}

	// --migrate on a new database: serve migrates, then starts.
	other := pgQuickstart(t, pgtest.Database(t))
	otherReady := filepath.Join(t.TempDir(), "ready.json")
	mctx, mcancel := context.WithCancel(context.Background())
	mdone := make(chan error, 1)
	go func() {
		mdone <- Run(mctx, []string{"serve", "--config", other, "--migrate", "--grpc-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0",
			"--admin-addr", "127.0.0.1:0", "--ready-file", otherReady, "--log-level", "error", "--shutdown-drain", "0"}, io.Discard, io.Discard, noEnv)
	}()
	testctx.Wait(t, "serve --migrate to start on a new database", func() bool { _, err := os.Stat(otherReady); return err == nil })
	mcancel()
	if err := testctx.Receive(t, "serve --migrate to return", mdone); err != nil {
		t.Errorf("serve --migrate: %v", err)
	}

	// A schema from a newer release.
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, component := range []string{"ledger", "store"} {
		if _, err := conn.Exec(t.Context(), "UPDATE sluice_schema SET version = 99 WHERE component = $1", component); err != nil {
			t.Fatal(err)
		}
		sctx, scancel := context.WithTimeout(t.Context(), 30*time.Second)
		err = Run(sctx, []string{"serve", "--config", config, "--grpc-addr", "127.0.0.1:0", "--xds-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
			"--log-level", "error"}, io.Discard, io.Discard, noEnv)
		scancel()
		if err == nil || !strings.Contains(err.Error(), component+" schema version 99 is newer than this sluice knows") {
			t.Errorf("serve against a %s schema 99: %v; want it refused as newer", component, err)
		}
	}
}

// TestSpendSaysWhatSpoolsHold: with the ledger in PostgreSQL, sluice
// spend reads the database and says, on stderr, how many acknowledged
// records replicas' spools hold that it cannot see yet.
func TestSpendSaysWhatSpoolsHold(t *testing.T) {
	url := pgtest.Database(t)
	config := pgQuickstart(t, url)
	if _, _, err := run(t, "migrate", "--config", config); err != nil {
		t.Fatal(err)
	}
	db, err := ledgerpg.OpenDB(t.Context(), url, ledgerpg.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, stderr, err := run(t, "spend", "--config", config); err != nil || strings.Contains(stderr, "spools") {
		t.Fatalf("spend with no backlog: %q, %v; want no note", stderr, err)
	}
	if err := db.Report(t.Context(), "replica-b:/var/lib/sluice/spool", 5, time.Now().Add(-time.Minute), time.Now()); err != nil {
		t.Fatal(err)
	}
	_, stderr, err := run(t, "spend", "--config", config)
	if err != nil || !strings.Contains(stderr, "sluice spend: note: 5 acknowledged spend records are in 1 replicas' spools and not yet in PostgreSQL") ||
		!strings.Contains(stderr, "replica-b:/var/lib/sluice/spool") {
		t.Errorf("spend with a replica's backlog: stderr %q, %v; want the note naming it", stderr, err)
	}
}

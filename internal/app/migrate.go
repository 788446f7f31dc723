package app

import (
	"context"
	"fmt"
	"io"

	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/internal/store/postgres"
)

// runMigrate is `sluice migrate`: the PostgreSQL schema brought up to the
// version this build needs, under the migration lock (internal/pgmigrate),
// so that it may run beside replicas and beside another migrate. It is
// what a deployment runs before rolling out a new release (a Kubernetes
// Job ordered before the Deployment, or serve --migrate). SQLite files
// need none of it: they are upgraded when opened.
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	fs := newFlags("migrate", "", "Apply the pending migrations of the PostgreSQL schema (expand-only: replicas of\nthe previous release keep working against it). Safe to run while replicas\nserve, and from several places at once: one applies, the others wait.", stderr)
	config := fs.String("config", "sluice.yaml", "config `file`")
	if err := fs.Parse(args); err != nil {
		return cli.FlagErr(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	snap, err := loadSnapshotWithoutProviderKeys(*config, env)
	if err != nil {
		return err
	}
	url := snap.StorePostgres()
	if url == "" {
		fmt.Fprintf(stdout, "%s: the store is SQLite (%s), which sluice upgrades when it opens it: nothing to migrate\n", *config, snap.SQLitePath())
		return nil
	}
	from, to, err := postgres.Migrate(ctx, url, nil)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if from == to {
		fmt.Fprintf(stdout, "store: schema version %d, up to date\n", to)
	} else {
		fmt.Fprintf(stdout, "store: schema version %d → %d\n", from, to)
	}
	return nil
}

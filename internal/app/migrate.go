package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/sluicegw/sluice/internal/cli"
	ledgerpg "github.com/sluicegw/sluice/internal/ledger/postgres"
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
	parts := []struct {
		name, url string
		migrate   func(context.Context, string, *slog.Logger) (int, int, error)
	}{{"store", snap.StorePostgres(), postgres.Migrate}, {"ledger", snap.LedgerPostgres(), ledgerpg.Migrate}}
	migrated := false
	for _, p := range parts {
		if p.url == "" {
			continue
		}
		migrated = true
		from, to, err := p.migrate(ctx, p.url, nil)
		if err != nil {
			return fmt.Errorf("migrate %s: %w", p.name, err)
		}
		if from == to {
			fmt.Fprintf(stdout, "%s: schema version %d, up to date\n", p.name, to)
		} else {
			fmt.Fprintf(stdout, "%s: schema version %d → %d\n", p.name, from, to)
		}
	}
	if !migrated {
		fmt.Fprintf(stdout, "%s: the store and the ledger are SQLite files, which sluice upgrades when it opens them: nothing to migrate\n", *config)
	}
	return nil
}

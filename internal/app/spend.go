package app

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	// The zone database, for --tz on machines without one installed
	// (make run must work on a bare machine).
	_ "time/tzdata"

	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/internal/ledger"
	ledgerpg "github.com/sluicegw/sluice/internal/ledger/postgres"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
)

func runSpend(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	fs := newFlags("spend", "", "Report spend from the ledger: totals grouped by key, team, org, model, or calendar\nday, week (from Monday) or month in a time zone (--tz), or the individual records\n(--records). Money is shown in dollars to the micro-dollar, rounded up (the ledger\nholds it exactly, in integer pico-dollars; --format json gives both).", stderr)
	config := fs.String("config", "sluice.yaml", "config `file`")
	by := fs.String("by", "key", "group totals by key, team, org, model, day, week, month or none;\nperiods are listed newest first, the others by cost")
	tz := fs.String("tz", "UTC", "time `zone` of the calendar for day, week and month, and of dates in --since and --until\n(an IANA name: Asia/Kolkata, America/New_York)")
	since := fs.String("since", "", "only requests from this time: a duration back from now (24h) or a date/time (2026-11-01, RFC 3339)")
	until := fs.String("until", "", "only requests before this time (same forms as --since)")
	key := fs.String("key", "", "only this key id")
	team := fs.String("team", "", "only this team")
	org := fs.String("org", "", "only this org")
	model := fs.String("model", "", "only this model")
	records := fs.Bool("records", false, "list records instead of totals")
	limit := fs.Int("limit", 100, "at most this many rows (0: all)")
	format := fs.String("format", "table", "output: table, csv or json")
	if err := fs.Parse(args); err != nil {
		return cli.FlagErr(err)
	}
	loc, err := time.LoadLocation(*tz)
	if err != nil {
		return fmt.Errorf("--tz: unknown time zone %q", *tz)
	}
	now := time.Now().UTC()
	f := ledger.Filter{KeyID: *key, Team: *team, Org: *org, Model: *model, Limit: *limit}
	if f.Since, err = parseWhen(*since, now, loc); err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	if f.Until, err = parseWhen(*until, now, loc); err != nil {
		return fmt.Errorf("--until: %w", err)
	}
	if err := f.Validate(); err != nil {
		return err
	}
	period, isPeriod := periods[*by]
	g := ledger.GroupBy(*by)
	if isPeriod {
		g = ledger.ByBucket
	} else if err := g.Validate(); err != nil || g == ledger.ByBucket {
		return fmt.Errorf("--by: want key, team, org, model, day, week, month or none, got %q", *by)
	}
	if *format != "table" && *format != "csv" && *format != "json" {
		return fmt.Errorf("--format: want table, csv or json, got %q", *format)
	}
	// spend reads the ledger and never calls a provider: it runs where
	// the providers' keys are not in the environment.
	snap, err := loadSnapshotWithoutProviderKeys(*config, env)
	if err != nil {
		return err
	}
	led, err := openLedgerBackend(ctx, snap, nil, true, func(err error) { fmt.Fprintln(stderr, "sluice spend:", err) }, func(from, to int) {
		fmt.Fprintf(stderr, "sluice spend: upgrading the ledger %s from schema version %d to %d; on a large ledger this takes minutes\n", snap.LedgerPath(), from, to)
	})
	if err != nil {
		return err
	}
	defer led.Close()
	if pg, ok := led.(*ledgerpg.Ledger); ok {
		// What replicas' spools hold is not in the database yet.
		if states, err := pg.DB().Behind(ctx); err != nil {
			fmt.Fprintln(stderr, "sluice spend:", err)
		} else if msg := ledgerpg.Staleness(states, time.Now()); msg != "" {
			fmt.Fprintln(stderr, "sluice spend: note:", msg)
		}
	}
	if *records {
		rs, err := led.Records(ctx, f)
		if err != nil {
			return err
		}
		return writeRecords(stdout, *format, rs)
	}
	if !isPeriod {
		ts, err := led.Totals(ctx, f, g)
		if err != nil {
			return err
		}
		return writeTotals(stdout, *format, *by, ts)
	}
	// A period's totals are the sums of its 15-minute buckets; the limit
	// counts periods, so it applies after folding.
	f.Limit = 0
	ts, err := led.Totals(ctx, f, ledger.ByBucket)
	if err != nil {
		return err
	}
	ts, err = fold(ts, period, loc)
	if err != nil {
		return err
	}
	if *limit > 0 && len(ts) > *limit {
		ts = ts[:*limit]
	}
	return writeTotals(stdout, *format, *by, ts)
}

// periods are the calendar periods of --by: each maps a time, in the
// report's zone, to the name of the period that holds it. The names sort
// as the periods do.
var periods = map[string]func(t time.Time) string{
	"day": func(t time.Time) string { return t.Format(time.DateOnly) },
	// A week is named by its Monday (ISO 8601 weeks start on Monday).
	"week": func(t time.Time) string {
		y, m, d := t.Date()
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back, 12, 0, 0, 0, time.UTC).Format(time.DateOnly)
	},
	"month": func(t time.Time) string { return t.Format("2006-01") },
}

// fold sums totals grouped by ledger.ByBucket into calendar periods in
// loc, newest first. It is exact: periods in loc begin on 15-minute
// boundaries (true of every zone's offsets since the 1970s: +5:30 and
// +5:45 included), so each bucket lies in one period.
func fold(ts []ledger.Total, period func(time.Time) string, loc *time.Location) ([]ledger.Total, error) {
	sums := map[string]*ledger.Total{}
	for _, t := range ts {
		at, err := time.Parse(time.RFC3339, t.Group)
		if err != nil {
			return nil, fmt.Errorf("ledger bucket %q: %w", t.Group, err)
		}
		name := period(at.In(loc))
		s := sums[name]
		if s == nil {
			s = &ledger.Total{Group: name}
			sums[name] = s
		}
		s.Requests += t.Requests
		s.Tokens.Add(t.Tokens)
		s.Cost = s.Cost.Add(t.Cost)
		s.Estimated += t.Estimated
		s.Unpriced += t.Unpriced
	}
	out := make([]ledger.Total, 0, len(sums))
	for _, s := range sums {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b ledger.Total) int { return strings.Compare(b.Group, a.Group) })
	return out, nil
}

// parseWhen accepts "" (unbounded), a duration back from now, a date
// (midnight in loc) or an RFC 3339 time.
func parseWhen(s string, now time.Time, loc *time.Location) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, loc); err == nil {
		return t.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("want a duration (24h), a date (2026-11-01) or an RFC 3339 time, got %q", s)
}

func writeTotals(w io.Writer, format, by string, ts []ledger.Total) error {
	header := []string{by, "requests", "input_tokens", "cached_input_tokens", "cache_creation_tokens", "output_tokens", "reasoning_tokens", "cost_usd", "estimated", "unpriced"}
	row := func(t ledger.Total) []string {
		return []string{t.Group, i64(t.Requests), i64(t.Tokens[tokens.Input]), i64(t.Tokens[tokens.CachedInput]), i64(t.Tokens[tokens.CacheWrite]),
			i64(t.Tokens[tokens.Output]), i64(t.Tokens[tokens.Reasoning]), t.Cost.DollarsUp(), i64(t.Estimated), i64(t.Unpriced)}
	}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		for _, t := range ts {
			if err := enc.Encode(t); err != nil { // ledger.Total's JSON shape, the admin API's
				return err
			}
		}
		return nil
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write(header)
		for _, t := range ts {
			cw.Write(row(t))
		}
		cw.Flush()
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	for i, h := range header {
		if i == 0 && h == "none" {
			h = "all"
		}
		fmt.Fprint(tw, h+"\t")
	}
	fmt.Fprintln(tw)
	for _, t := range ts {
		for _, c := range row(t) {
			fmt.Fprint(tw, c+"\t")
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func writeRecords(w io.Writer, format string, rs []ledger.Record) error {
	// request_id is the record's own id; client_request_id the client's
	// x-request-id, a correlation field that many records may share.
	header := []string{"started_at", "request_id", "client_request_id", "key_id", "team", "model", "provider", "status", "outcome", "error_type",
		"input", "cached", "cache_creation", "output", "reasoning", "cost_usd", "estimated"}
	row := func(r ledger.Record) []string {
		return []string{r.StartedAt.Format(time.RFC3339), r.RequestID, r.ClientRequestID, r.KeyID, r.Team, r.Model, r.Provider, strconv.Itoa(r.Status), r.Outcome, r.ErrorType,
			i64(r.Tokens[tokens.Input]), i64(r.Tokens[tokens.CachedInput]), i64(r.Tokens[tokens.CacheWrite]), i64(r.Tokens[tokens.Output]), i64(r.Tokens[tokens.Reasoning]),
			money.FromPico(r.CostPico).DollarsUp(), strconv.FormatBool(r.Estimated)}
	}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		for _, r := range rs {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	case "csv":
		cw := csv.NewWriter(w)
		cw.Write(header)
		for _, r := range rs {
			cw.Write(row(r))
		}
		cw.Flush()
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, h := range header {
		fmt.Fprint(tw, h+"\t")
	}
	fmt.Fprintln(tw)
	for _, r := range rs {
		for _, c := range row(r) {
			fmt.Fprint(tw, printable(c)+"\t")
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func i64(v int64) string { return strconv.FormatInt(v, 10) }

// printable is s for a terminal: a client's x-request-id may hold a tab or
// an escape sequence, which would break the table or drive the terminal,
// so control characters and invalid UTF-8 are shown as '?' and an empty
// value as "-".
func printable(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, s)
}

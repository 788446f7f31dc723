package app

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/sluicegw/sluice/ledger"
	ledgersqlite "github.com/sluicegw/sluice/ledger/sqlite"
)

func runSpend(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	fs := newFlags("spend", "", "Report spend from the ledger: totals grouped by key, team, org, model or day,\nor the individual records (--records). Money is shown in dollars (stored as integer micro-dollars).", stderr)
	config := fs.String("config", "sluice.yaml", "config `file`")
	by := fs.String("by", "key", "group totals by key, team, org, model, day or none")
	since := fs.String("since", "", "only requests from this time: a duration back from now (24h) or a date/time (2026-11-01, RFC 3339)")
	until := fs.String("until", "", "only requests before this time (same forms as --since)")
	key := fs.String("key", "", "only this key id")
	team := fs.String("team", "", "only this team")
	model := fs.String("model", "", "only this model")
	records := fs.Bool("records", false, "list records instead of totals")
	limit := fs.Int("limit", 100, "at most this many rows (0: all)")
	format := fs.String("format", "table", "output: table, csv or json")
	if err := fs.Parse(args); err != nil {
		return flagErr(err)
	}
	now := time.Now().UTC()
	f := ledger.Filter{KeyID: *key, Team: *team, Model: *model, Limit: *limit}
	var err error
	if f.Since, err = parseWhen(*since, now); err != nil {
		return fmt.Errorf("--since: %w", err)
	}
	if f.Until, err = parseWhen(*until, now); err != nil {
		return fmt.Errorf("--until: %w", err)
	}
	if err := f.Validate(); err != nil {
		return err
	}
	g := ledger.GroupBy(*by)
	if err := g.Validate(); err != nil {
		return fmt.Errorf("--by: %w", err)
	}
	if *format != "table" && *format != "csv" && *format != "json" {
		return fmt.Errorf("--format: want table, csv or json, got %q", *format)
	}
	snap, err := loadSnapshot(*config, env)
	if err != nil {
		return err
	}
	led, err := ledgersqlite.Open(ctx, snap.LedgerPath(), ledgersqlite.Options{})
	if err != nil {
		return err
	}
	defer led.Close()
	if *records {
		rs, err := led.Records(ctx, f)
		if err != nil {
			return err
		}
		return writeRecords(stdout, *format, rs)
	}
	ts, err := led.Totals(ctx, f, g)
	if err != nil {
		return err
	}
	return writeTotals(stdout, *format, string(g), ts)
}

// parseWhen accepts "" (unbounded), a duration back from now, a date or an
// RFC 3339 time.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("want a duration (24h), a date (2026-11-01) or an RFC 3339 time, got %q", s)
}

// dollars formats micro-dollars as dollars with six decimals, exactly.
func dollars(micros int64) string {
	sign := ""
	if micros < 0 {
		sign, micros = "-", -micros
	}
	return fmt.Sprintf("%s%d.%06d", sign, micros/1_000_000, micros%1_000_000)
}

func writeTotals(w io.Writer, format, by string, ts []ledger.Total) error {
	header := []string{by, "requests", "input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens", "cost_usd", "estimated", "unpriced"}
	row := func(t ledger.Total) []string {
		return []string{t.Group, i64(t.Requests), i64(t.InputTokens), i64(t.CachedInputTokens), i64(t.OutputTokens), i64(t.ReasoningTokens), dollars(t.CostMicros), i64(t.Estimated), i64(t.Unpriced)}
	}
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		for _, t := range ts {
			if err := enc.Encode(struct {
				Group string `json:"group"`
				ledger.Total
				CostUSD string `json:"cost_usd"`
			}{t.Group, t, dollars(t.CostMicros)}); err != nil {
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
	header := []string{"started_at", "request_id", "key_id", "team", "model", "provider", "status", "outcome", "input", "cached", "output", "reasoning", "cost_usd", "estimated"}
	row := func(r ledger.Record) []string {
		return []string{r.StartedAt.Format(time.RFC3339), r.RequestID, r.KeyID, r.Team, r.Model, r.Provider, strconv.Itoa(r.Status), r.Outcome,
			i64(r.InputTokens), i64(r.CachedInputTokens), i64(r.OutputTokens), i64(r.ReasoningTokens), dollars(r.CostMicros), strconv.FormatBool(r.Estimated)}
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
			fmt.Fprint(tw, c+"\t")
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func i64(v int64) string { return strconv.FormatInt(v, 10) }

package app

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/policies"
)

const keysUsage = `Usage: sluice keys <create|list|revoke|import> [flags]

Manage API keys in the store named by the config file. A new key's secret is
printed once and stored only as its SHA-256 hash. A running server picks up
new and revoked keys within a second, without a restart. "import" adds many
keys at once from a JSON lines or CSV file, by key or by hash.

Run "sluice keys <command> --help" for a command's flags.
`

func runKeys(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, keysUsage)
		return errUsage
	}
	switch args[0] {
	case "create":
		return runKeysCreate(ctx, args[1:], stdout, stderr, env)
	case "list":
		return runKeysList(ctx, args[1:], stdout, stderr, env)
	case "revoke":
		return runKeysRevoke(ctx, args[1:], stdout, stderr, env)
	case "import":
		return runKeysImport(ctx, args[1:], stdout, stderr, env)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, keysUsage)
		return nil
	default:
		fmt.Fprintf(stderr, "unknown keys command %q\n\n%s", args[0], keysUsage)
		return errUsage
	}
}

// openStore loads the config and opens the store it names.
func openStore(ctx context.Context, path string, env Env) (*policies.Snapshot, store.Store, error) {
	snap, err := loadSnapshot(path, env)
	if err != nil {
		return nil, nil, err
	}
	st, err := openStoreBackend(ctx, snap, nil)
	if err != nil {
		return nil, nil, err
	}
	return snap, st, nil
}

func runKeysCreate(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	fs := newFlags("keys create", "", "Create an API key and print its secret once.", stderr)
	config := fs.String("config", "sluice.yaml", "config `file`")
	team := fs.String("team", "", "team the key belongs to (required)")
	name := fs.String("name", "", "a name for the key, for people")
	models := fs.String("models", "", "comma-separated model allow-list (patterns with *); empty: the team's")
	rpm := fs.Int64("rpm", 0, "requests per minute (0: unlimited)")
	rph := fs.Int64("rph", 0, "requests per hour (0: unlimited)")
	rpd := fs.Int64("rpd", 0, "requests per day (0: unlimited)")
	expires := fs.String("expires", "", "expiry: a duration from now (720h) or a time (2027-01-31 or RFC 3339)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	if err := fs.Parse(args); err != nil {
		return cli.FlagErr(err)
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "unexpected argument %q\n", fs.Arg(0))
		return errUsage
	}
	now := time.Now().UTC()
	var problems []string
	if *team == "" {
		problems = append(problems, "--team is required")
	}
	for flagName, v := range map[string]int64{"--rpm": *rpm, "--rph": *rph, "--rpd": *rpd} {
		if v < 0 {
			problems = append(problems, fmt.Sprintf("%s must not be negative, got %d", flagName, v))
		}
	}
	var expiresAt time.Time
	if *expires != "" {
		t, err := parseExpiry(*expires, now)
		if err != nil {
			problems = append(problems, "--expires: "+err.Error())
		}
		expiresAt = t
	}
	patterns := cli.SplitList(*models)
	if _, err := policies.NewModelSet(patterns); err != nil {
		problems = append(problems, "--models: "+err.Error())
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}

	snap, st, err := openStore(ctx, *config, env)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := checkTeam(ctx, snap, st, *team); err != nil {
		return err
	}
	for _, p := range patterns {
		if !matchesAnyModel(snap, p) {
			return fmt.Errorf("--models: %q matches no model in %s (models: %s)", p, *config, strings.Join(snap.ModelNames(), ", "))
		}
	}

	k, secret, err := mintKey(*team, *name, now)
	if err != nil {
		return err
	}
	k.Models = patterns
	k.Limits = policies.Limits{Requests: policies.RateLimits{PerMinute: *rpm, PerHour: *rph, PerDay: *rpd}}
	k.ExpiresAt = expiresAt
	if err := st.CreateKey(ctx, k); err != nil {
		return fmt.Errorf("create key: %w", err)
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(struct {
			keyJSON
			Secret string `json:"secret"`
		}{toJSON(k, now), secret.Reveal()})
	}
	fmt.Fprintf(stdout, "Created key %s for team %q.\nSecret (shown once; only its SHA-256 is stored):\n\n    %s\n\n", k.ID, k.Team, secret.Reveal())
	return nil
}

// checkTeam requires the team to exist in the config or the store.
func checkTeam(ctx context.Context, snap *policies.Snapshot, st store.Store, team string) error {
	if _, ok := snap.Team(team); ok {
		return nil
	}
	ch, err := st.Changes(ctx, 0)
	if err != nil {
		return err
	}
	var names []string
	for _, t := range ch.Teams {
		if t.Name == team {
			return nil
		}
		names = append(names, t.Name)
	}
	for _, t := range snap.Teams() {
		names = append(names, t.Name)
	}
	return fmt.Errorf("--team: unknown team %q (teams: %s)", team, strings.Join(names, ", "))
}

// matchesAnyModel reports whether an allow-list pattern admits at least
// one configured model (by name or alias), as config validation requires
// of declared allow-lists.
func matchesAnyModel(snap *policies.Snapshot, pattern string) bool {
	set, err := policies.NewModelSet([]string{pattern})
	if err != nil {
		return false
	}
	for _, name := range snap.ModelNames() {
		if r, ok := snap.Model(name); ok && r.AllowedBy(set) {
			return true
		}
	}
	return false
}

// mintKey generates a secret and the store record for it. The secret is
// returned once for the caller to show; the record holds only its hash.
func mintKey(team, name string, now time.Time) (store.Key, apikey.Secret, error) {
	secret, err := apikey.Generate(nil)
	if err != nil {
		return store.Key{}, "", err
	}
	id, err := apikey.NewID(nil)
	if err != nil {
		return store.Key{}, "", err
	}
	return store.Key{
		ID:        id,
		Prefix:    apikey.PublicPrefix(secret.Reveal()),
		Hash:      apikey.Hash(secret.Reveal()),
		Team:      team,
		Name:      name,
		CreatedAt: now,
	}, secret, nil
}

// parseExpiry accepts a duration from now, a date, or an RFC 3339 time, in
// the future and no later than the key store holds (store.LatestTime).
func parseExpiry(s string, now time.Time) (time.Time, error) {
	t, err := parseExpiryTime(s, now)
	if err == nil && t.After(store.LatestTime()) {
		return time.Time{}, fmt.Errorf("must be no later than %s (the latest time the key store holds), got %s",
			store.LatestTime().Format(time.RFC3339), s)
	}
	return t, err
}

func parseExpiryTime(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("duration must be positive, got %s", s)
		}
		return now.Add(d), nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			if !t.After(now) {
				return time.Time{}, fmt.Errorf("%s is in the past", s)
			}
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("want a duration (720h), a date (2027-01-31) or an RFC 3339 time, got %q", s)
}

type keyJSON struct {
	ID        string          `json:"id"`
	Prefix    string          `json:"prefix"`
	SHA256    string          `json:"sha256"`
	Team      string          `json:"team"`
	Name      string          `json:"name,omitempty"`
	State     string          `json:"state"`
	Models    []string        `json:"models,omitempty"`
	Limits    policies.Limits `json:"limits"`
	CreatedAt time.Time       `json:"created_at"`
	ExpiresAt *time.Time      `json:"expires_at,omitempty"`
	RevokedAt *time.Time      `json:"revoked_at,omitempty"`
}

func toJSON(k store.Key, now time.Time) keyJSON {
	j := keyJSON{
		ID: k.ID, Prefix: k.Prefix, SHA256: hex.EncodeToString(k.Hash[:]), Team: k.Team, Name: k.Name,
		State: keyState(k, now), Models: k.Models, Limits: k.Limits, CreatedAt: k.CreatedAt,
	}
	if !k.ExpiresAt.IsZero() {
		j.ExpiresAt = &k.ExpiresAt
	}
	if !k.RevokedAt.IsZero() {
		j.RevokedAt = &k.RevokedAt
	}
	return j
}

func keyState(k store.Key, now time.Time) string {
	switch {
	case k.Revoked():
		return "revoked"
	case k.Expired(now):
		return "expired"
	}
	return "active"
}

func runKeysList(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	fs := newFlags("keys list", "", "List API keys (never their secrets).", stderr)
	config := fs.String("config", "sluice.yaml", "config `file`")
	asJSON := fs.Bool("json", false, "print JSON, one object per key")
	if err := fs.Parse(args); err != nil {
		return cli.FlagErr(err)
	}
	_, st, err := openStore(ctx, *config, env)
	if err != nil {
		return err
	}
	defer st.Close()
	keys, err := st.ListKeys(ctx)
	if err != nil {
		return err
	}
	now := time.Now()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, k := range keys {
			if err := enc.Encode(toJSON(k, now)); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPREFIX\tTEAM\tNAME\tSTATE\tCREATED\tEXPIRES")
	for _, k := range keys {
		exp := "never"
		if !k.ExpiresAt.IsZero() {
			exp = k.ExpiresAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s…\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.Team, k.Name, keyState(k, now), k.CreatedAt.UTC().Format(time.RFC3339), exp)
	}
	return tw.Flush()
}

func runKeysRevoke(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) error {
	fs := newFlags("keys revoke", "KEY_ID", "Revoke an API key. Running servers refuse it within a second.", stderr)
	config := fs.String("config", "sluice.yaml", "config `file`")
	if err := fs.Parse(args); err != nil {
		return cli.FlagErr(err)
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "keys revoke takes exactly one KEY_ID (see `sluice keys list`)")
		return errUsage
	}
	_, st, err := openStore(ctx, *config, env)
	if err != nil {
		return err
	}
	defer st.Close()
	k, err := st.RevokeKey(ctx, fs.Arg(0), time.Now().UTC())
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no key with id %q (see `sluice keys list`)", fs.Arg(0))
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Revoked key %s (%s…) at %s.\n", k.ID, k.Prefix, k.RevokedAt.UTC().Format(time.RFC3339))
	return nil
}

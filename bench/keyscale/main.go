// Command keyscale measures what API keys cost `sluice serve` at start-up:
// it makes a config (and a key store) holding N keys the way users do —
// stored in the SQLite key store, declared in sluice.yaml by their
// SHA-256, or imported into the store from a JSON lines file by `sluice
// keys import` — then execs the real binary with --ready-file and reports
// the time from exec to the ready file and the server's resident memory
// once ready and after it has idled; in mode import, also how long the
// import took into an empty store, and again into the store it filled.
// One JSON line per run; see bench/README.md ("Keys: memory and
// start-up").
package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/sqlite"
	"github.com/sluicegw/sluice/policies"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "keyscale:", err)
		os.Exit(1)
	}
}

type options struct {
	sluice  string
	keys    []int
	modes   []string
	runs    int
	settle  time.Duration
	dir     string
	timeout time.Duration
}

func parse(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("keyscale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	keys := fs.String("keys", "0,10000,100000", "comma-separated key counts")
	modes := fs.String("mode", "store,declared", "comma-separated: store (keys in the SQLite key store), declared (keys in sluice.yaml), import (keys.jsonl imported by sluice keys import, timed)")
	fs.StringVar(&o.sluice, "sluice", "bin/sluice", "the sluice `binary` to exec")
	fs.IntVar(&o.runs, "runs", 3, "starts per (mode, keys); each is one JSON line")
	fs.DurationVar(&o.settle, "settle", 2*time.Second, "idle time after ready before the settled RSS is read")
	fs.StringVar(&o.dir, "dir", "", "work `directory` for the configs and stores (default: a temporary one, removed after)")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "longest wait for the ready file")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	var errs []error
	for _, s := range strings.Split(*keys, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("--keys: %q is not a count", s))
			continue
		}
		o.keys = append(o.keys, n)
	}
	for _, m := range strings.Split(*modes, ",") {
		if m = strings.TrimSpace(m); m != "store" && m != "declared" && m != "import" {
			errs = append(errs, fmt.Errorf("--mode: %q is not store, declared or import", m))
			continue
		}
		o.modes = append(o.modes, strings.TrimSpace(m))
	}
	if o.runs < 1 {
		errs = append(errs, errors.New("--runs must be at least 1"))
	}
	return o, errors.Join(errs...)
}

// result is one JSON line.
type result struct {
	Mode       string  `json:"mode"`
	Keys       int     `json:"keys"`
	Run        int     `json:"run"`            // -1 on the median line
	Stat       string  `json:"stat,omitempty"` // "median": each field the median of the runs
	ReadyMS    float64 `json:"ready_ms"`
	RSSKiB     int64   `json:"rss_kib"`     // VmRSS once the ready file exists
	HWMKiB     int64   `json:"hwm_kib"`     // VmHWM (peak RSS) then
	SettledKiB int64   `json:"settled_kib"` // VmRSS after --settle idle
	SettledHWM int64   `json:"settled_hwm_kib"`
	// The settled VmRSS in its two parts: RssAnon, the process's own
	// memory (heap, stacks, the runtime's), and RssFile, pages of the
	// binary and libraries mapped from the page cache. The second is
	// shared with the cache and reclaimable, and how much of the binary
	// it holds is the kernel's choice (readahead, fault-around, large
	// folios), not only the pages the server touched.
	SettledAnon int64 `json:"settled_anon_kib"`
	SettledFile int64 `json:"settled_file_kib"`
	// Mode import: `sluice keys import` of the N keys into an empty
	// store, and of the same file again (nothing to write).
	ImportMS   float64 `json:"import_ms,omitempty"`
	ReimportMS float64 `json:"reimport_ms,omitempty"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parse(args, stderr)
	if err != nil {
		return err
	}
	if _, err := os.Stat(o.sluice); err != nil {
		return fmt.Errorf("--sluice: %w (build it: make build)", err)
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "keyscale"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	enc := json.NewEncoder(stdout)
	for _, mode := range o.modes {
		for _, n := range o.keys {
			cfg, err := prepare(ctx, filepath.Join(dir, fmt.Sprintf("%s-%d", mode, n)), mode, n)
			if err != nil {
				return fmt.Errorf("prepare %s %d: %w", mode, n, err)
			}
			var rs []result
			for i := range o.runs {
				var imp, reimp float64
				if mode == "import" {
					if imp, reimp, err = importKeys(ctx, o, cfg); err != nil {
						return fmt.Errorf("%s %d run %d: %w", mode, n, i, err)
					}
				}
				r, err := measure(ctx, o, cfg)
				r.ImportMS, r.ReimportMS = imp, reimp
				if err != nil {
					return fmt.Errorf("%s %d run %d: %w", mode, n, i, err)
				}
				r.Mode, r.Keys, r.Run = mode, n, i
				if err := enc.Encode(r); err != nil {
					return err
				}
				rs = append(rs, r)
			}
			if len(rs) > 1 {
				if err := enc.Encode(median(rs)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// median is each measured field's median over rs (the lower middle one
// for an even count).
func median(rs []result) result {
	m := result{Mode: rs[0].Mode, Keys: rs[0].Keys, Run: -1, Stat: "median"}
	mid := func(get func(result) float64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = get(r)
		}
		sort.Float64s(vs)
		return vs[(len(vs)-1)/2]
	}
	m.ReadyMS = mid(func(r result) float64 { return r.ReadyMS })
	m.RSSKiB = int64(mid(func(r result) float64 { return float64(r.RSSKiB) }))
	m.HWMKiB = int64(mid(func(r result) float64 { return float64(r.HWMKiB) }))
	m.SettledKiB = int64(mid(func(r result) float64 { return float64(r.SettledKiB) }))
	m.SettledHWM = int64(mid(func(r result) float64 { return float64(r.SettledHWM) }))
	m.SettledAnon = int64(mid(func(r result) float64 { return float64(r.SettledAnon) }))
	m.SettledFile = int64(mid(func(r result) float64 { return float64(r.SettledFile) }))
	m.ImportMS = mid(func(r result) float64 { return r.ImportMS })
	m.ReimportMS = mid(func(r result) float64 { return r.ReimportMS })
	return m
}

// The generated population: one team per 100 keys (at least one), each
// with a model allow-list and request limits; every 10th key has its own
// allow-list, every 7th its own per-minute limit, every 5th an expiry.
const keysPerTeam = 100

func teamOf(i int) string { return "team-" + strconv.Itoa(i/keysPerTeam) }

func teamCount(n int) int { return max(1, (n+keysPerTeam-1)/keysPerTeam) }

func keyModels(i int) []string {
	if i%10 == 0 {
		return []string{"gpt-4o-mini"}
	}
	return nil
}

func keyLimits(i int) policies.Limits {
	if i%7 == 0 {
		return policies.Limits{Requests: policies.RateLimits{PerMinute: 600}}
	}
	return policies.Limits{}
}

var expiry = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func keyExpiry(i int) time.Time {
	if i%5 == 0 {
		return expiry
	}
	return time.Time{}
}

const configHead = `listen:
  grpc: 127.0.0.1:0
  admin: 127.0.0.1:0
  xds: 127.0.0.1:0

store:
  sqlite: store.db

ledger:
  sqlite: ledger.db

providers:
  - name: openai
    kind: openai-compatible
    base_url: http://127.0.0.1:9   # never contacted

models:
  - name: gpt-4o-mini
    provider: openai
  - name: gpt-4o
    provider: openai

pricing:
  gpt-4o-mini: {input: 150000, cached_input: 75000, output: 600000}
  gpt-4o: {input: 2500000, cached_input: 1250000, output: 10000000}

orgs:
  - name: bench
`

// prepare writes dir/sluice.yaml (and dir/store.db for mode store) holding
// n keys, and returns the config's path.
func prepare(ctx context.Context, dir, mode string, n int) (string, error) {
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "sluice.yaml")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	w := bufio.NewWriter(f)
	w.WriteString(configHead)
	rng := rand.NewChaCha8([32]byte{byte(n), byte(n >> 8), byte(n >> 16), 's', 'l', 'u', 'i', 'c', 'e'})
	if mode == "declared" || mode == "import" {
		w.WriteString("\nteams:\n")
		for t := range teamCount(n) {
			fmt.Fprintf(w, "  - name: team-%d\n    org: bench\n    models: [gpt-4o-mini, gpt-4o]\n    limits:\n      requests: {per_minute: 6000, per_day: 1000000}\n", t)
		}
	}
	switch mode {
	case "import":
		if err := writeImport(filepath.Join(dir, "keys.jsonl"), n, rng); err != nil {
			return "", err
		}
	case "declared":
		if n > 0 {
			w.WriteString("\nkeys:\n")
		}
		for i := range n {
			secret, err := apikey.Generate(rng)
			if err != nil {
				return "", err
			}
			h := apikey.Hash(secret.Reveal())
			fmt.Fprintf(w, "  - name: key-%d\n    team: %s\n    sha256: %s\n    prefix: %s\n", i, teamOf(i), hex.EncodeToString(h[:]), apikey.PublicPrefix(secret.Reveal()))
			if m := keyModels(i); m != nil {
				fmt.Fprintf(w, "    models: [%s]\n", strings.Join(m, ", "))
			}
			if l := keyLimits(i); l.Requests.PerMinute > 0 {
				fmt.Fprintf(w, "    limits:\n      requests: {per_minute: %d}\n", l.Requests.PerMinute)
			}
			if e := keyExpiry(i); !e.IsZero() {
				fmt.Fprintf(w, "    expires_at: %s\n", e.Format(time.RFC3339))
			}
		}
	case "store":
		if err := fillStore(ctx, filepath.Join(dir, "store.db"), n, rng); err != nil {
			return "", err
		}
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	return path, f.Close()
}

// fillStore creates the teams and n keys in the SQLite key store, as
// `sluice keys create` would make them, in batches of one transaction.
func fillStore(ctx context.Context, path string, n int, rng io.Reader) error {
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return err
	}
	defer st.Close()
	for t := range teamCount(n) {
		team := store.Team{Name: "team-" + strconv.Itoa(t), Org: "bench", Models: []string{"gpt-4o-mini", "gpt-4o"},
			Limits: policies.Limits{Requests: policies.RateLimits{PerMinute: 6000, PerDay: 1000000}}}
		if err := st.PutTeam(ctx, team); err != nil {
			return err
		}
	}
	const batch = 10000
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	keys := make([]store.Key, 0, batch)
	for i := range n {
		secret, err := apikey.Generate(rng)
		if err != nil {
			return err
		}
		id, err := apikey.NewID(rng)
		if err != nil {
			return err
		}
		keys = append(keys, store.Key{
			ID: id, Prefix: apikey.PublicPrefix(secret.Reveal()), Hash: apikey.Hash(secret.Reveal()),
			Team: teamOf(i), Name: "key-" + strconv.Itoa(i), Models: keyModels(i), Limits: keyLimits(i),
			CreatedAt: created.Add(time.Duration(i) * time.Second), ExpiresAt: keyExpiry(i),
		})
		if len(keys) == batch || i == n-1 {
			if err := st.CreateKeys(ctx, keys); err != nil {
				return err
			}
			keys = keys[:0]
		}
	}
	return nil
}

// importRecord is a line of the import file: the key itself, hashed by
// the import.
type importRecord struct {
	Key       string           `json:"key"`
	Team      string           `json:"team"`
	Name      string           `json:"name"`
	Models    []string         `json:"models,omitempty"`
	Limits    *policies.Limits `json:"limits,omitempty"`
	ExpiresAt string           `json:"expires_at,omitempty"`
}

// writeImport writes the population's n keys as JSON lines for `sluice
// keys import`.
func writeImport(path string, n int, rng io.Reader) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for i := range n {
		secret, err := apikey.Generate(rng)
		if err != nil {
			return err
		}
		rec := importRecord{Key: secret.Reveal(), Team: teamOf(i), Name: "key-" + strconv.Itoa(i), Models: keyModels(i)}
		if l := keyLimits(i); l.Requests.PerMinute > 0 {
			rec.Limits = &l
		}
		if e := keyExpiry(i); !e.IsZero() {
			rec.ExpiresAt = e.Format(time.RFC3339)
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return f.Close()
}

// importKeys empties the store beside cfg and imports keys.jsonl into it
// with the real binary, then imports it again, and returns how long each
// took in milliseconds.
func importKeys(ctx context.Context, o options, cfg string) (first, again float64, err error) {
	dir := filepath.Dir(cfg)
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(filepath.Join(dir, "store.db"+suffix)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, 0, err
		}
	}
	timed := func() (float64, error) {
		cmd := exec.CommandContext(ctx, o.sluice, "keys", "import", "--config", cfg, "--progress", "0", filepath.Join(dir, "keys.jsonl"))
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("sluice keys import: %v\n%s", err, out)
		}
		return float64(time.Since(start).Microseconds()) / 1000, nil
	}
	if first, err = timed(); err != nil {
		return 0, 0, err
	}
	again, err = timed()
	return first, again, err
}

// measure execs sluice serve on cfg, waits for the ready file and reads
// the server's memory, then stops it.
func measure(ctx context.Context, o options, cfg string) (result, error) {
	var r result
	ready := filepath.Join(filepath.Dir(cfg), "ready.json")
	os.Remove(ready)
	cmd := exec.CommandContext(ctx, o.sluice, "serve", "--config", cfg, "--ready-file", ready)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = io.Discard, &logs
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			return nil
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			return errors.New("sluice did not stop within 10s of SIGTERM")
		}
	}
	// Poll for the ready file: 1 ms is below the noise of a start.
	deadline := start.Add(o.timeout)
	for {
		if _, err := os.Stat(ready); err == nil {
			break
		}
		select {
		case err := <-exited:
			return r, fmt.Errorf("sluice exited before ready: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return r, fmt.Errorf("not ready within %s", o.timeout)
		}
		time.Sleep(time.Millisecond)
	}
	r.ReadyMS = float64(time.Since(start).Microseconds()) / 1000
	var err error
	if r.RSSKiB, r.HWMKiB, err = memory(cmd.Process.Pid); err != nil {
		stop()
		return r, err
	}
	select {
	case <-time.After(o.settle):
	case <-ctx.Done():
	}
	if r.SettledKiB, r.SettledHWM, err = memory(cmd.Process.Pid); err != nil {
		stop()
		return r, err
	}
	if r.SettledAnon, r.SettledFile, err = statusPair(cmd.Process.Pid, "RssAnon", "RssFile"); err != nil {
		stop()
		return r, err
	}
	return r, stop()
}

// memory reads VmRSS and VmHWM (KiB) from /proc/pid/status.
func memory(pid int) (rss, hwm int64, err error) {
	return statusPair(pid, "VmRSS", "VmHWM")
}

// statusPair reads two fields (KiB) of /proc/pid/status.
func statusPair(pid int, a, b string) (int64, int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	vals := map[string]int64{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != a && k != b) {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/status %s: %w", pid, k, err)
		}
		vals[k] = n
	}
	if len(vals) != 2 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no %s or %s", pid, a, b)
	}
	return vals[a], vals[b], nil
}

package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/sqlite"
)

// leaksSecret reports whether text holds the random part of secret in any
// letter case: an error that lower-cases what it quotes still gives most
// of the key away.
func leaksSecret(secret, text string) bool {
	return strings.Contains(strings.ToLower(text), strings.ToLower(secret[len(apikey.Prefix)+6:]))
}

// TestAttackKeysImportNeverEchoesAMisplacedSecret: a plain key that lands
// in the wrong place of a record (a CSV file without its header row,
// columns in another order than the header says, a key typed into the
// wrong JSON field) makes the record invalid, and the problem is reported
// without quoting the key: not on stdout, not on stderr, not in the error.
func TestAttackKeysImportNeverEchoesAMisplacedSecret(t *testing.T) {
	secrets := importSecrets(t, 40, 2)
	s0, s1 := secrets[0], secrets[1]
	for _, tt := range []struct{ name, file, content string }{
		{"csv without a header row", "k.csv", s0 + ",demo\n" + s1 + ",demo\n"},
		{"csv columns swapped", "k.csv", "key,team\ndemo," + s0 + "\n"},
		{"csv key in the rpm column", "k.csv", "key,team,rpm\n" + s0 + ",demo," + s1 + "\n"},
		{"csv key in the expires_at column", "k.csv", "key,team,expires_at\n" + s0 + ",demo," + s1 + "\n"},
		{"json key in team", "k.jsonl", `{"team": "` + s0 + `"}` + "\n"},
		{"json key in expires_at", "k.jsonl", `{"key": "` + s0 + `", "team": "demo", "expires_at": "` + s1 + `"}` + "\n"},
		{"json key in models", "k.jsonl", `{"key": "` + s0 + `", "team": "demo", "models": ["` + s1 + `"]}` + "\n"},
		{"json key as a field name", "k.jsonl", `{"team": "demo", "` + s0 + `": ""}` + "\n"},
		{"json key in a budget period", "k.jsonl", `{"key": "` + s0 + `", "team": "demo", "limits": {"budgets": [{"micro_usd": 1, "period": "` + s1 + `"}]}}` + "\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, skip := range []bool{false, true} {
				config := quickstart(t)
				file := importFile(t, config, tt.file, tt.content)
				args := []string{"keys", "import", "--config", config, file}
				if skip {
					args = append(args, "--skip-invalid")
				}
				out, errOut, err := run(t, args...)
				texts := []string{out, errOut}
				if err != nil {
					texts = append(texts, err.Error())
				}
				for _, s := range secrets {
					for _, text := range texts {
						if leaksSecret(s, text) {
							t.Errorf("--skip-invalid=%v: a key was printed:\n%s", skip, text)
						}
					}
				}
			}
		})
	}
}

// TestAttackKeysImportSummaryAfterAFailedWrite: another writer creates a
// key of the file while the import runs (after the importer read the
// store, before it writes its batch). The batch's transaction is refused
// whole, so the store keeps none of it, and the import says to run it
// again, which then completes. What the import prints must match what it
// wrote: no key of the refused batch counted as created.
func TestAttackKeysImportSummaryAfterAFailedWrite(t *testing.T) {
	config := quickstart(t)
	secrets := importSecrets(t, 41, 3)
	var b strings.Builder
	for _, s := range secrets {
		fmt.Fprintf(&b, `{"key": %q, "team": "demo"}`+"\n", s)
	}
	file := importFile(t, config, "k.jsonl", b.String())
	db := filepath.Join(filepath.Dir(config), "quickstart.db")

	// The store exists before the import reads it.
	if _, errOut, err := run(t, "keys", "list", "--config", config); err != nil {
		t.Fatalf("keys list: %v\n%s", err, errOut)
	}

	// The progress line after the first record is the moment to
	// intervene: the importer has read the store and queued that record.
	errOut := &hookWriter{at: "1 records read", hook: func() error {
		st, err := sqlite.Open(context.Background(), db)
		if err != nil {
			return err
		}
		defer st.Close()
		id, err := apikey.NewID(nil)
		if err != nil {
			return err
		}
		return st.CreateKey(context.Background(), store.Key{ID: id, Prefix: apikey.PublicPrefix(secrets[2]),
			Hash: apikey.Hash(secrets[2]), Team: "demo", CreatedAt: time.Now().UTC()})
	}}
	var out bytes.Buffer
	err := Run(t.Context(), []string{"keys", "import", "--config", config, "--progress", "1ns", file}, &out, errOut, noEnv)
	if errOut.hookErr != nil {
		t.Fatalf("the other writer: %v", errOut.hookErr)
	}
	if !errOut.fired {
		t.Fatalf("no progress line after the first record:\n%s", errOut.String())
	}
	if err == nil || !strings.Contains(err.Error(), "import the file again") {
		t.Fatalf("import over a concurrent writer: err = %v", err)
	}
	keys := listKeys(t, config)
	written := 0
	for _, s := range secrets[:2] {
		if _, ok := keys[apikey.HashHex(s)]; ok {
			written++
		}
	}
	if written != 0 && written != 2 {
		t.Errorf("%d of the batch's 2 new keys stored: a batch is all or nothing", written)
	}
	m := regexp.MustCompile(`created (\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no summary on stdout: %q", out.String())
	}
	if claimed, _ := strconv.Atoi(m[1]); claimed != written {
		t.Errorf("summary %q claims %d created; the store holds %d of the file's keys it did not hold before", strings.TrimSpace(out.String()), claimed, written)
	}

	// Importing again, as the error says, completes the import.
	out2, errOut2, err := run(t, "keys", "import", "--config", config, file)
	if err != nil || !strings.Contains(out2, "created 2, unchanged 1") {
		t.Errorf("import again: %v %q\n%s", err, out2, errOut2)
	}
	if n := len(listKeys(t, config)); n != 3 {
		t.Errorf("%d keys after the import again, want 3", n)
	}
	noSecret(t, secrets, out.String(), errOut.String(), err2s(err), out2, errOut2)
}

func err2s(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// hookWriter collects what is written and calls hook once, inside the
// write that first contains at.
type hookWriter struct {
	mu      sync.Mutex
	b       bytes.Buffer
	at      string
	hook    func() error
	fired   bool
	hookErr error
}

func (w *hookWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	if !w.fired && strings.Contains(w.b.String(), w.at) {
		w.fired = true
		w.hookErr = w.hook()
	}
	return len(p), nil
}

func (w *hookWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// withTeam adds a team "other" to the quickstart config.
func withTeam(t *testing.T, config string) {
	t.Helper()
	f, err := os.OpenFile(config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("  - name: other\n    org: acme\n"); err != nil {
		t.Fatal(err)
	}
}

// TestAttackKeysImportChangedAttributes: a record of a stored key that
// changes its team, its limits or its expiry is a conflict, named with
// what differs and left as stored, until --replace writes it, keeping the
// key's id; importing the replaced file again is unchanged.
func TestAttackKeysImportChangedAttributes(t *testing.T) {
	secrets := importSecrets(t, 42, 1)
	h := apikey.HashHex(secrets[0])
	base := `{"key": "` + secrets[0] + `", "team": "demo", "limits": {"requests": {"per_minute": 5}}, "expires_at": "2030-01-01"}` + "\n"
	for _, tt := range []struct{ name, line, diff string }{
		{"team", `{"key": "` + secrets[0] + `", "team": "other", "limits": {"requests": {"per_minute": 5}}, "expires_at": "2030-01-01"}`, `team "other", stored "demo"`},
		{"limits", `{"key": "` + secrets[0] + `", "team": "demo", "limits": {"requests": {"per_minute": 6}}, "expires_at": "2030-01-01"}`, "limits"},
		{"limits dropped", `{"key": "` + secrets[0] + `", "team": "demo", "expires_at": "2030-01-01"}`, "limits"},
		{"expiry", `{"key": "` + secrets[0] + `", "team": "demo", "limits": {"requests": {"per_minute": 5}}, "expires_at": "2031-01-01"}`, "expires_at"},
		{"expiry dropped", `{"key": "` + secrets[0] + `", "team": "demo", "limits": {"requests": {"per_minute": 5}}}`, "expires_at"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config := quickstart(t)
			withTeam(t, config)
			first := importFile(t, config, "first.jsonl", base)
			if _, errOut, err := run(t, "keys", "import", "--config", config, first); err != nil {
				t.Fatalf("import: %v\n%s", err, errOut)
			}
			before := listKeys(t, config)[h]
			rev := storeRev(t, config)
			changed := importFile(t, config, "changed.jsonl", tt.line+"\n")
			out, errOut, err := run(t, "keys", "import", "--config", config, changed)
			if err == nil || !strings.Contains(out, "conflicts 1") || !strings.Contains(errOut, "changed.jsonl:1: conflict") || !strings.Contains(errOut, tt.diff) {
				t.Errorf("changed record without --replace: %v %q\n%s", err, out, errOut)
			}
			if got := storeRev(t, config); got != rev {
				t.Errorf("a conflict was written: revision %d, was %d", got, rev)
			}
			out, errOut, err = run(t, "keys", "import", "--config", config, "--replace", changed)
			if err != nil || !strings.Contains(out, "replaced 1") {
				t.Fatalf("--replace: %v %q\n%s", err, out, errOut)
			}
			after := listKeys(t, config)[h]
			if after.ID != before.ID {
				t.Errorf("id %s after --replace, was %s", after.ID, before.ID)
			}
			out, errOut, err = run(t, "keys", "import", "--config", config, changed)
			if err != nil || !strings.Contains(out, "created 0, unchanged 1, conflicts 0") {
				t.Errorf("the replaced file again: %v %q\n%s", err, out, errOut)
			}
			noSecret(t, secrets, out, errOut)
		})
	}
}

// TestAttackKeysImportSameKeyTwoWays: one key given plain and by its hash
// in one file is one key: the second record is unchanged, or a conflict
// when it contradicts the first; never a second key or a store error.
func TestAttackKeysImportSameKeyTwoWays(t *testing.T) {
	config := quickstart(t)
	secrets := importSecrets(t, 43, 1)
	h := apikey.HashHex(secrets[0])
	file := importFile(t, config, "k.jsonl", `{"key": "`+secrets[0]+`", "team": "demo", "name": "a"}
{"sha256": "`+h+`", "team": "demo", "name": "a"}
{"sha256": "`+h+`", "prefix": "sk-sluice-zzzzzz", "team": "demo", "name": "a"}
`)
	out, errOut, err := run(t, "keys", "import", "--config", config, "--replace", file)
	if !strings.Contains(out, "3 records: created 1, unchanged 1, conflicts 1") || !strings.Contains(errOut, "k.jsonl:3: conflict: the same key as line 1") {
		t.Errorf("one key two ways: %v %q\n%s", err, out, errOut)
	}
	keys := listKeys(t, config)
	if k := keys[h]; len(keys) != 1 || k.Prefix != secrets[0][:16] {
		t.Errorf("keys after import: %+v", keys)
	}
	noSecret(t, secrets, out, errOut, err2s(err))
}

// TestAttackKeysImportOddBytes: bytes a damaged or foreign file holds
// either make a clear error at their line (the records before it stored,
// none after) or import as keys that list as valid JSON and import again
// unchanged.
func TestAttackKeysImportOddBytes(t *testing.T) {
	secrets := importSecrets(t, 44, 3)
	good := func(i int) string { return `{"key": "` + secrets[i] + `", "team": "demo"}` + "\n" }
	for _, tt := range []struct {
		name, file, content string
		wantErr             string // "" for an import that succeeds
		imported            int
	}{
		{"NUL in a JSON string", "k.jsonl", good(0) + `{"key": "` + secrets[1] + `", "team": "demo", "name": "a` + "\x00" + `b"}` + "\n", "k.jsonl:2: invalid JSON", 1},
		{"NUL in a CSV name", "k.csv", "key,team,name\n" + secrets[0] + ",demo,a\x00b\n", "k.csv:2: name: must not contain control characters", 0},
		{"NUL between records", "k.jsonl", good(0) + "\x00\n" + good(1), "k.jsonl:2:", 1},
		{"invalid UTF-8 in a CSV name", "k.csv", "key,team,name\n" + secrets[0] + ",demo,a\xff\xfeb\n", "", 1},
		{"invalid UTF-8 in a JSON name", "k.jsonl", `{"key": "` + secrets[0] + `", "team": "demo", "name": "a` + "\xff" + `b"}` + "\n", "", 1},
		{"CSV quoted newline", "k.csv", "key,team,name\n" + secrets[0] + ",demo,a\n" + secrets[1] + ",demo,\"two\nlines\"\n" + secrets[2] + ",demo,c\n", "k.csv:3:", 1},
		{"truncated last JSON line", "k.jsonl", good(0) + good(1)[:40], "k.jsonl:2: invalid JSON", 1},
		{"last line without a line end", "k.jsonl", good(0) + strings.TrimSuffix(good(1), "\n"), "", 2},
		{"CR only line ends", "k.jsonl", strings.ReplaceAll(good(0)+good(1), "\n", "\r"), "k.jsonl:1:", 0},
		{"BOM on a later line", "k.jsonl", good(0) + "\xef\xbb\xbf" + good(1), "k.jsonl:2: want a JSON object per line", 1},
		{"a second BOM on the first line", "k.jsonl", "\xef\xbb\xbf\xef\xbb\xbf" + good(0), "k.jsonl:1: want a JSON object per line", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config := quickstart(t)
			file := importFile(t, config, tt.file, tt.content)
			out, errOut, err := run(t, "keys", "import", "--config", config, "--batch", "1", file)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("import: %v\n%s", err, errOut)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("err = %v, want %q", err, tt.wantErr)
			}
			list, _, lerr := run(t, "keys", "list", "--config", config, "--json")
			if lerr != nil {
				t.Fatal(lerr)
			}
			n := 0
			for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
				if line == "" {
					continue
				}
				n++
				if !json.Valid([]byte(line)) {
					t.Errorf("keys list --json wrote invalid JSON: %q", line)
				}
			}
			if n != tt.imported {
				t.Errorf("%d keys stored, want %d", n, tt.imported)
			}
			if tt.wantErr == "" {
				out2, errOut2, err := run(t, "keys", "import", "--config", config, file)
				if err != nil || !strings.Contains(out2, "the store is unchanged") {
					t.Errorf("the file again: %v %q\n%s", err, out2, errOut2)
				}
			}
			noSecret(t, secrets, out, errOut, err2s(err))
		})
	}
}

// TestAttackKeysImportEdgeValues: names at the length limit, limits at
// and past int64's ends, expiries at and past the store's latest time and
// before its earliest: each is stored exactly and imports again unchanged,
// or is refused at its line with what is wrong.
func TestAttackKeysImportEdgeValues(t *testing.T) {
	secrets := importSecrets(t, 45, 1)
	rec := func(extra string) string { return `{"key": "` + secrets[0] + `", "team": "demo"` + extra + "}\n" }
	latest := store.LatestTime()
	for _, tt := range []struct {
		name, content, wantErr string
	}{
		{"name of 128 bytes", rec(`, "name": "` + strings.Repeat("n", 128) + `"`), ""},
		{"name of 128 bytes in 2-byte runes", rec(`, "name": "` + strings.Repeat("é", 64) + `"`), ""},
		{"name of 129 bytes", rec(`, "name": "` + strings.Repeat("n", 129) + `"`), "name: at most 128 bytes, got 129"},
		{"name of 129 bytes in 3-byte runes", rec(`, "name": "` + strings.Repeat("€", 43) + `"`), "name: at most 128 bytes, got 129"},
		{"rpm MaxInt64", rec(`, "limits": {"requests": {"per_minute": ` + strconv.FormatInt(math.MaxInt64, 10) + `}}`), ""},
		{"token limit MaxInt64", rec(`, "limits": {"tokens": {"total": {"per_day": ` + strconv.FormatInt(math.MaxInt64, 10) + `}}}`), ""},
		{"budget MaxInt64 micro-dollars", rec(`, "limits": {"budgets": [{"micro_usd": ` + strconv.FormatInt(math.MaxInt64, 10) + `, "period": "day"}]}`), ""},
		{"rpm 2^63", rec(`, "limits": {"requests": {"per_minute": 9223372036854775808}}`), "k.jsonl:1: limits"},
		{"rpm -1", rec(`, "limits": {"requests": {"per_minute": -1}}`), "k.jsonl:1: limits.requests.per_minute"},
		{"rpm MinInt64", rec(`, "limits": {"requests": {"per_minute": ` + strconv.FormatInt(math.MinInt64, 10) + `}}`), "k.jsonl:1: limits.requests.per_minute"},
		{"budget 0", rec(`, "limits": {"budgets": [{"micro_usd": 0, "period": "day"}]}`), "micro_usd: must be more than 0"},
		{"expiry at the latest time", rec(`, "expires_at": "` + latest.Format(time.RFC3339) + `"`), ""},
		{"expiry at the latest time, another zone", rec(`, "expires_at": "` + latest.In(time.FixedZone("", -8*3600)).Format(time.RFC3339) + `"`), ""},
		{"expiry a second past the latest time", rec(`, "expires_at": "` + latest.Add(time.Second).Format(time.RFC3339) + `"`), "expires_at: must be no later than"},
		{"expiry a nanosecond past the latest time", rec(`, "expires_at": "` + latest.Add(time.Nanosecond).Format(time.RFC3339Nano) + `"`), "expires_at: must be no later than"},
		{"expiry the day after the latest time", rec(`, "expires_at": "2262-04-12"`), "expires_at: must be no later than"},
		{"expiry in year 9999", rec(`, "expires_at": "9999-12-31"`), "expires_at: must be no later than"},
		{"expiry before 1678", rec(`, "expires_at": "1600-01-01"`), "k.jsonl:1: expires_at:"},
		{"expiry at the epoch", rec(`, "expires_at": "1970-01-01T00:00:00Z"`), "k.jsonl:1: expires_at:"},
		{"expiry a second ago", rec(`, "expires_at": "` + time.Now().Add(-time.Second).UTC().Format(time.RFC3339) + `"`), "is in the past"},
		{"expiry with nanoseconds", rec(`, "expires_at": "2030-01-01T00:00:00.123456789Z"`), ""},
		{"expiry in a far zone", rec(`, "expires_at": "2030-01-01T00:00:00+14:00"`), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config := quickstart(t)
			file := importFile(t, config, "k.jsonl", tt.content)
			out, errOut, err := run(t, "keys", "import", "--config", config, file)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("err = %v, want %q\n%s", err, tt.wantErr, out)
				}
				if n := len(listKeys(t, config)); n != 0 {
					t.Errorf("%d keys stored from a refused record", n)
				}
				noSecret(t, secrets, out, errOut, err2s(err))
				return
			}
			if err != nil || !strings.Contains(out, "created 1") {
				t.Fatalf("import: %v %q\n%s", err, out, errOut)
			}
			out2, errOut2, err := run(t, "keys", "import", "--config", config, file)
			if err != nil || !strings.Contains(out2, "unchanged 1, conflicts 0") {
				t.Errorf("the same file again: %v %q\n%s", err, out2, errOut2)
			}
			noSecret(t, secrets, out, errOut, out2, errOut2)
		})
	}
}

// TestAttackKeysImportReplaceWhileServing: a running server takes an
// import's replacement as it takes a new key: a key replaced with a
// request limit of 1 a minute is refused (429) within a second, while
// the server keeps answering.
func TestAttackKeysImportReplaceWhileServing(t *testing.T) {
	config := quickstart(t)
	s := startServe(t, config, "--demo-key")
	az, _ := s.client(t)
	secrets := importSecrets(t, 46, 1)
	open := importFile(t, config, "open.jsonl", `{"key": "`+secrets[0]+`", "team": "demo"}`+"\n")
	if out, errOut, err := run(t, "keys", "import", "--config", config, open); err != nil || !strings.Contains(out, "created 1") {
		t.Fatalf("import: %v %q\n%s", err, out, errOut)
	}
	within(t, time.Second, "imported key accepted", func() bool { return checkAs(t, az, secrets[0]) == 200 })
	limited := importFile(t, config, "limited.jsonl", `{"key": "`+secrets[0]+`", "team": "demo", "limits": {"requests": {"per_minute": 1}}}`+"\n")
	if out, errOut, err := run(t, "keys", "import", "--config", config, "--replace", limited); err != nil || !strings.Contains(out, "replaced 1") {
		t.Fatalf("import --replace: %v %q\n%s", err, out, errOut)
	}
	took := within(t, time.Second, "replaced limit enforced", func() bool { return checkAs(t, az, secrets[0]) == 429 })
	t.Logf("replaced limit enforced after %s", took)
	if got := checkAs(t, az, s.demoKey); got != 200 {
		t.Errorf("the demo key after the import: %d, want 200", got)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("serve returned %v", err)
	}
	noSecret(t, secrets, s.stdout.String(), s.stderr.String())
}

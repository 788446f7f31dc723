package app

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/store/sqlite"
)

// importSecrets makes n well-formed keys, the same for the same seed.
func importSecrets(t *testing.T, seed byte, n int) []string {
	t.Helper()
	rng := rand.NewChaCha8([32]byte{seed, 'i', 'm', 'p'})
	var out []string
	for range n {
		s, err := apikey.Generate(rng)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s.Reveal())
	}
	return out
}

// importFile writes content beside config and returns its path.
func importFile(t *testing.T, config, name, content string) string {
	t.Helper()
	path := filepath.Join(filepath.Dir(config), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// listedKey is what `sluice keys list --json` prints of a key.
type listedKey struct {
	ID     string   `json:"id"`
	Prefix string   `json:"prefix"`
	SHA256 string   `json:"sha256"`
	Team   string   `json:"team"`
	Name   string   `json:"name"`
	State  string   `json:"state"`
	Models []string `json:"models"`
	Limits struct {
		Requests struct {
			PerMinute int64 `json:"per_minute"`
		} `json:"requests"`
		Budgets []struct {
			MicroUSD int64 `json:"micro_usd"`
			Window   int64 `json:"window"`
		} `json:"budgets"`
	} `json:"limits"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// listKeys returns the store's keys by hash, through the CLI.
func listKeys(t *testing.T, config string) map[string]listedKey {
	t.Helper()
	out, _, err := run(t, "keys", "list", "--config", config, "--json")
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]listedKey{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var k listedKey
		if err := json.Unmarshal([]byte(line), &k); err != nil {
			t.Fatalf("keys list --json: %v\n%s", err, line)
		}
		keys[k.SHA256] = k
	}
	return keys
}

// storeRev is the key store's revision: unchanged means nothing was
// written.
func storeRev(t *testing.T, config string) int64 {
	t.Helper()
	st, err := sqlite.Open(t.Context(), filepath.Join(filepath.Dir(config), "quickstart.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ch, err := st.Changes(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return ch.Rev
}

// noSecret fails t if any of the secrets appears in any of the texts.
func noSecret(t *testing.T, secrets []string, texts ...string) {
	t.Helper()
	for _, s := range secrets {
		for _, text := range texts {
			if strings.Contains(text, s[len(apikey.Prefix)+6:]) {
				t.Fatalf("a secret was printed:\n%s", text)
			}
		}
	}
}

// TestKeysImport: JSON lines and CSV, keys given plain or by hash, with a
// duplicate line, import with their attributes; no secret is printed;
// importing the file again writes nothing and says so.
func TestKeysImport(t *testing.T) {
	secrets := importSecrets(t, 1, 2)
	h0, h1 := apikey.HashHex(secrets[0]), apikey.HashHex(secrets[1])
	for _, tt := range []struct {
		name, file, content string
	}{
		{"jsonl plain", "keys.jsonl",
			`{"key": "` + secrets[0] + `", "team": "demo", "name": "ci", "models": ["gpt-4o-mini"], "expires_at": "2030-01-31"}
{"key": "` + secrets[1] + `", "team": "demo", "limits": {"requests": {"per_minute": 60}, "budgets": [{"micro_usd": 100, "period": "rolling", "window": "24h"}]}}
{"key": "` + secrets[0] + `", "team": "demo", "name": "ci", "models": ["gpt-4o-mini"], "expires_at": "2030-01-31"}
`},
		{"jsonl hashed", "keys.ndjson",
			`{"sha256": "` + h0 + `", "prefix": "` + secrets[0][:16] + `", "team": "demo", "name": "ci", "models": ["gpt-4o-mini"], "expires_at": "2030-01-31T00:00:00Z"}
{"sha256": "` + h1 + `", "team": "demo", "limits": {"requests": {"per_minute": 60}, "budgets": [{"micro_usd": 100, "period": "rolling", "window": "24h"}]}}
{"sha256": "` + h0 + `", "prefix": "` + secrets[0][:16] + `", "team": "demo", "name": "ci", "models": ["gpt-4o-mini"], "expires_at": "2030-01-31T00:00:00Z"}
`},
		{"csv plain", "keys.csv",
			"key,team,name,models,rpm,limits,expires_at\n" +
				secrets[0] + ",demo,ci,gpt-4o-mini,,,2030-01-31\n" +
				secrets[1] + `,demo,,,,"{""requests"": {""per_minute"": 60}, ""budgets"": [{""micro_usd"": 100, ""period"": ""rolling"", ""window"": ""24h""}]}",` + "\n" +
				secrets[0] + ",demo,ci,gpt-4o-mini,,,2030-01-31\n"},
		{"csv hashed", "keys.csv",
			"sha256,prefix,team,name,models,limits,expires_at\n" +
				h0 + "," + secrets[0][:16] + ",demo,ci,gpt-4o-mini,,2030-01-31\n" +
				h1 + `,,demo,,,"{""requests"": {""per_minute"": 60}, ""budgets"": [{""micro_usd"": 100, ""period"": ""rolling"", ""window"": ""24h""}]}",` + "\n" +
				h0 + "," + secrets[0][:16] + ",demo,ci,gpt-4o-mini,,2030-01-31\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config := quickstart(t)
			file := importFile(t, config, tt.file, tt.content)
			out, errOut, err := run(t, "keys", "import", "--config", config, file)
			if err != nil {
				t.Fatalf("import: %v\n%s", err, errOut)
			}
			if !strings.Contains(out, "3 records: created 2, unchanged 1, conflicts 0") {
				t.Errorf("first import: %q", out)
			}
			keys := listKeys(t, config)
			a, b := keys[h0], keys[h1]
			if len(keys) != 2 || a.Team != "demo" || a.Name != "ci" || a.Prefix != secrets[0][:16] ||
				len(a.Models) != 1 || a.Models[0] != "gpt-4o-mini" || a.ExpiresAt == nil || !a.ExpiresAt.Equal(time.Date(2030, 1, 31, 0, 0, 0, 0, time.UTC)) {
				t.Errorf("first key: %+v (of %d)", a, len(keys))
			}
			if b.Team != "demo" || b.Limits.Requests.PerMinute != 60 || len(b.Limits.Budgets) != 1 ||
				b.Limits.Budgets[0].Window != int64(24*time.Hour) || b.ExpiresAt != nil || b.State != "active" {
				t.Errorf("second key: %+v", b)
			}
			rev := storeRev(t, config)
			out2, errOut2, err := run(t, "keys", "import", "--config", config, file)
			if err != nil {
				t.Fatalf("second import: %v\n%s", err, errOut2)
			}
			if !strings.Contains(out2, "3 records: created 0, unchanged 3, conflicts 0") || !strings.Contains(out2, "the store is unchanged") {
				t.Errorf("second import: %q", out2)
			}
			if got := storeRev(t, config); got != rev {
				t.Errorf("store revision %d after the second import, %d before: it wrote", got, rev)
			}
			list, _, _ := run(t, "keys", "list", "--config", config)
			noSecret(t, secrets, out, errOut, out2, errOut2, list)
		})
	}
}

// TestKeysImportConflict: a stored key imported with other attributes is
// a conflict, reported at its line and left as stored (the command fails
// so that a script notices) until --replace overwrites it, keeping its id;
// a file that contradicts itself keeps its first record; a revoked key is
// never revived.
func TestKeysImportConflict(t *testing.T) {
	config := quickstart(t)
	secrets := importSecrets(t, 2, 3)
	line := func(i int, name string, rpm int) string {
		return fmt.Sprintf(`{"key": %q, "team": "demo", "name": %q, "limits": {"requests": {"per_minute": %d}}}`+"\n", secrets[i], name, rpm)
	}
	first := importFile(t, config, "first.jsonl", line(0, "a", 1)+line(1, "b", 1)+line(2, "c", 1))
	if _, errOut, err := run(t, "keys", "import", "--config", config, first); err != nil {
		t.Fatalf("import: %v\n%s", err, errOut)
	}
	before := listKeys(t, config)
	rev := storeRev(t, config)

	changed := importFile(t, config, "changed.jsonl", line(0, "a", 1)+line(1, "renamed", 5)+line(2, "c", 1))
	out, errOut, err := run(t, "keys", "import", "--config", config, changed)
	if err == nil || !strings.Contains(err.Error(), "1 conflict left as stored") || !strings.Contains(err.Error(), "--replace") {
		t.Errorf("import with a conflict: err = %v", err)
	}
	if !strings.Contains(out, "created 0, unchanged 2, conflicts 1") {
		t.Errorf("summary: %q", out)
	}
	id := before[apikey.HashHex(secrets[1])].ID
	if want := regexp.MustCompile(`changed\.jsonl:2: conflict: key ` + id + ` \(sk-sluice-\w{6}…\) is stored with other attributes \(name "renamed", stored "b", limits\)`); !want.MatchString(errOut) {
		t.Errorf("stderr lacks the conflict at line 2:\n%s", errOut)
	}
	if got := storeRev(t, config); got != rev {
		t.Errorf("a conflict was written: revision %d, was %d", got, rev)
	}

	out, errOut, err = run(t, "keys", "import", "--config", config, "--replace", changed)
	if err != nil || !strings.Contains(out, "created 0, unchanged 2, conflicts 0, replaced 1") {
		t.Fatalf("--replace: %v %q\n%s", err, out, errOut)
	}
	after := listKeys(t, config)[apikey.HashHex(secrets[1])]
	if after.ID != id || after.Name != "renamed" || after.Limits.Requests.PerMinute != 5 {
		t.Errorf("replaced key: %+v; want id %s, name renamed, 5 rpm", after, id)
	}

	// The file contradicts itself: the first record stands, replace or not.
	twice := importFile(t, config, "twice.jsonl", line(0, "a", 1)+line(0, "other", 1))
	out, errOut, err = run(t, "keys", "import", "--config", config, "--replace", twice)
	if err != nil || !strings.Contains(out, "unchanged 1, conflicts 1") ||
		!strings.Contains(errOut, `twice.jsonl:2: conflict: the same key as line 1`) {
		t.Errorf("a file against itself: %v %q\n%s", err, out, errOut)
	}

	// Revoked keys stay revoked.
	revokedID := before[apikey.HashHex(secrets[2])].ID
	if _, _, err := run(t, "keys", "revoke", "--config", config, revokedID); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = run(t, "keys", "import", "--config", config, "--replace", first)
	if err != nil || !strings.Contains(out, "revoked (left revoked) 1") || !strings.Contains(errOut, "first.jsonl:3: key "+revokedID) {
		t.Errorf("import of a revoked key: %v %q\n%s", err, out, errOut)
	}
	if k := listKeys(t, config)[apikey.HashHex(secrets[2])]; k.State != "revoked" {
		t.Errorf("revoked key after import: %s", k.State)
	}
	noSecret(t, secrets, out, errOut)
}

// TestKeysImportBadRecords: a bad record stops the import at its line with
// file:line, what is wrong and what to do; the records before it are
// imported (in whole batches: --batch 2 puts the bad line in the middle
// of one), none from it on; and a secret in a bad record is not echoed.
func TestKeysImportBadRecords(t *testing.T) {
	secrets := importSecrets(t, 3, 4)
	good := func(i int) string { return fmt.Sprintf(`{"key": %q, "team": "demo"}`, secrets[i]) + "\n" }
	for _, tt := range []struct {
		name, file, content string
		want                []string
		imported            int
	}{
		{"missing team", "k.jsonl", good(0) + good(1) + `{"key": "` + secrets[2] + `"}` + "\n" + good(3),
			[]string{"k.jsonl:3: team: required"}, 2},
		{"unknown team", "k.jsonl", good(0) + `{"key": "` + secrets[2] + `", "team": "nope"}` + "\n",
			[]string{`k.jsonl:2: team: unknown team "nope" (teams: demo); create it first`}, 1},
		{"bad hash length", "k.jsonl", good(0) + good(1) + good(2) + `{"sha256": "` + apikey.HashHex(secrets[3])[:63] + `", "team": "demo"}` + "\n",
			[]string{"k.jsonl:4: sha256: must be 64 lower-case hex characters, got 63 characters"}, 3},
		{"key in the hash field", "k.jsonl", `{"sha256": "` + secrets[0] + `", "team": "demo"}` + "\n",
			[]string{"k.jsonl:1: sha256: looks like a key, not its SHA-256"}, 0},
		{"malformed key", "k.jsonl", `{"key": "` + secrets[0][:30] + `", "team": "demo"}` + "\n",
			[]string{"k.jsonl:1: key: the API key is too short"}, 0},
		{"unknown field", "k.jsonl", good(0) + `{"key": "` + secrets[1] + `", "tean": "demo"}` + "\n",
			[]string{`k.jsonl:2: unknown field "tean" (fields: key, sha256, prefix, team, name, models, limits, expires_at)`}, 1},
		{"wrong type", "k.jsonl", `{"key": "` + secrets[1] + `", "team": "demo", "models": "gpt-4o"}` + "\n",
			[]string{"k.jsonl:1: models: want a list, got a JSON string"}, 0},
		{"not JSON", "k.jsonl", good(0) + "team=demo\n", []string{"k.jsonl:2: want a JSON object per line"}, 1},
		{"model matching nothing", "k.jsonl", `{"key": "` + secrets[1] + `", "team": "demo", "models": ["gemini*"]}` + "\n",
			[]string{"k.jsonl:1: models[0]:"}, 0},
		{"past expiry", "k.jsonl", `{"key": "` + secrets[1] + `", "team": "demo", "expires_at": "2001-01-01"}` + "\n",
			[]string{"k.jsonl:1: expires_at: 2001-01-01T00:00:00Z is in the past"}, 0},
		{"a 1 MiB line", "k.jsonl", good(0) + `{"team": "demo", "name": "` + strings.Repeat("x", 1<<20) + `"}` + "\n" + good(1),
			[]string{"k.jsonl:2: the line is longer than 64 KiB"}, 1},
		{"empty file", "k.jsonl", "", []string{"k.jsonl: empty: no records to import"}, 0},
		{"blank lines only", "k.jsonl", "\n  \r\n", []string{"k.jsonl: empty"}, 0},
		{"empty CSV", "k.csv", "", []string{"k.csv: empty: want a header row"}, 0},
		{"CSV unknown column", "k.csv", "key,team,colour\n", []string{`k.csv:1: the header row: unknown column "colour"`}, 0},
		{"CSV without team", "k.csv", "key,name\n", []string{"k.csv:1: the header row: want a team column"}, 0},
		{"CSV field count", "k.csv", "key,team\n" + secrets[0] + ",demo\n" + secrets[1] + ",demo,extra\n",
			[]string{"k.csv:3: want 2 fields, as the header row has, got 3"}, 1},
		{"CSV bad rpm", "k.csv", "key,team,rpm\n" + secrets[0] + ",demo,lots\n", []string{`k.csv:2: rpm: want a whole number, got "lots"`}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config := quickstart(t)
			file := importFile(t, config, tt.file, tt.content)
			_, errOut, err := run(t, "keys", "import", "--config", config, "--batch", "2", file)
			if err == nil {
				t.Fatalf("import succeeded; stderr:\n%s", errOut)
			}
			for _, w := range append(tt.want, filepath.Dir(config)) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant %q", err, w)
				}
			}
			record := !strings.Contains(tt.want[0], "empty") && !strings.Contains(tt.want[0], "header row")
			if record && !strings.Contains(err.Error(), "Fix the line and import the file again") {
				t.Errorf("err does not say what to do: %v", err)
			}
			if got := len(listKeys(t, config)); got != tt.imported {
				t.Errorf("%d keys imported; want the %d before the bad line", got, tt.imported)
			}
			noSecret(t, secrets, err.Error(), errOut)
		})
	}
}

// TestKeysImportSkipInvalid: with --skip-invalid every bad record is
// reported and skipped and every valid one imported.
func TestKeysImportSkipInvalid(t *testing.T) {
	config := quickstart(t)
	secrets := importSecrets(t, 4, 3)
	file := importFile(t, config, "k.jsonl", fmt.Sprintf(`{"key": %q, "team": "demo"}
{"key": %q}
{"team": "demo", "name": "`+strings.Repeat("x", 1<<20)+`"}
{"key": %q, "team": "demo"}
`, secrets[0], secrets[1], secrets[2]))
	out, errOut, err := run(t, "keys", "import", "--config", config, "--skip-invalid", "--batch", "1", file)
	if err != nil {
		t.Fatalf("import: %v\n%s", err, errOut)
	}
	if !strings.Contains(out, "4 records: created 2, unchanged 0, conflicts 0, invalid (skipped) 2") {
		t.Errorf("summary: %q", out)
	}
	for _, want := range []string{"k.jsonl:2: team: required (skipped)", "k.jsonl:3: the line is longer than 64 KiB"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut)
		}
	}
	keys := listKeys(t, config)
	if _, ok := keys[apikey.HashHex(secrets[2])]; len(keys) != 2 || !ok {
		t.Errorf("imported %v; want the first and the fourth line's keys", keys)
	}
}

// TestKeysImportLineEnds: a byte-order mark and CRLF line ends, as
// spreadsheet programs write them, are read as plain lines; the format
// can be named by flag, flags may follow FILE.
func TestKeysImportLineEnds(t *testing.T) {
	secrets := importSecrets(t, 5, 2)
	for _, tt := range []struct{ name, file, content string }{
		{"jsonl", "k.txt", "\xef\xbb\xbf" + `{"key": "` + secrets[0] + `", "team": "demo", "name": "n"}` + "\r\n\r\n" + `{"key": "` + secrets[1] + `", "team": "demo"}` + "\r\n"},
		{"csv", "k.txt", "\xef\xbb\xbfkey,team,name\r\n" + secrets[0] + ",demo,n\r\n" + secrets[1] + ",demo,\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			config := quickstart(t)
			file := importFile(t, config, tt.file, tt.content)
			if _, errOut, err := run(t, "keys", "import", "--config", config, file); !errors.Is(err, errUsage) || !strings.Contains(errOut, "pass --format jsonl or --format csv") {
				t.Errorf("import of %s without --format: %v\n%s", tt.file, err, errOut)
			}
			out, errOut, err := run(t, "keys", "import", file, "--config", config, "--format", tt.name)
			if err != nil || !strings.Contains(out, "created 2") {
				t.Fatalf("import: %v %q\n%s", err, out, errOut)
			}
			if k := listKeys(t, config)[apikey.HashHex(secrets[0])]; k.Name != "n" {
				t.Errorf("first key's name %q; want n (no BOM, no CR)", k.Name)
			}
		})
	}
}

// TestKeysImportProgress: a long import reports its progress on stderr.
func TestKeysImportProgress(t *testing.T) {
	config := quickstart(t)
	secrets := importSecrets(t, 6, 5)
	var b strings.Builder
	for _, s := range secrets {
		fmt.Fprintf(&b, "%s,demo\n", s)
	}
	b.WriteString(secrets[0] + ",demo\n")
	file := importFile(t, config, "k.csv", "key,team\n"+b.String())
	out, errOut, err := run(t, "keys", "import", "--config", config, "--batch", "2", "--progress", "1ns", file)
	if err != nil {
		t.Fatal(err)
	}
	notes := regexp.MustCompile(`(?m)^keys import: (\d+) records read, (\d+) created, (\d+) unchanged, 0 conflicts, \d+ records/s$`).FindAllStringSubmatch(errOut, -1)
	if len(notes) == 0 || notes[len(notes)-1][1] != "6" || notes[len(notes)-1][2] != "5" || notes[len(notes)-1][3] != "1" {
		t.Errorf("progress lines %v in stderr:\n%s", notes, errOut)
	}
	if !strings.Contains(out, "6 records: created 5, unchanged 1, conflicts 0") {
		t.Errorf("summary: %q", out)
	}
	if _, errOut, _ := run(t, "keys", "import", "--config", config, "--progress", "0", file); errOut != "" {
		t.Errorf("--progress 0 printed:\n%s", errOut)
	}
}

// TestKeysImportServeSeesKeys: keys imported while `sluice serve` runs on
// the same store are accepted by it within a second, through the store's
// change feed, whether imported plain or by hash.
func TestKeysImportServeSeesKeys(t *testing.T) {
	config := quickstart(t)
	s := startServe(t, config)
	az, _ := s.client(t)
	secrets := importSecrets(t, 7, 2)
	for _, sec := range secrets {
		if got := checkAs(t, az, sec); got != 401 {
			t.Fatalf("a key not yet imported: %d, want 401", got)
		}
	}
	file := importFile(t, config, "k.jsonl", fmt.Sprintf(`{"key": %q, "team": "demo"}
{"sha256": %q, "team": "demo"}
`, secrets[0], apikey.HashHex(secrets[1])))
	if out, errOut, err := run(t, "keys", "import", "--config", config, file); err != nil || !strings.Contains(out, "created 2") {
		t.Fatalf("import: %v %q\n%s", err, out, errOut)
	}
	for _, sec := range secrets {
		took := within(t, time.Second, "imported key accepted", func() bool { return checkAs(t, az, sec) == 200 })
		t.Logf("imported key accepted after %s", took)
	}
	if err := s.stop(); err != nil {
		t.Fatalf("serve returned %v", err)
	}
}

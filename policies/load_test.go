package policies

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/providerkind"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/bad")

// testEnv is the environment the test files see. Its values are
// distinctive so that tests can assert none of them leaks into a problem.
var testEnv = map[string]string{
	"OPENAI_API_KEY":       "sk-test-SECRET-openai",
	"ANTHROPIC_API_KEY":    "sk-ant-test-SECRET-anthropic",
	"AZURE_OPENAI_API_KEY": "SECRET-azure-key",
	"SLUICE_PG_URL":        "postgres://sluice:SECRET-pg-password@db:5432/sluice",
	"ODD_KEY":              `a: {b} # ${X} "'SECRET-odd`,
	"BAD_BASE_URL":         "SECRET-not-a-url",
	"NEGATIVE_RPH":         "-42",
	"NOT_A_NUMBER":         "SECRET-NaN",
}

func lookupTestEnv(name string) (string, bool) {
	v, ok := testEnv[name]
	return v, ok
}

// assertNoEnvValues fails if s contains the value of any test variable.
func assertNoEnvValues(t *testing.T, s string) {
	t.Helper()
	for name, v := range testEnv {
		if strings.Contains(s, v) || strings.Contains(s, "SECRET") {
			t.Errorf("output contains the value of %s (or another secret):\n%s", name, s)
		}
	}
}

// TestLoadBad loads every testdata/bad/*.yaml and compares the problems,
// one per line, with the .golden file beside it. go test -update rewrites
// the golden files.
func TestLoadBad(t *testing.T) {
	files, err := filepath.Glob("testdata/bad/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("found %d bad cases, want at least 20", len(files))
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			cfg, err := Load(file, lookupTestEnv)
			var ps Problems
			if !errors.As(err, &ps) {
				t.Fatalf("Load = %v, %v; want Problems", cfg, err)
			}
			if cfg != nil {
				t.Errorf("Load returned a config along with problems")
			}
			for _, p := range ps {
				if p.File != file {
					t.Errorf("problem %q has file %q, want %q", p.String(), p.File, file)
				}
			}
			got := err.Error() + "\n"
			assertNoEnvValues(t, got)
			golden := strings.TrimSuffix(file, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("problems differ from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

func TestLoadGood(t *testing.T) {
	files, err := filepath.Glob("testdata/good/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no good cases")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".yaml"), func(t *testing.T) {
			cfg, err := Load(file, lookupTestEnv)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if _, err := Compile(cfg, file); err != nil {
				t.Fatalf("Compile: %v", err)
			}
		})
	}
}

func TestDefault(t *testing.T) {
	want := &Config{
		Listen:   Listen{GRPC: "127.0.0.1:9001", XDS: "127.0.0.1:18000", Admin: "127.0.0.1:9090", Envoy: "127.0.0.1:10000"},
		Store:    Store{SQLite: "sluice.db"},
		Ledger:   Ledger{SQLite: "sluice-ledger.db", SpoolMaxBytes: 1 << 30},
		Gateway:  Gateway{MaxRequestBodyBytes: 4 << 20, UnknownPaths: "deny", UnpricedModels: "allow", BudgetTimeZone: "UTC", DefaultMaxOutputTokens: 4096, ReservationTTL: 15 * time.Minute, DrainTimeout: 10 * time.Minute, RequestTimeout: 5 * time.Minute, StreamIdleTimeout: 5 * time.Minute},
		XDS:      XDS{AccessLog: "/dev/stdout", GRPCListener: "sluice-grpc", UpstreamCAFile: "/etc/ssl/certs/ca-certificates.crt", Proxyless: "off", ExtensionHealthCheck: HealthCheck{Interval: 2 * time.Second, Timeout: time.Second, UnhealthyThreshold: 2, HealthyThreshold: 2}},
		Security: Security{PrincipalMaxAge: 30 * time.Second},
	}
	if diff := cmp.Diff(want, Default()); diff != "" {
		t.Errorf("Default (-want +got):\n%s", diff)
	}
	Default().Listen.GRPC = "changed"
	if Default().Listen.GRPC != "127.0.0.1:9001" {
		t.Error("Default returns shared state")
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), lookupTestEnv)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load = %v, want an error wrapping os.ErrNotExist", err)
	}
}

func TestLoadFull(t *testing.T) {
	cfg, err := Load("testdata/good/full.yaml", lookupTestEnv)
	if err != nil {
		t.Fatal(err)
	}
	expires := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	want := &Config{
		Listen:   Listen{GRPC: "127.0.0.1:9001", XDS: "127.0.0.1:18000", Admin: "127.0.0.1:9090", Envoy: "0.0.0.0:10000"},
		Store:    Store{SQLite: "data/sluice.db"},
		Ledger:   Ledger{SQLite: "sluice-ledger.db", SpoolMaxBytes: 1 << 30},
		Gateway:  Gateway{MaxRequestBodyBytes: 4 << 20, UnknownPaths: "deny", UnpricedModels: "allow", BudgetTimeZone: "UTC", DefaultMaxOutputTokens: 4096, ReservationTTL: 15 * time.Minute, DrainTimeout: 10 * time.Minute, RequestTimeout: 5 * time.Minute, StreamIdleTimeout: 5 * time.Minute},
		XDS:      XDS{AccessLog: "/dev/stdout", GRPCListener: "sluice-grpc", UpstreamCAFile: "/etc/ssl/certs/ca-certificates.crt", Proxyless: "off", ExtensionHealthCheck: HealthCheck{Interval: 2 * time.Second, Timeout: time.Second, UnhealthyThreshold: 2, HealthyThreshold: 2}},
		Security: Security{PrincipalMaxAge: 30 * time.Second},
		Providers: []Provider{
			{Name: "openai", Kind: providerkind.OpenAI, BaseURL: "https://api.openai.com", APIKey: "sk-test-SECRET-openai"},
			{Name: "anthropic", Kind: providerkind.Anthropic, BaseURL: "https://api.anthropic.com", APIKey: "sk-ant-test-SECRET-anthropic", AnthropicVersion: "2023-06-01"},
			{Name: "azure-eu", Kind: providerkind.AzureOpenAI, BaseURL: "https://contoso-eu.openai.azure.com", APIKey: "SECRET-azure-key", APIVersion: "2024-10-21"},
			{Name: "vllm", Kind: providerkind.OpenAICompatible, BaseURL: "http://127.0.0.1:8000"},
		},
		Models: []Model{
			{Name: "gpt-4o", Aliases: []string{"gpt4o", "gpt-4o-latest"}, Provider: "openai"},
			{Name: "gpt-4o-mini", Provider: "openai"},
			{Name: "claude-sonnet-4", Aliases: []string{"sonnet"}, Provider: "anthropic", Upstream: "claude-sonnet-4-20250514"},
			{Name: "azure/gpt-4o", Provider: "azure-eu", Upstream: "gpt4o-deployment"},
			{Name: "meta-llama/Llama-3.1-8B-Instruct", Aliases: []string{"llama3.1:8b"}, Provider: "vllm"},
		},
		Pricing: map[string]Price{
			"gpt-4o":          {Input: 2500000, CachedInput: 1250000, Output: 10000000},
			"gpt-4o-mini":     {Input: 150000, CachedInput: 75000, Output: 600000},
			"claude-sonnet-4": {Input: 3000000, CachedInput: 300000, Output: 15000000},
		},
		Orgs: []Org{{Name: "acme"}},
		Teams: []Team{
			{Name: "platform", Org: "acme", Models: []string{"gpt-4o*", "sonnet", "meta-llama/*"},
				Limits: Limits{Requests: RateLimits{PerMinute: 600, PerDay: 100000}}},
			{Name: "research"},
		},
		Keys: []DeclaredKey{
			{Name: "ci-bot", Team: "platform", SHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
				Prefix: "sk-sluice-ci", Models: []string{"gpt-4o-mini"},
				Limits: Limits{Requests: RateLimits{PerMinute: 60}}, ExpiresAt: &expires},
			{Name: "notebook", Team: "research", SHA256: "fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9"},
		},
	}
	if diff := cmp.Diff(want, cfg, cmpEmpty); diff != "" {
		t.Errorf("Load (-want +got):\n%s", diff)
	}
}

// cmpEmpty treats nil and empty slices and maps as equal.
var cmpEmpty = cmp.FilterValues(func(x, y any) bool {
	return isEmptyCollection(x) && isEmptyCollection(y)
}, cmp.Comparer(func(_, _ any) bool { return true }))

func isEmptyCollection(v any) bool {
	switch v := v.(type) {
	case []string:
		return len(v) == 0
	case []Provider:
		return len(v) == 0
	case []Model:
		return len(v) == 0
	case []Org:
		return len(v) == 0
	case []Team:
		return len(v) == 0
	case []DeclaredKey:
		return len(v) == 0
	case map[string]Price:
		return len(v) == 0
	}
	return false
}

// base is a small valid file that the Parse tests below extend.
const base = `
providers:
  - name: local
    kind: openai-compatible
    base_url: http://127.0.0.1:8000
models:
  - name: llama3
    provider: local
`

func TestParse(t *testing.T) {
	env := map[string]string{
		"KEY":    "s3cr3t: {not yaml} $$ ${X}",
		"PORT":   "9443",
		"RPM":    "1_000",
		"WHEN":   "2027-06-01",
		"EMPTY":  "",
		"PREFIX": "sk-sluice-",
	}
	lookup := func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
	tests := []struct {
		name string
		yaml string
		want func(c *Config)
	}{
		{"defaults kept", base, func(c *Config) {}},
		{"listen merged over defaults", base + "listen: {grpc: ':9001'}\n", func(c *Config) {
			c.Listen.GRPC = ":9001"
		}},
		{"null section keeps defaults", base + "listen:\nstore: ~\n", func(c *Config) {}},
		{"store sqlite replaces default", base + "store: {sqlite: /tmp/x.db}\n", func(c *Config) {
			c.Store.SQLite = "/tmp/x.db"
		}},
		{"env in values", base + "listen: {xds: '127.0.0.1:${PORT}'}\nkeys: []\n", func(c *Config) {
			c.Listen.XDS = "127.0.0.1:9443"
		}},
		{"env value taken verbatim", `
providers:
  - name: local
    kind: openai-compatible
    base_url: http://127.0.0.1:8000
    api_key: ${KEY}
models:
  - name: llama3
    provider: local
`, func(c *Config) { c.Providers[0].APIKey = "s3cr3t: {not yaml} $$ ${X}" }},
		{"dollar escapes", `
providers:
  - name: local
    kind: openai-compatible
    base_url: http://127.0.0.1:8000
    api_key: "a$$b$c$"
models:
  - name: llama3
    provider: local
`, func(c *Config) { c.Providers[0].APIKey = "a$b$c$" }},
		{"env into integer and timestamp", base + `
teams:
  - name: t
    limits: {requests: {per_minute: "${RPM}", per_hour: 0x10, per_day: 1_000_000}}
keys:
  - name: k
    team: t
    sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae
    prefix: ${PREFIX}abc
    expires_at: ${WHEN}
`, func(c *Config) {
			when := time.Date(2027, 6, 1, 0, 0, 0, 0, time.UTC)
			c.Teams = []Team{{Name: "t", Limits: Limits{Requests: RateLimits{PerMinute: 1000, PerHour: 16, PerDay: 1000000}}}}
			c.Keys = []DeclaredKey{{Name: "k", Team: "t", SHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
				Prefix: "sk-sluice-abc", ExpiresAt: &when}}
		}},
		{"timestamp formats", base + `
teams: [{name: t}]
keys:
  - {name: a, team: t, sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae, expires_at: 2027-01-02T03:04:05+02:00}
  - {name: b, team: t, sha256: fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9, expires_at: "2027-01-02 03:04:05"}
`, func(c *Config) {
			a := time.Date(2027, 1, 2, 1, 4, 5, 0, time.UTC)
			b := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
			c.Teams = []Team{{Name: "t"}}
			c.Keys = []DeclaredKey{
				{Name: "a", Team: "t", SHA256: "2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae", ExpiresAt: &a},
				{Name: "b", Team: "t", SHA256: "fcde2b2edba56bf408601fb721fe9b5c338d10ee429ea04fae5511b68fbf8fb9", ExpiresAt: &b},
			}
		}},
		{"unquoted dates and numbers in string fields", `
providers:
  - name: local
    kind: openai-compatible
    base_url: http://127.0.0.1:8000
  - {name: az, kind: azure-openai, base_url: "https://x.openai.azure.com", api_key: 12345, api_version: 2024-10-21}
  - {name: an, kind: anthropic, base_url: "https://api.anthropic.com", api_key: true, anthropic_version: 2023-06-01}
models:
  - name: llama3
    provider: local
    upstream: 007
`, func(c *Config) {
			c.Providers = append(c.Providers,
				Provider{Name: "az", Kind: providerkind.AzureOpenAI, BaseURL: "https://x.openai.azure.com", APIKey: "12345", APIVersion: "2024-10-21"},
				Provider{Name: "an", Kind: providerkind.Anthropic, BaseURL: "https://api.anthropic.com", APIKey: "true", AnthropicVersion: "2023-06-01"})
			c.Models[0].Upstream = "007"
		}},
		{"merge keys and aliases", `
providers:
  - &p
    name: a
    kind: openai-compatible
    base_url: http://127.0.0.1:8000
  - <<: *p
    name: b
models:
  - {name: m, provider: a, aliases: &al [x, y]}
  - {name: n, provider: b}
teams:
  - {name: t, models: *al}
`, func(c *Config) {
			c.Providers = []Provider{
				{Name: "a", Kind: providerkind.OpenAICompatible, BaseURL: "http://127.0.0.1:8000"},
				{Name: "b", Kind: providerkind.OpenAICompatible, BaseURL: "http://127.0.0.1:8000"},
			}
			c.Models = []Model{{Name: "m", Provider: "a", Aliases: []string{"x", "y"}}, {Name: "n", Provider: "b"}}
			c.Teams = []Team{{Name: "t", Models: []string{"x", "y"}}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.yaml), "sluice.yaml", lookup)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			want := Default()
			want.Providers = []Provider{{Name: "local", Kind: providerkind.OpenAICompatible, BaseURL: "http://127.0.0.1:8000"}}
			want.Models = []Model{{Name: "llama3", Provider: "local"}}
			tt.want(want)
			if diff := cmp.Diff(want, got, cmpEmpty); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

// TestParseProblems covers problems the golden files do not: each case is
// the base file plus a few lines, and the exact problems expected.
func TestParseProblems(t *testing.T) {
	lookup := func(name string) (string, bool) {
		v, ok := map[string]string{"DB": "postgres://u:SECRET@db/x", "NAME": "SECRET-name", "URL": "SECRET://x"}[name]
		return v, ok
	}
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"postgres not a URL, not echoed", base + "store: {postgres: '${URL}'}\n", []string{
			"f.yaml:9:19: store.postgres: want a PostgreSQL URL, postgres://user:password@host:5432/database, its password percent-encoded (the value is not shown: it may hold a password)",
		}},
		{"both stores", base + "store:\n  sqlite: x.db\n  postgres: ${DB}\n", []string{
			"f.yaml:9:1: store: set exactly one of sqlite or postgres",
		}},
		{"ledger postgres not a URL, not echoed", base + "ledger: {postgres: '${URL}'}\n", []string{
			"f.yaml:9:20: ledger.postgres: want a PostgreSQL URL, postgres://user:password@host:5432/database, its password percent-encoded (the value is not shown: it may hold a password)",
		}},
		{"both ledgers", base + "ledger:\n  postgres: ${DB}\n  sqlite: x.db\n", []string{
			"f.yaml:9:1: ledger: set exactly one of sqlite (a file path) or postgres (a connection URL)",
		}},
		{"spool with the sqlite ledger", base + "ledger:\n  spool: /var/lib/x\n", []string{
			"f.yaml:10:10: ledger.spool: only with ledger.postgres: the SQLite ledger's spool is its file's path plus -spool",
		}},
		{"retention shorter than a month", base + "ledger:\n  postgres: ${DB}\n  retention: 240h\n", []string{
			"f.yaml:11:14: ledger.retention: must be 0 (keep everything) or at least 744h (31 days: records are dropped a whole month at a time), got 240h0m0s",
		}},
		{"env value not echoed by validation", base + "orgs:\n  - name: ${NAME}\n  - name: ${NAME}\n", []string{
			`f.yaml:11:11: orgs[1].name: duplicate name the expansion of "${NAME}" (first at orgs[0])`,
		}},
		{"env value not echoed in suggestions", base + "teams:\n  - name: ${NAME}\nkeys:\n  - {name: k, team: SECRET-nam, sha256: 2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae}\n", []string{
			`f.yaml:12:21: keys[0].team: unknown team "SECRET-nam" (did you mean the expansion of "${NAME}"?)`,
		}},
		{"expanded url", `
providers:
  - {name: local, kind: openai-compatible, base_url: "${URL}/v1"}
models:
  - {name: llama3, provider: local}
`, []string{
			`f.yaml:3:54: providers[0].base_url: must be an absolute http(s) URL, got the expansion of "${URL}/v1"`,
		}},
		{"a name that did not decode hides references", `
providers:
  - {name: [openai], kind: openai-compatible, base_url: "http://127.0.0.1:8000"}
models:
  - {name: m, provider: openai}
  - {name: n, provider: opnai}
`, []string{
			"f.yaml:3:6: providers[0].name: must be a string, got a list",
		}},
		{"a key problem does not hide references", `
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "${NOPE}"}
models:
  - {name: m, provider: opnai}
`, []string{
			`f.yaml:3:79: providers[0].api_key: environment variable NOPE is not set`,
			`f.yaml:5:25: models[0].provider: unknown provider "opnai" (did you mean "openai"?)`,
		}},
		{"unknown top-level field without suggestion", base + "routes: []\n", []string{
			"f.yaml:9:1: routes: unknown field (expected one of: listen, store, ledger, admission, gateway, providers, models, pricing, orgs, teams, keys, xds, admin, security, runtime)",
		}},
		{"non-string key", base + "listen:\n  [a]: b\n", []string{
			"f.yaml:10:3: listen: mapping keys must be strings, got a list",
		}},
		{"bad merge", base + "orgs:\n  - <<: [1]\n    name: a\n", []string{
			"f.yaml:10:5: orgs[0].<<: a merge key must refer to a mapping or a list of mappings, none of which merges the mapping that holds it",
		}},
		{"alias position is the alias", "x: &n 5\n" + base, []string{
			"f.yaml:1:1: x: unknown field (expected one of: listen, store, ledger, admission, gateway, providers, models, pricing, orgs, teams, keys, xds, admin, security, runtime)",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), "f.yaml", lookup)
			var ps Problems
			if !errors.As(err, &ps) {
				t.Fatalf("Parse = %v, want Problems", err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
			if strings.Contains(err.Error(), "SECRET") && !strings.Contains(tt.yaml, "SECRET") {
				t.Errorf("an env value leaked: %v", err)
			}
		})
	}
}

// TestParseAliasBomb checks that aliases cannot make decoding do
// unbounded work: 110 aliases of a team whose allow-list has 100 patterns
// are more than 10,000 values.
func TestParseAliasBomb(t *testing.T) {
	doc := base + "teams:\n  - &t {name: t, models: [" + strings.Repeat("x, ", 99) + "x]}\n" +
		strings.Repeat("  - *t\n", 110)
	_, err := parse([]byte(doc), "f.yaml", nil, 10_000)
	want := "f.yaml: document too large: aliases and merge keys expand to more than 10000 values"
	if err == nil || err.Error() != want {
		t.Errorf("parse = %v, want %s", err, want)
	}
	// Within the bound, the same shape decodes (and fails validation
	// only for its duplicate team names and unknown patterns).
	_, err = parse([]byte(doc), "f.yaml", nil, maxDecodeSteps)
	if err == nil || strings.Contains(err.Error(), "too large") {
		t.Errorf("parse with the default bound = %v, want validation problems", err)
	}
}

func TestExpandEnv(t *testing.T) {
	env := func(name string) (string, bool) {
		v, ok := map[string]string{"A": "1", "B": "${A}", "EMPTY": ""}[name]
		return v, ok
	}
	tests := []struct {
		in       string
		want     string
		problems []string
	}{
		{"plain", "plain", nil},
		{"${A}", "1", nil},
		{"x${A}y${A}", "x1y1", nil},
		{"${B}", "${A}", nil}, // values are not expanded again
		{"${EMPTY}", "", nil},
		{"$$", "$", nil},
		{"$${A}", "${A}", nil},
		{"$$$${A}", "$${A}", nil},
		{"a$b$", "a$b$", nil},
		{"$", "$", nil},
		{"${MISSING}", "", []string{"environment variable MISSING is not set"}},
		{"${}", "", []string{`empty environment variable reference "${}"`}},
		{"${A", "", []string{`unterminated "${" (write "$$" for a literal "$")`}},
		{"${A-B}", "", []string{`invalid environment variable name "A-B"`}},
		{"${1A}", "", []string{`invalid environment variable name "1A"`}},
		{"${X}${Y}", "", []string{"environment variable X is not set", "environment variable Y is not set"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, problems := expandEnv(tt.in, env)
			if got != tt.want || !cmp.Equal(problems, tt.problems) {
				t.Errorf("expandEnv(%q) = %q, %q; want %q, %q", tt.in, got, problems, tt.want, tt.problems)
			}
		})
	}
}

func TestLocate(t *testing.T) {
	doc := `providers:
  - name: openai
    kind: openai
models:
  - name: a
    aliases: [x, y]
  - name: b
pricing:
  gpt-4.1:
    input: 5
  a: {input: 1}
teams:
  - name: t
    limits:
      requests: {per_minute: 3}
`
	docs, err := parseDocuments([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	root := docs[0].Content[0]
	tests := []struct {
		path      string
		line, col int
	}{
		{"providers", 1, 1},
		{"providers[0]", 2, 5},
		{"providers[0].kind", 3, 11},
		{"providers[0].api_key", 2, 5}, // missing: the mapping that lacks it
		{"providers[1].name", 1, 1},    // missing item: the list's key
		{"models[0].aliases[1]", 6, 18},
		{"models[1].name", 7, 11},
		{`pricing["gpt-4.1"]`, 9, 3},
		{`pricing["gpt-4.1"].input`, 10, 12},
		{"pricing.a.input", 11, 14},
		{"teams[0].limits.requests.per_minute", 15, 30},
		{"orgs[0].name", 0, 0},
		{"", 0, 0},
		{"models[x]", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			line, col := newDecoder(nil, maxDecodeSteps).locate(root, tt.path)
			if line != tt.line || col != tt.col {
				t.Errorf("locate(%q) = %d:%d, want %d:%d", tt.path, line, col, tt.line, tt.col)
			}
		})
	}
}

func TestLocateSyntaxError(t *testing.T) {
	tests := []struct {
		name, doc string
		want      string
	}{
		{"mapping value on line 1", "a: b: c\n", "f.yaml:1:5: invalid YAML: mapping values are not allowed in this context"},
		{"bad indentation", "providers:\n  - name: x\n - name: y\n", "f.yaml:3:2: invalid YAML: did not find expected key"},
		{"unclosed flow list", "a: [1, 2\nb: 3\n", "f.yaml:1:5: invalid YAML: did not find expected ',' or ']'"},
		{"unclosed quote", "x: 1\ny: \"abc\n", "f.yaml:2:4: invalid YAML: found unexpected end of stream"},
		{"tab", "a:\n\tb: 1\n", "f.yaml:2:1: invalid YAML: found character that cannot start any token"},
		{"unknown anchor", "x:\n  y: *nope\n", "f.yaml:2:6: invalid YAML: unknown anchor 'nope' referenced"},
		{"no trailing newline", "a: b: c", "f.yaml:1:5: invalid YAML: mapping values are not allowed in this context"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc), "f.yaml", nil)
			if err == nil || err.Error() != tt.want {
				t.Errorf("Parse = %v\nwant %s", err, tt.want)
			}
		})
	}
}

// TestLedgerPostgres: a ledger section naming postgres replaces the
// default sqlite file (keeping the spool's default bound), and the
// snapshot resolves the spool beside the config file, or where it says.
func TestLedgerPostgres(t *testing.T) {
	lookup := func(string) (string, bool) { return "postgres://u:pw@db:5432/x", true }
	for _, tt := range []struct {
		yaml, spool string
	}{
		{"ledger: {postgres: '${DB}', retention: 9000h}\n", "/etc/sluice/sluice-ledger-spool"},
		{"ledger: {postgres: '${DB}', spool: spool/ledger, retention: 9000h}\n", "/etc/sluice/spool/ledger"},
		{"ledger: {postgres: '${DB}', spool: /var/lib/sluice/ledger-spool, retention: 9000h}\n", "/var/lib/sluice/ledger-spool"},
	} {
		cfg, err := Parse([]byte(base+tt.yaml), "/etc/sluice/sluice.yaml", lookup)
		if err != nil {
			t.Fatalf("%q: %v", tt.yaml, err)
		}
		if cfg.Ledger.SQLite != "" || cfg.Ledger.SpoolMaxBytes != 1<<30 {
			t.Errorf("%q: ledger %+v; want no sqlite, the default spool bound", tt.yaml, cfg.Ledger)
		}
		snap, err := CompileWithoutProviderKeys(cfg, "/etc/sluice/sluice.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if snap.LedgerPath() != "" || snap.LedgerPostgres() != "postgres://u:pw@db:5432/x" || snap.LedgerSpool() != tt.spool || snap.LedgerRetention() != 9000*time.Hour {
			t.Errorf("%q: path %q, url %q, spool %q, retention %v; want none, the URL, %q, 9000h",
				tt.yaml, snap.LedgerPath(), snap.LedgerPostgres(), snap.LedgerSpool(), snap.LedgerRetention(), tt.spool)
		}
	}
}

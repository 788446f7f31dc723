package policies

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadWithoutProviderKeys: a command that never calls a provider
// loads a config whose providers' keys refer to variables that are not
// set: the keys are left empty and unchecked (CompileWithoutProviderKeys
// compiles it), while every other problem — an unset variable elsewhere,
// a key that is not a provider's — is still reported.
func TestLoadWithoutProviderKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(doc string) string {
		path := filepath.Join(dir, "sluice.yaml")
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	env := func(name string) (string, bool) {
		if name == "SET" {
			return "sk-set", true
		}
		return "", false
	}
	good := write(`
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "${OPENAI_API_KEY}"}
  - {name: anthropic, kind: anthropic, base_url: "https://api.anthropic.com", api_key: "${SET}"}
  - {name: bare, kind: anthropic, base_url: "https://api.anthropic.com"}
models: [{name: m, provider: openai}]
ledger: {sqlite: spend.db}
`)
	if _, err := Load(good, env); err == nil || !strings.Contains(err.Error(), "providers[0].api_key: environment variable OPENAI_API_KEY is not set") ||
		!strings.Contains(err.Error(), `providers[2].api_key: required for kind "anthropic"`) {
		t.Fatalf("Load = %v; want the unset variable and the missing key reported", err)
	}
	cfg, err := LoadWithoutProviderKeys(good, env)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range cfg.Providers {
		if p.APIKey != "" {
			t.Errorf("provider %s: api_key read", p.Name)
		}
	}
	if _, err := Compile(cfg, good); err == nil {
		t.Error("Compile accepted providers without keys")
	}
	snap, err := CompileWithoutProviderKeys(cfg, good)
	if err != nil {
		t.Fatal(err)
	}
	if got := snap.LedgerPath(); got != filepath.Join(dir, "spend.db") {
		t.Errorf("ledger path %s", got)
	}

	bad := write(`
providers:
  - {name: openai, kind: openai, base_url: "https://api.openai.com", api_key: "${OPENAI_API_KEY}"}
models: [{name: m, provider: openai}]
ledger: {sqlite: "${LEDGER_DIR}/spend.db"}
admin: {token: "${ADMIN_TOKEN}"}
`)
	_, err = LoadWithoutProviderKeys(bad, env)
	var ps Problems
	if !errors.As(err, &ps) {
		t.Fatalf("LoadWithoutProviderKeys = %v; want problems", err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, p.Path)
	}
	if want := "ledger.sqlite admin.token"; strings.Join(got, " ") != want {
		t.Errorf("problems at %v; want at %s only", got, want)
	}
	for _, path := range []string{"providers[0].api_key", "providers[12].api_key"} {
		if !isProviderKey(path) {
			t.Errorf("isProviderKey(%q) = false", path)
		}
	}
	for _, path := range []string{"providers.api_key", "providers[].api_key", "providers[x].api_key", "providers[0].api_keys", "admin.token", "providers[0]"} {
		if isProviderKey(path) {
			t.Errorf("isProviderKey(%q) = true", path)
		}
	}
}

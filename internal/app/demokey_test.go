package app

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDemoKeyMessages: the demo key comes out once, on stdout, as a shell
// line to copy (export KEY=…); on a later start the hint names the
// --config the server was given, shell-quoted, so it runs as printed.
func TestDemoKeyMessages(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "my configs")
	config := quickstartIn(t, dir)
	snap, err := loadSnapshot(config, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	st, err := openStoreBackend(ctx, snap, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	var first bytes.Buffer
	if err := createDemoKey(ctx, st, snap, config, &first); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^    export KEY=sk-sluice-[0-9A-Za-z]{43}$`).MatchString(first.String()) {
		t.Errorf("first run printed %q, want a line export KEY=sk-sluice-…", first.String())
	}

	var again bytes.Buffer
	if err := createDemoKey(ctx, st, snap, config, &again); err != nil {
		t.Fatal(err)
	}
	want := "list them with `sluice keys list --config '" + config + "'`"
	if !strings.Contains(again.String(), want) || strings.Contains(again.String(), "sk-sluice-") {
		t.Errorf("second run printed %q, want %q and no key", again.String(), want)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"examples/quickstart.yaml": "examples/quickstart.yaml",
		"/etc/sluice/sluice.yaml":  "/etc/sluice/sluice.yaml",
		"my configs/s.yaml":        "'my configs/s.yaml'",
		"it's.yaml":                `'it'\''s.yaml'`,
		"$HOME/s.yaml":             "'$HOME/s.yaml'",
		"":                         "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// quickstartIn copies examples/quickstart.yaml into dir, created.
func quickstartIn(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "quickstart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sluice.yaml")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

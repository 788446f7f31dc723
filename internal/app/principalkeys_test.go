package app

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/principal"
	"github.com/sluicegw/sluice/policies"
)

func snapWithKeys(t *testing.T, keys ...string) *policies.Snapshot {
	t.Helper()
	y := "providers: [{name: local, kind: openai-compatible, base_url: \"http://127.0.0.1:8000\"}]\nmodels: [{name: m, provider: local}]\n"
	if len(keys) > 0 {
		y += "security: {principal_keys: ["
		for i, k := range keys {
			if i > 0 {
				y += ", "
			}
			y += "{value: " + k + "}"
		}
		y += "]}\n"
	}
	cfg, err := policies.Parse([]byte(y), "sluice.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policies.Compile(cfg, filepath.Join(t.TempDir(), "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestPrincipalSourceRotation: after a reload changes the keys, what the
// old ones signed verifies until the grace (the reservation TTL, 15m by
// default) ends, and then no more; the new keys sign at once. A reload
// that drops the keys warns.
func TestPrincipalSourceRotation(t *testing.T) {
	const oldKey, newKey = "old-principal-key-0123456789abcdefghij", "new-principal-key-0123456789abcdefghij"
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	var logs bytes.Buffer
	first := snapWithKeys(t, oldKey)
	src, err := newPrincipalSource(first, slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	bySig := src.get().Sign(principal.ForPrincipal, "r", now, "k")
	second := snapWithKeys(t, newKey)
	src.reloaded(second)
	verify := func(k *principal.Keys) principal.Reason {
		return k.Verify(bySig, principal.ForPrincipal, "r", now, time.Hour, "k")
	}
	if r := verify(src.get()); r != principal.OK {
		t.Errorf("just after the rotation the old key's signature: %s", r)
	}
	secondKeys, err := src.of(second)
	if err != nil {
		t.Fatal(err)
	}
	if r := secondKeys.Verify(src.get().Sign(principal.ForPrincipal, "r", now, "k"), principal.ForPrincipal, "r", now, time.Hour, "k"); r != principal.OK {
		t.Errorf("the new key does not sign: %s", r)
	}
	now = now.Add(15*time.Minute - time.Second)
	if r := verify(src.get()); r != principal.OK {
		t.Errorf("within the grace: %s", r)
	}
	now = now.Add(time.Second)
	if r := verify(src.get()); r != principal.BadSignature {
		t.Errorf("after the grace the old key's signature: %s", r)
	}
	src.reloaded(snapWithKeys(t))
	if !strings.Contains(logs.String(), "has no security.principal_keys") {
		t.Errorf("dropping the keys was not warned of:\n%s", logs.String())
	}
	if !src.get().Generated() {
		t.Error("without keys the process does not sign with its own")
	}
}

// TestPrincipalKeysOfSnapshot: the keys made from a snapshot's
// security.principal_keys — a value and a file read relative to the
// config file — sign with the first and accept the others.
func TestPrincipalKeysOfSnapshot(t *testing.T) {
	dir := t.TempDir()
	first, second := strings.Repeat("a", 40), strings.Repeat("b", 32)
	if err := os.WriteFile(filepath.Join(dir, "old.key"), []byte(second+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	y := "providers: [{name: local, kind: openai-compatible, base_url: \"http://127.0.0.1:8000\"}]\nmodels: [{name: m, provider: local}]\n" +
		"security: {principal_keys: [{value: " + first + "}, {file: old.key}]}\n"
	file := filepath.Join(dir, "sluice.yaml")
	cfg, err := policies.Parse([]byte(y), file, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policies.Compile(cfg, file)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	src, err := newPrincipalSource(snap, slog.New(slog.DiscardHandler), func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	keys := src.get()
	byOld, err := principal.New([][]byte{[]byte(second)})
	if err != nil {
		t.Fatal(err)
	}
	if r := keys.Verify(byOld.Sign(principal.ForPrincipal, "r", now, "k"), principal.ForPrincipal, "r", now, time.Second, "k"); r != principal.OK {
		t.Errorf("a signature by the file's key: %s", r)
	}
	if r := byOld.Verify(keys.Sign(principal.ForPrincipal, "r", now, "k"), principal.ForPrincipal, "r", now, time.Second, "k"); r != principal.BadSignature {
		t.Errorf("the snapshot signs with the file's key, not the first: %s", r)
	}
	if keys.Generated() {
		t.Error("with security.principal_keys the process signs with a key of its own")
	}
}

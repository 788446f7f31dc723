package keyring

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/sqlite"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/policies"
)

// TestFirstLoadOfAnEmptyStoreKeepsTheDeclaredTable checks that the first
// Sync from a store without keys publishes the table SetPolicy made for
// the declared keys rather than making it again, with the store's teams,
// and that a key stored afterwards joins it.
func TestFirstLoadOfAnEmptyStoreKeepsTheDeclaredTable(t *testing.T) {
	const secretA = "sk-sluice-AAAA456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
	const secretB = "sk-sluice-BBBB456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.PutTeam(ctx, store.Team{Name: "blue", Models: []string{"m2"}}); err != nil {
		t.Fatal(err)
	}
	cfg, err := policies.Parse([]byte(`
providers: [{name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}]
models: [{name: m1, provider: local}, {name: m2, provider: local}]
teams: [{name: red, models: [m1]}]
keys:
  - {name: bot, team: red, sha256: `+apikey.HashHex(secretA)+`}
`), "sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := policies.Compile(cfg, filepath.Join(t.TempDir(), "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ring := New(testenv.Quiet())
	ring.SetPolicy(snap)
	before := ring.view.Load()
	if p := ring.Resolve(apikey.Hash(secretA)); p == nil || p.KeyID != "config:bot" {
		t.Fatalf("before the first Sync, the declared key resolved to %+v", p)
	}
	if err := ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	after := ring.view.Load()
	if after == before || after.base != before.base {
		t.Errorf("the first Sync published view %p with table %p; want a new view of table %p", after, after.base, before.base)
	}
	if _, ok := after.teams["blue"]; !ok {
		t.Errorf("the store's team is not in the published view: %v", after.teams)
	}
	if p := ring.Resolve(apikey.Hash(secretA)); p == nil || p.KeyID != "config:bot" || !p.KeyModels.Allows("m1") {
		t.Errorf("after the first Sync, the declared key resolved to %+v", p)
	}
	if err := st.CreateKey(ctx, store.Key{ID: "key_b", Prefix: apikey.PublicPrefix(secretB), Hash: apikey.Hash(secretB), Team: "blue"}); err != nil {
		t.Fatal(err)
	}
	if err := ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	if ring.Len() != 2 {
		t.Errorf("Len = %d, want 2", ring.Len())
	}
	if p := ring.Resolve(apikey.Hash(secretB)); p == nil || p.KeyID != "key_b" || !p.TeamModels.Allows("m2") {
		t.Errorf("the stored key resolved to %+v", p)
	}
	if p := ring.Resolve(apikey.Hash(secretA)); p == nil || p.KeyID != "config:bot" {
		t.Errorf("the declared key resolved to %+v", p)
	}
}

package keyring_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/testenv"
)

// wantMetadata is the documented metadata of p, built field by field
// from the principal (docs/architecture.md, the ext_authz table).
func wantMetadata(t *testing.T, p *keyring.Principal) *structpb.Struct {
	t.Helper()
	m := map[string]any{"key_id": p.KeyID, "key_prefix": p.KeyPrefix, "key_name": p.KeyName, "team": p.Team, "org": p.Org}
	list := func(ps []string) []any {
		out := make([]any, len(ps))
		for i, s := range ps {
			out[i] = s
		}
		return out
	}
	if !p.KeyModels.Unrestricted() {
		m["key_models"] = list(p.KeyModels.Patterns())
	}
	if !p.TeamModels.Unrestricted() {
		m["team_models"] = list(p.TeamModels.Patterns())
	}
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestMetadataOfEveryShape: declared and stored keys, with and without
// their own allow-list, in a team with one, in a team with "*", and in a
// missing team, all carry exactly the documented fields.
func TestMetadataOfEveryShape(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	ring := keyring.New(testenv.Quiet())
	ring.SetPolicy(snapshot(t, base+`  - {name: open, org: acme, models: ["*"]}
keys:
  - {name: d1, team: red, sha256: `+apikey.HashHex("sk-d1")+`, prefix: sk-sluice-d1}
  - {name: d2, team: red, sha256: `+apikey.HashHex("sk-d2")+`, prefix: sk-sluice-d2, models: [m1, "m*"]}
  - {name: d3, team: open, sha256: `+apikey.HashHex("sk-d3")+`, prefix: sk-sluice-d3, models: [m2]}
`))
	for _, k := range []store.Key{
		{ID: "key_s1", Prefix: "sk-s1", Hash: apikey.Hash("sk-s1"), Team: "red", Name: "s1", CreatedAt: t0},
		{ID: "key_s2", Prefix: "sk-s2", Hash: apikey.Hash("sk-s2"), Team: "red", Name: "s2", Models: []string{"m2"}, CreatedAt: t0},
		{ID: "key_s3", Prefix: "sk-s3", Hash: apikey.Hash("sk-s3"), Team: "gone", Name: "s3", Models: []string{"m1"}, CreatedAt: t0},
		{ID: "key_s4", Prefix: "sk-s4", Hash: apikey.Hash("sk-s4"), Team: "open", CreatedAt: t0},
	} {
		if err := st.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	restricted := 0
	for _, secret := range []string{"sk-d1", "sk-d2", "sk-d3", "sk-s1", "sk-s2", "sk-s3", "sk-s4"} {
		p := ring.Resolve(apikey.Hash(secret))
		if p == nil {
			t.Fatalf("%s does not resolve", secret)
		}
		got := p.Metadata()
		if diff := cmp.Diff(wantMetadata(t, p), got, protocmp.Transform()); diff != "" {
			t.Errorf("%s metadata (-want +got):\n%s", secret, diff)
		}
		if _, ok := got.Fields["key_models"]; ok {
			restricted++
		}
		// Two calls give equal, separate messages.
		if again := p.Metadata(); again == got || !cmp.Equal(got, again, protocmp.Transform()) {
			t.Errorf("%s: second Metadata differs or is the same message", secret)
		}
	}
	if restricted != 4 {
		t.Errorf("%d keys carry key_models, want 4 (d2, d3, s2, s3)", restricted)
	}
	if p := ring.Resolve(apikey.Hash("sk-s3")); !p.TeamMissing || p.Metadata().Fields["team"].GetStringValue() != "gone" {
		t.Errorf("key of a missing team: %+v", p)
	}
}

// TestShadowedKeyReturns: a stored key with a declared key's hash is
// hidden while the declaration lasts and resolves once it is removed.
func TestShadowedKeyReturns(t *testing.T) {
	ring := keyring.New(testenv.Quiet())
	ring.SetPolicy(snapshot(t, base+`keys: [{name: bot, team: red, sha256: `+apikey.HashHex(secretA)+`}]
`))
	dup := store.Key{ID: "key_dup", Hash: apikey.Hash(secretA), Team: "red", Rev: 1}
	ring.Apply(store.Changes{Keys: []store.Key{dup}, Rev: 1})
	later := store.Key{ID: "key_dup2", Hash: apikey.Hash(secretB), Team: "red", Rev: 2}
	ring.Apply(store.Changes{Keys: []store.Key{later}, Rev: 2})
	if p := ring.Resolve(apikey.Hash(secretA)); p == nil || p.KeyID != "config:bot" || ring.ByID("key_dup") != nil || ring.Len() != 2 {
		t.Fatalf("while declared: %+v, Len %d", p, ring.Len())
	}
	ring.SetPolicy(snapshot(t, base))
	if p := ring.Resolve(apikey.Hash(secretA)); p == nil || p.KeyID != "key_dup" || ring.ByID("key_dup2") == nil || ring.Len() != 2 {
		t.Fatalf("after the declaration is removed: %+v, Len %d", p, ring.Len())
	}
}

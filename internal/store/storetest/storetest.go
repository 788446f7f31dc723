package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/policies"
)

// Run runs the contract suite, one subtest per property. open must return
// a new, empty store, isolated from every other store it returned; Run
// closes it when the subtest ends.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s store.Store)
	}{
		{"CreateThenList", testCreateThenList},
		{"DuplicateID", testDuplicateID},
		{"DuplicateHash", testDuplicateHash},
		{"CreateKeys", testCreateKeys},
		{"CreateKeysTaken", testCreateKeysTaken},
		{"ReplaceKeys", testReplaceKeys},
		{"ReplaceKeysUnknown", testReplaceKeysUnknown},
		{"Revoke", testRevoke},
		{"RevokeTwice", testRevokeTwice},
		{"RevokeUnknown", testRevokeUnknown},
		{"SetKeyLimits", testSetKeyLimits},
		{"SetKeyLimitsUnknown", testSetKeyLimitsUnknown},
		{"PutTeam", testPutTeam},
		{"PutOrg", testPutOrg},
		{"PutOrgLimits", testPutOrgLimits},
		{"ChangesEmpty", testChangesEmpty},
		{"ChangesSince", testChangesSince},
		{"RevisionsIncrease", testRevisionsIncrease},
		{"ListKeysOrder", testListKeysOrder},
		{"ConcurrentWriters", testConcurrentWriters},
		{"CanceledContext", testCanceledContext},
		{"EachKey", testEachKey},
		{"EachKeyEmpty", testEachKeyEmpty},
		{"EachKeyStops", testEachKeyStops},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tt.fn(t, s)
		})
	}
}

// base is a fixed instant with a nanosecond part, so that a backend
// rounding to micro- or milliseconds fails.
var base = time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC)

// NewKey returns a valid key whose hash is derived from id, so that
// distinct ids give distinct hashes. Backends' own tests may use it.
func NewKey(id string) store.Key {
	return store.Key{
		ID:        id,
		Prefix:    "sk-sluice-" + id[len(id)-min(4, len(id)):],
		Hash:      sha256.Sum256([]byte("secret-" + id)),
		Team:      "team-a",
		Name:      "name of " + id,
		CreatedAt: base,
	}
}

var (
	// ignoreRev compares keys without the revision the store assigned;
	// tests check revisions on their own.
	ignoreRev = cmpopts.IgnoreFields(store.Key{}, "Rev")
	// equateEmpty lets a backend return nil or empty slices alike (no
	// models, no changes).
	equateEmpty = cmpopts.EquateEmpty()
)

func testCreateThenList(t *testing.T, s store.Store) {
	ctx := t.Context()
	full := NewKey("key_full")
	full.Models = []string{"gpt-4o*", "claude-3-5-sonnet"}
	full.Limits = policies.Limits{Requests: policies.RateLimits{PerMinute: 60, PerHour: 1000, PerDay: 10000}}
	// Times given in another zone come back as the same instants.
	full.CreatedAt = base.In(time.FixedZone("UTC+5", 5*3600))
	full.ExpiresAt = base.Add(90*24*time.Hour + 1)
	bare := NewKey("key_bare") // no models, no limits, never expires
	bare.CreatedAt = base.Add(time.Nanosecond)

	for _, k := range []store.Key{full, bare} {
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatalf("CreateKey(%s): %v", k.ID, err)
		}
	}
	got := listKeys(t, s)
	if diff := cmp.Diff([]store.Key{full, bare}, got, ignoreRev, equateEmpty); diff != "" {
		t.Fatalf("ListKeys (-want +got):\n%s", diff)
	}
	if got[0].Rev <= 0 || got[1].Rev <= got[0].Rev {
		t.Errorf("revisions = %d, %d; want positive and increasing in write order", got[0].Rev, got[1].Rev)
	}
	c := changes(t, s, 0)
	if diff := cmp.Diff(store.Changes{Keys: got, Rev: got[1].Rev}, sortChanges(c), equateEmpty); diff != "" {
		t.Errorf("Changes(0) (-want +got):\n%s", diff)
	}
}

func testDuplicateID(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := NewKey("key_dup")
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	before := changes(t, s, 0)
	dup := NewKey("key_dup")
	dup.Hash = sha256.Sum256([]byte("another secret"))
	dup.Name = "impostor"
	if err := s.CreateKey(ctx, dup); !errors.Is(err, store.ErrExists) {
		t.Fatalf("CreateKey(same id) = %v; want ErrExists", err)
	}
	assertUnchanged(t, s, before)
}

func testDuplicateHash(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := NewKey("key_one")
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	before := changes(t, s, 0)
	dup := NewKey("key_two")
	dup.Hash = k.Hash
	if err := s.CreateKey(ctx, dup); !errors.Is(err, store.ErrExists) {
		t.Fatalf("CreateKey(same hash) = %v; want ErrExists", err)
	}
	assertUnchanged(t, s, before)
}

// testCreateKeys: a batch is stored as CreateKey one by one would store
// it, each key with its own revision in slice order; an empty batch
// writes nothing.
func testCreateKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	write(t, s.CreateKey(ctx, NewKey("key_first")))
	before := changes(t, s, 0)
	write(t, s.CreateKeys(ctx, nil))
	assertUnchanged(t, s, before)

	full := NewKey("key_full")
	full.Models = []string{"gpt-4o*"}
	full.Limits = fullLimits()
	full.ExpiresAt = base.Add(24 * time.Hour)
	batch := []store.Key{full, NewKey("key_b"), NewKey("key_c")}
	write(t, s.CreateKeys(ctx, batch))
	got := changes(t, s, before.Rev)
	if diff := cmp.Diff(batch, sortChanges(got).Keys, ignoreRev, equateEmpty); diff != "" {
		t.Fatalf("Changes after CreateKeys (-want +got):\n%s", diff)
	}
	prev := before.Rev
	for _, k := range got.Keys {
		if k.Rev <= prev {
			t.Errorf("key %s: Rev %d; want more than %d, in slice order", k.ID, k.Rev, prev)
		}
		prev = k.Rev
	}
	if got.Rev != prev {
		t.Errorf("Changes.Rev = %d; want the last key's, %d", got.Rev, prev)
	}
}

// testCreateKeysTaken: a batch with a taken ID or hash, whether taken in
// the store or within the batch, writes none of its keys.
func testCreateKeysTaken(t *testing.T, s store.Store) {
	ctx := t.Context()
	stored := NewKey("key_stored")
	write(t, s.CreateKey(ctx, stored))
	before := changes(t, s, 0)
	sameHash := NewKey("key_other")
	sameHash.Hash = stored.Hash
	twin := NewKey("key_twin")
	twinHash := NewKey("key_twin2")
	twinHash.Hash = twin.Hash
	for name, batch := range map[string][]store.Key{
		"stored id":   {NewKey("key_new1"), NewKey("key_stored")},
		"stored hash": {NewKey("key_new2"), sameHash},
		"batch id":    {NewKey("key_new3"), NewKey("key_new3")},
		"batch hash":  {twin, twinHash},
	} {
		if err := s.CreateKeys(ctx, batch); !errors.Is(err, store.ErrExists) {
			t.Errorf("CreateKeys(%s taken) = %v; want ErrExists", name, err)
		}
		assertUnchanged(t, s, before)
	}
}

// testReplaceKeys: a replacement takes the key's new attributes and a new
// revision and keeps its hash, creation and revocation.
func testReplaceKeys(t *testing.T, s store.Store) {
	ctx := t.Context()
	a, b := NewKey("key_a"), NewKey("key_b")
	a.Models = []string{"gpt-4o"}
	a.Limits = policies.Limits{Requests: policies.RateLimits{PerMinute: 1}}
	write(t, s.CreateKeys(ctx, []store.Key{a, b}))
	revokedB, err := s.RevokeKey(ctx, b.ID, base.Add(time.Hour))
	if err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	before := changes(t, s, 0)
	write(t, s.ReplaceKeys(ctx, nil))
	assertUnchanged(t, s, before)

	newA := a
	newA.Prefix, newA.Team, newA.Name = "sk-sluice-nwA", "team-b", "renamed"
	newA.Models, newA.Limits, newA.ExpiresAt = nil, fullLimits(), base.Add(48*time.Hour)
	// What ReplaceKeys keeps is taken from the store, whatever is passed.
	newA.Hash, newA.CreatedAt, newA.RevokedAt = [32]byte{9}, base.Add(time.Minute), base
	newB := b
	newB.Name = "still revoked"
	write(t, s.ReplaceKeys(ctx, []store.Key{newA, newB}))

	wantA := newA
	wantA.Hash, wantA.CreatedAt, wantA.RevokedAt = a.Hash, a.CreatedAt, time.Time{}
	wantB := revokedB
	wantB.Name = newB.Name
	got := sortChanges(changes(t, s, before.Rev))
	if diff := cmp.Diff([]store.Key{wantA, wantB}, got.Keys, ignoreRev, equateEmpty); diff != "" {
		t.Fatalf("Changes after ReplaceKeys (-want +got):\n%s", diff)
	}
	if got.Keys[0].Rev <= before.Rev || got.Keys[1].Rev <= got.Keys[0].Rev || got.Rev != got.Keys[1].Rev {
		t.Errorf("revisions %d, %d (Changes.Rev %d) after %d; want increasing in slice order", got.Keys[0].Rev, got.Keys[1].Rev, got.Rev, before.Rev)
	}
}

// testReplaceKeysUnknown: a batch naming an unknown ID replaces none of
// its keys.
func testReplaceKeysUnknown(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := NewKey("key_known")
	write(t, s.CreateKey(ctx, k))
	before := changes(t, s, 0)
	k.Name = "changed"
	err := s.ReplaceKeys(ctx, []store.Key{k, NewKey("key_unknown")})
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReplaceKeys(unknown) = %v; want ErrNotFound", err)
	}
	assertUnchanged(t, s, before)
}

func testRevoke(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := NewKey("key_rev")
	k.Models = []string{"gpt-4o"}
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	before := changes(t, s, 0)
	at := base.Add(time.Hour + 7)
	got, err := s.RevokeKey(ctx, k.ID, at)
	if err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	want := k
	want.RevokedAt = at
	if diff := cmp.Diff(want, got, ignoreRev, equateEmpty); diff != "" {
		t.Errorf("RevokeKey (-want +got):\n%s", diff)
	}
	if !got.Revoked() {
		t.Errorf("RevokeKey returned a key that is not Revoked()")
	}
	if got.Rev <= before.Rev {
		t.Errorf("revoked key's Rev = %d; want > %d", got.Rev, before.Rev)
	}
	c := changes(t, s, before.Rev)
	if diff := cmp.Diff(store.Changes{Keys: []store.Key{got}, Rev: got.Rev}, c, equateEmpty); diff != "" {
		t.Errorf("Changes after revoke (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]store.Key{got}, listKeys(t, s), equateEmpty); diff != "" {
		t.Errorf("ListKeys after revoke (-want +got):\n%s", diff)
	}
}

func testRevokeTwice(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := NewKey("key_twice")
	if err := s.CreateKey(ctx, k); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	first, err := s.RevokeKey(ctx, k.ID, base.Add(time.Minute))
	if err != nil {
		t.Fatalf("first RevokeKey: %v", err)
	}
	second, err := s.RevokeKey(ctx, k.ID, base.Add(time.Hour))
	if err != nil {
		t.Fatalf("second RevokeKey: %v", err)
	}
	if diff := cmp.Diff(first, second, equateEmpty); diff != "" {
		t.Errorf("second RevokeKey changed the key (-first +second):\n%s", diff)
	}
	if c := changes(t, s, first.Rev); !cmp.Equal(c, store.Changes{Rev: first.Rev}, equateEmpty) {
		t.Errorf("Changes(%d) after second revoke = %+v; want nothing at the same Rev", first.Rev, c)
	}
}

func testRevokeUnknown(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.CreateKey(ctx, NewKey("key_known")); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	before := changes(t, s, 0)
	got, err := s.RevokeKey(ctx, "key_unknown", base)
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("RevokeKey(unknown) = %v; want ErrNotFound", err)
	}
	if diff := cmp.Diff(store.Key{}, got, equateEmpty); diff != "" {
		t.Errorf("RevokeKey(unknown) returned a key (-want +got):\n%s", diff)
	}
	assertUnchanged(t, s, before)
}

// fullLimits uses every kind of limit, so that a backend that drops one
// fails.
func fullLimits() policies.Limits {
	return policies.Limits{
		Requests: policies.RateLimits{PerMinute: 60, PerDay: 5000},
		Tokens: policies.TokenLimits{
			Input:  policies.RateLimits{PerMinute: 100_000},
			Output: policies.RateLimits{PerHour: 200_000},
			Total:  policies.RateLimits{PerDay: 1_000_000},
		},
		Budgets: []policies.Budget{
			{MicroUSD: 50_000_000, Period: policies.PeriodMonth},
			{MicroUSD: 5_000_000, Period: policies.PeriodRolling, Window: 24 * time.Hour},
		},
		Models: map[string]policies.Limits{
			"gpt-4o": {Budgets: []policies.Budget{{MicroUSD: 1_000_000, Period: policies.PeriodDay}}},
		},
	}
}

func testSetKeyLimits(t *testing.T, s store.Store) {
	ctx := t.Context()
	k := NewKey("key_lim")
	k.Models = []string{"gpt-4o"}
	k.Limits = policies.Limits{Requests: policies.RateLimits{PerMinute: 1}}
	write(t, s.CreateKey(ctx, k))
	before := changes(t, s, 0)

	got, err := s.SetKeyLimits(ctx, k.ID, fullLimits())
	if err != nil {
		t.Fatalf("SetKeyLimits: %v", err)
	}
	want := k
	want.Limits = fullLimits()
	if diff := cmp.Diff(want, got, ignoreRev, equateEmpty); diff != "" {
		t.Errorf("SetKeyLimits (-want +got):\n%s", diff)
	}
	if got.Rev <= before.Rev {
		t.Errorf("key's Rev after SetKeyLimits = %d; want > %d", got.Rev, before.Rev)
	}
	if diff := cmp.Diff(store.Changes{Keys: []store.Key{got}, Rev: got.Rev}, changes(t, s, before.Rev), equateEmpty); diff != "" {
		t.Errorf("Changes after SetKeyLimits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]store.Key{got}, listKeys(t, s), equateEmpty); diff != "" {
		t.Errorf("ListKeys after SetKeyLimits (-want +got):\n%s", diff)
	}

	// Clearing them, on a revoked key, is a write like any other: the
	// revocation stays and followers see a new revision.
	revoked, err := s.RevokeKey(ctx, k.ID, base.Add(time.Hour))
	if err != nil {
		t.Fatalf("RevokeKey: %v", err)
	}
	cleared, err := s.SetKeyLimits(ctx, k.ID, policies.Limits{})
	if err != nil {
		t.Fatalf("SetKeyLimits(none): %v", err)
	}
	want = revoked
	want.Limits = policies.Limits{}
	if diff := cmp.Diff(want, cleared, ignoreRev, equateEmpty); diff != "" {
		t.Errorf("SetKeyLimits(none) on a revoked key (-want +got):\n%s", diff)
	}
	if cleared.Rev <= revoked.Rev {
		t.Errorf("Rev after clearing = %d; want > %d", cleared.Rev, revoked.Rev)
	}
}

func testSetKeyLimitsUnknown(t *testing.T, s store.Store) {
	ctx := t.Context()
	write(t, s.CreateKey(ctx, NewKey("key_known")))
	before := changes(t, s, 0)
	got, err := s.SetKeyLimits(ctx, "key_unknown", fullLimits())
	if !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("SetKeyLimits(unknown) = %v; want ErrNotFound", err)
	}
	if diff := cmp.Diff(store.Key{}, got, equateEmpty); diff != "" {
		t.Errorf("SetKeyLimits(unknown) returned a key (-want +got):\n%s", diff)
	}
	assertUnchanged(t, s, before)
}

func testPutOrgLimits(t *testing.T, s store.Store) {
	ctx := t.Context()
	v1 := store.Org{Name: "acme", Limits: fullLimits()}
	write(t, s.PutOrg(ctx, v1))
	c1 := changes(t, s, 0)
	v1.Rev = c1.Rev
	if diff := cmp.Diff(store.Changes{Orgs: []store.Org{v1}, Rev: v1.Rev}, c1, equateEmpty); diff != "" {
		t.Errorf("Changes(0) after create (-want +got):\n%s", diff)
	}
	// Replacing the org replaces its limits: none now.
	write(t, s.PutOrg(ctx, store.Org{Name: "acme"}))
	c2 := changes(t, s, v1.Rev)
	if diff := cmp.Diff(store.Changes{Orgs: []store.Org{{Name: "acme", Rev: c2.Rev}}, Rev: c2.Rev}, c2, equateEmpty); diff != "" || c2.Rev <= v1.Rev {
		t.Errorf("Changes(%d) after replace (-want +got):\n%s", v1.Rev, diff)
	}
}

func testPutTeam(t *testing.T, s store.Store) {
	ctx := t.Context()
	v1 := store.Team{Name: "search", Org: "acme", Models: []string{"gpt-4o-mini"}}
	if err := s.PutTeam(ctx, v1); err != nil {
		t.Fatalf("PutTeam(v1): %v", err)
	}
	c1 := changes(t, s, 0)
	if len(c1.Teams) != 1 || c1.Teams[0].Rev != c1.Rev || c1.Rev <= 0 {
		t.Fatalf("Changes(0) after create = %+v; want the team at a positive Rev", c1)
	}
	v1.Rev = c1.Rev
	if diff := cmp.Diff(store.Changes{Teams: []store.Team{v1}, Rev: v1.Rev}, c1, equateEmpty); diff != "" {
		t.Errorf("Changes(0) after create (-want +got):\n%s", diff)
	}

	v2 := store.Team{
		Name:   "search",
		Org:    "globex",
		Models: []string{"claude-*", "gpt-4o"},
		Limits: policies.Limits{Requests: policies.RateLimits{PerHour: 500}},
	}
	if err := s.PutTeam(ctx, v2); err != nil {
		t.Fatalf("PutTeam(v2): %v", err)
	}
	c2 := changes(t, s, 0)
	if len(c2.Teams) != 1 || c2.Rev <= v1.Rev {
		t.Fatalf("Changes(0) after replace = %+v; want the team once, Rev > %d", c2, v1.Rev)
	}
	v2.Rev = c2.Rev
	if diff := cmp.Diff(store.Changes{Teams: []store.Team{v2}, Rev: v2.Rev}, c2, equateEmpty); diff != "" {
		t.Errorf("Changes(0) after replace (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(store.Changes{Teams: []store.Team{v2}, Rev: v2.Rev}, changes(t, s, v1.Rev), equateEmpty); diff != "" {
		t.Errorf("Changes(%d) after replace (-want +got):\n%s", v1.Rev, diff)
	}
}

func testPutOrg(t *testing.T, s store.Store) {
	ctx := t.Context()
	if err := s.PutOrg(ctx, store.Org{Name: "acme"}); err != nil {
		t.Fatalf("PutOrg: %v", err)
	}
	c1 := changes(t, s, 0)
	if len(c1.Orgs) != 1 || c1.Rev <= 0 {
		t.Fatalf("Changes(0) after create = %+v; want the org at a positive Rev", c1)
	}
	if diff := cmp.Diff(store.Changes{Orgs: []store.Org{{Name: "acme", Rev: c1.Rev}}, Rev: c1.Rev}, c1, equateEmpty); diff != "" {
		t.Errorf("Changes(0) after create (-want +got):\n%s", diff)
	}
	if err := s.PutOrg(ctx, store.Org{Name: "acme"}); err != nil {
		t.Fatalf("PutOrg again: %v", err)
	}
	c2 := changes(t, s, c1.Rev)
	if len(c2.Orgs) != 1 || c2.Rev <= c1.Rev {
		t.Fatalf("Changes(%d) after replace = %+v; want the org once, Rev > %d", c1.Rev, c2, c1.Rev)
	}
	if diff := cmp.Diff(store.Changes{Orgs: []store.Org{{Name: "acme", Rev: c2.Rev}}, Rev: c2.Rev}, c2, equateEmpty); diff != "" {
		t.Errorf("Changes after replace (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(c2, changes(t, s, 0), equateEmpty); diff != "" {
		t.Errorf("Changes(0) after replace (-want +got):\n%s", diff)
	}
}

func testChangesEmpty(t *testing.T, s store.Store) {
	if diff := cmp.Diff(store.Changes{}, changes(t, s, 0), equateEmpty); diff != "" {
		t.Errorf("Changes(0) on an empty store (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(store.Changes{Rev: 42}, changes(t, s, 42), equateEmpty); diff != "" {
		t.Errorf("Changes(42) on an empty store (-want +got):\n%s", diff)
	}
}

func testChangesSince(t *testing.T, s store.Store) {
	ctx := t.Context()
	k1, k2 := NewKey("key_1"), NewKey("key_2")
	team := store.Team{Name: "search", Org: "acme"}
	org := store.Org{Name: "acme"}
	write(t, s.CreateKey(ctx, k1))
	write(t, s.PutOrg(ctx, org))
	mid := changes(t, s, 0).Rev
	write(t, s.PutTeam(ctx, team))
	write(t, s.CreateKey(ctx, k2))

	all := sortChanges(changes(t, s, 0))
	if len(all.Keys) != 2 || len(all.Teams) != 1 || len(all.Orgs) != 1 {
		t.Fatalf("Changes(0) = %+v; want 2 keys, 1 team, 1 org", all)
	}
	k1.Rev, k2.Rev = all.Keys[0].Rev, all.Keys[1].Rev
	team.Rev, org.Rev = all.Teams[0].Rev, all.Orgs[0].Rev
	want := store.Changes{Keys: []store.Key{k1, k2}, Teams: []store.Team{team}, Orgs: []store.Org{org}, Rev: k2.Rev}
	if diff := cmp.Diff(want, all, equateEmpty); diff != "" {
		t.Errorf("Changes(0) (-want +got):\n%s", diff)
	}
	if !(k1.Rev < org.Rev && org.Rev == mid && mid < team.Rev && team.Rev < k2.Rev) {
		t.Errorf("revisions key_1=%d org=%d team=%d key_2=%d (mid %d); want increasing in write order", k1.Rev, org.Rev, team.Rev, k2.Rev, mid)
	}

	since := store.Changes{Keys: []store.Key{k2}, Teams: []store.Team{team}, Rev: k2.Rev}
	if diff := cmp.Diff(since, sortChanges(changes(t, s, mid)), equateEmpty); diff != "" {
		t.Errorf("Changes(%d) (-want +got):\n%s", mid, diff)
	}
	// Polling again with the returned Rev, nothing having changed, is
	// empty and stays at that Rev.
	for range 3 {
		if diff := cmp.Diff(store.Changes{Rev: all.Rev}, changes(t, s, all.Rev), equateEmpty); diff != "" {
			t.Fatalf("Changes(%d) with no writes (-want +got):\n%s", all.Rev, diff)
		}
	}
	// Rev never goes backwards, even past the store's revision.
	ahead := all.Rev + 1000
	if diff := cmp.Diff(store.Changes{Rev: ahead}, changes(t, s, ahead), equateEmpty); diff != "" {
		t.Errorf("Changes(%d) (-want +got):\n%s", ahead, diff)
	}
}

func testRevisionsIncrease(t *testing.T, s store.Store) {
	ctx := t.Context()
	steps := []struct {
		name  string
		write func() error
	}{
		{"create key", func() error { return s.CreateKey(ctx, NewKey("key_a")) }},
		{"put org", func() error { return s.PutOrg(ctx, store.Org{Name: "acme"}) }},
		{"put team", func() error { return s.PutTeam(ctx, store.Team{Name: "search", Org: "acme"}) }},
		{"create key", func() error { return s.CreateKey(ctx, NewKey("key_b")) }},
		{"revoke key", func() error { _, err := s.RevokeKey(ctx, "key_a", base); return err }},
		{"set key limits", func() error { _, err := s.SetKeyLimits(ctx, "key_b", fullLimits()); return err }},
		{"replace team", func() error { return s.PutTeam(ctx, store.Team{Name: "search"}) }},
		{"replace org", func() error { return s.PutOrg(ctx, store.Org{Name: "acme"}) }},
	}
	var prev int64
	for i, step := range steps {
		if err := step.write(); err != nil {
			t.Fatalf("step %d (%s): %v", i, step.name, err)
		}
		c := changes(t, s, prev)
		if c.Rev <= prev {
			t.Fatalf("step %d (%s): Changes(%d).Rev = %d; want greater", i, step.name, prev, c.Rev)
		}
		if n := len(c.Keys) + len(c.Teams) + len(c.Orgs); n != 1 {
			t.Errorf("step %d (%s): Changes(%d) = %+v; want exactly the one record written", i, step.name, prev, c)
		}
		prev = c.Rev
	}
}

func testListKeysOrder(t *testing.T, s store.Store) {
	ctx := t.Context()
	created := map[string]time.Time{
		"key_b": base.Add(time.Second),
		"key_a": base.Add(2 * time.Second),
		"key_c": base.Add(time.Second),
		"key_d": base,
		"key_e": base.Add(time.Second + 1),
	}
	// Inserted in an order that is neither creation time nor ID.
	for _, id := range []string{"key_c", "key_a", "key_e", "key_d", "key_b"} {
		k := NewKey(id)
		k.CreatedAt = created[id]
		write(t, s.CreateKey(ctx, k))
	}
	var got []string
	for _, k := range listKeys(t, s) {
		got = append(got, k.ID)
	}
	want := []string{"key_d", "key_b", "key_c", "key_e", "key_a"}
	if diff := cmp.Diff(want, got, equateEmpty); diff != "" {
		t.Errorf("ListKeys order (-want +got):\n%s", diff)
	}
}

func testConcurrentWriters(t *testing.T, s store.Store) {
	const writers, perWriter = 8, 25
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				if err := s.CreateKey(ctx, NewKey(fmt.Sprintf("key_w%d_%02d", w, i))); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent CreateKey: %v", err)
	}
	keys := listKeys(t, s)
	if len(keys) != writers*perWriter {
		t.Fatalf("ListKeys returned %d keys; want %d", len(keys), writers*perWriter)
	}
	seen := make(map[int64]string, len(keys))
	var maxRev int64
	for _, k := range keys {
		if other, dup := seen[k.Rev]; dup {
			t.Errorf("keys %s and %s share revision %d", other, k.ID, k.Rev)
		}
		seen[k.Rev] = k.ID
		maxRev = max(maxRev, k.Rev)
	}
	c := changes(t, s, 0)
	if len(c.Keys) != len(keys) || c.Rev != maxRev {
		t.Errorf("Changes(0) has %d keys at Rev %d; want %d at %d", len(c.Keys), c.Rev, len(keys), maxRev)
	}
}

func testCanceledContext(t *testing.T, s store.Store) {
	write(t, s.CreateKey(t.Context(), NewKey("key_live")))
	before := changes(t, s, 0)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	calls := []struct {
		name string
		call func() error
	}{
		{"CreateKey", func() error { return s.CreateKey(ctx, NewKey("key_new")) }},
		{"RevokeKey", func() error { _, err := s.RevokeKey(ctx, "key_live", base); return err }},
		{"ListKeys", func() error { _, err := s.ListKeys(ctx); return err }},
		{"SetKeyLimits", func() error { _, err := s.SetKeyLimits(ctx, "key_live", fullLimits()); return err }},
		{"PutTeam", func() error { return s.PutTeam(ctx, store.Team{Name: "search"}) }},
		{"PutOrg", func() error { return s.PutOrg(ctx, store.Org{Name: "acme"}) }},
		{"Changes", func() error { _, err := s.Changes(ctx, 0); return err }},
	}
	for _, c := range calls {
		if err := c.call(); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a canceled context = %v; want context.Canceled", c.name, err)
		}
	}
	assertUnchanged(t, s, before)
}

// helpers

func write(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("write: %v", err)
	}
}

func listKeys(t *testing.T, s store.Store) []store.Key {
	t.Helper()
	keys, err := s.ListKeys(t.Context())
	if err != nil {
		t.Fatalf("ListKeys: %v", err)
	}
	return keys
}

func changes(t *testing.T, s store.Store, since int64) store.Changes {
	t.Helper()
	c, err := s.Changes(t.Context(), since)
	if err != nil {
		t.Fatalf("Changes(%d): %v", since, err)
	}
	return c
}

// assertUnchanged checks that the store holds exactly what Changes(0)
// returned in before: a failed write left no trace, not even a revision.
func assertUnchanged(t *testing.T, s store.Store, before store.Changes) {
	t.Helper()
	if diff := cmp.Diff(sortChanges(before), sortChanges(changes(t, s, 0)), equateEmpty); diff != "" {
		t.Errorf("store changed (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(store.Changes{Rev: before.Rev}, changes(t, s, before.Rev), equateEmpty); diff != "" {
		t.Errorf("Changes(%d) after a failed write (-want +got):\n%s", before.Rev, diff)
	}
}

// sortChanges puts c in revision order, which the interface does not
// promise, so that it compares exactly.
func sortChanges(c store.Changes) store.Changes {
	sort.Slice(c.Keys, func(i, j int) bool { return c.Keys[i].Rev < c.Keys[j].Rev })
	sort.Slice(c.Teams, func(i, j int) bool { return c.Teams[i].Rev < c.Teams[j].Rev })
	sort.Slice(c.Orgs, func(i, j int) bool { return c.Orgs[i].Rev < c.Orgs[j].Rev })
	return c
}

// streamer is s as a store.KeyStreamer; the subtest is skipped for a
// backend that does not offer one.
func streamer(t *testing.T, s store.Store) store.KeyStreamer {
	t.Helper()
	ks, ok := s.(store.KeyStreamer)
	if !ok {
		t.Skip("the backend is not a store.KeyStreamer")
	}
	return ks
}

// eachKey runs EachKey and returns what it delivered as one Changes, and
// the sizes it announced.
func eachKey(t *testing.T, ks store.KeyStreamer) (store.Changes, []int) {
	t.Helper()
	var (
		keys  []store.Key
		sizes []int
	)
	c, err := ks.EachKey(t.Context(), func(n int) {
		if len(keys) > 0 {
			t.Errorf("size(%d) called after %d keys", n, len(keys))
		}
		sizes = append(sizes, n)
	}, func(k store.Key) error {
		keys = append(keys, k)
		return nil
	})
	if err != nil {
		t.Fatalf("EachKey: %v", err)
	}
	if c.Keys != nil {
		t.Errorf("EachKey returned %d keys in Changes; want them through fn only", len(c.Keys))
	}
	c.Keys = keys
	return c, sizes
}

// testEachKey: EachKey delivers exactly what Changes(0) returns — every
// key in its latest state (revoked, expiring, with and without an
// allow-list and limits), the teams, the orgs and the revision — and says
// how many keys come first.
func testEachKey(t *testing.T, s store.Store) {
	ctx := t.Context()
	ks := streamer(t, s)
	write(t, s.PutOrg(ctx, store.Org{Name: "acme", Limits: fullLimits()}))
	write(t, s.PutTeam(ctx, store.Team{Name: "search", Org: "acme", Models: []string{"gpt-*"}, Limits: fullLimits()}))
	for i := range 6 {
		k := NewKey(fmt.Sprintf("key_%d", i))
		switch i % 3 {
		case 1:
			k.Team, k.Models = "search", []string{"gpt-4o", "claude-*"}
		case 2:
			k.Team, k.ExpiresAt = "", base.Add(time.Hour)
		}
		write(t, s.CreateKey(ctx, k))
	}
	if _, err := s.RevokeKey(ctx, "key_1", base.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetKeyLimits(ctx, "key_2", fullLimits()); err != nil {
		t.Fatal(err)
	}
	write(t, s.PutTeam(ctx, store.Team{Name: "search", Org: "acme"}))

	want := sortChanges(changes(t, s, 0))
	got, sizes := eachKey(t, ks)
	if diff := cmp.Diff(want, sortChanges(got), equateEmpty); diff != "" {
		t.Errorf("EachKey against Changes(0) (-want +got):\n%s", diff)
	}
	if len(sizes) != 1 || sizes[0] != 6 {
		t.Errorf("size called with %v; want [6]", sizes)
	}
}

func testEachKeyEmpty(t *testing.T, s store.Store) {
	got, sizes := eachKey(t, streamer(t, s))
	if diff := cmp.Diff(store.Changes{}, got, equateEmpty); diff != "" {
		t.Errorf("EachKey on an empty store (-want +got):\n%s", diff)
	}
	if len(sizes) > 1 || len(sizes) == 1 && sizes[0] != 0 {
		t.Errorf("size called with %v on an empty store; want [0] or not at all", sizes)
	}
}

// testEachKeyStops: an error from fn ends the read at once and is
// returned.
func testEachKeyStops(t *testing.T, s store.Store) {
	ctx := t.Context()
	ks := streamer(t, s)
	for i := range 5 {
		write(t, s.CreateKey(ctx, NewKey(fmt.Sprintf("key_%d", i))))
	}
	stop := errors.New("stop here")
	calls := 0
	_, err := ks.EachKey(ctx, nil, func(store.Key) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Errorf("EachKey error = %v; want fn's", err)
	}
	if calls != 2 {
		t.Errorf("fn called %d times; want 2 (stopped at its error)", calls)
	}
}

package keyring_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/sqlite"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/policies"
)

const (
	secretA = "sk-sluice-AAAA456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
	secretB = "sk-sluice-BBBB456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
	secretC = "sk-sluice-CCCC456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func snapshot(t *testing.T, yaml string) *policies.Snapshot {
	t.Helper()
	cfg, err := policies.Parse([]byte(yaml), "sluice.yaml", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := policies.Compile(cfg, filepath.Join(t.TempDir(), "sluice.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const base = `
providers: [{name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}]
models: [{name: m1, provider: local}, {name: m2, provider: local}]
orgs: [{name: acme}]
teams:
  - {name: red, org: acme, models: [m1], limits: {requests: {per_minute: 10, per_day: 100}}}
`

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "keys.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestResolveMergesConfigAndStore(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	ring := keyring.New(testenv.Quiet())
	ring.SetPolicy(snapshot(t, base+`
keys:
  - {name: bot, team: red, sha256: `+apikey.HashHex(secretA)+`, prefix: sk-sluice-AAAA45, models: [m1]}
`))
	// A stored key in a team that exists only in the store.
	if err := st.PutOrg(ctx, store.Org{Name: "beta"}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutTeam(ctx, store.Team{Name: "blue", Org: "beta", Models: []string{"m2"}, Limits: policies.Limits{Requests: policies.RateLimits{PerHour: 7}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateKey(ctx, store.Key{ID: "key_b", Prefix: apikey.PublicPrefix(secretB), Hash: apikey.Hash(secretB), Team: "blue", Name: "b",
		Limits: policies.Limits{Requests: policies.RateLimits{PerMinute: 3}}, CreatedAt: t0, ExpiresAt: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	// A stored key with the same hash as the declared one: the config wins.
	if err := st.CreateKey(ctx, store.Key{ID: "key_dup", Prefix: "x", Hash: apikey.Hash(secretA), Team: "blue", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if ring.Synced() {
		t.Fatal("Synced before the first Sync")
	}
	if err := ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	if !ring.Synced() || ring.Len() != 2 {
		t.Fatalf("Synced=%v Len=%d, want true 2", ring.Synced(), ring.Len())
	}

	a := ring.Resolve(apikey.Hash(secretA))
	if a == nil || a.KeyID != "config:bot" || a.Team != "red" || a.Org != "acme" || a.TeamMissing {
		t.Fatalf("declared key resolved to %+v", a)
	}
	// The request limits ext_authz counts: the key's (none) and its team's.
	if diff := cmp.Diff([2]policies.RateLimits{{}, {PerMinute: 10, PerDay: 100}}, [2]policies.RateLimits{a.KeyLimits.Requests, a.TeamLimits.Requests}); diff != "" {
		t.Errorf("declared key request limits, key and team (-want +got):\n%s", diff)
	}

	b := ring.Resolve(apikey.Hash(secretB))
	if b == nil || b.KeyID != "key_b" || b.Team != "blue" || b.Org != "beta" || !b.ExpiresAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("stored key resolved to %+v", b)
	}
	if !b.TeamModels.Allows("m2") || b.TeamModels.Allows("m1") || !b.KeyModels.Unrestricted() {
		t.Errorf("stored key allow-lists: key %v team %v", b.KeyModels.Patterns(), b.TeamModels.Patterns())
	}
	if diff := cmp.Diff([2]policies.RateLimits{{PerMinute: 3}, {PerHour: 7}}, [2]policies.RateLimits{b.KeyLimits.Requests, b.TeamLimits.Requests}); diff != "" {
		t.Errorf("stored key request limits, key and team (-want +got):\n%s", diff)
	}
	wantMeta, _ := structpb.NewStruct(map[string]any{"key_id": "key_b", "key_prefix": "sk-sluice-BBBB45", "key_name": "b", "team": "blue", "org": "beta", "team_models": []any{"m2"}})
	if diff := cmp.Diff(wantMeta, b.Metadata(), protocmp.Transform()); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	if ring.Resolve(apikey.Hash(secretC)) != nil {
		t.Error("unknown key resolved")
	}
	if ring.ByID("key_b") != b || ring.ByID("config:bot") != a || ring.ByID("key_dup") != nil || ring.ByID("nope") != nil {
		t.Error("ByID does not find the published principals (or finds the shadowed duplicate)")
	}
}

func TestFollowSeesRevocationAndNewKeys(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := openStore(t)
	ring := keyring.New(testenv.Quiet())
	ring.SetPolicy(snapshot(t, base))
	if err := st.CreateKey(ctx, store.Key{ID: "key_a", Prefix: "p", Hash: apikey.Hash(secretA), Team: "red", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ring.Follow(ctx, st, 10*time.Millisecond, nil) }()

	if _, err := st.RevokeKey(ctx, "key_a", t0); err != nil {
		t.Fatal(err)
	}
	if err := st.CreateKey(ctx, store.Key{ID: "key_c", Prefix: "p", Hash: apikey.Hash(secretC), Team: "red", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "revocation and new key", func() bool {
		a, c := ring.Resolve(apikey.Hash(secretA)), ring.Resolve(apikey.Hash(secretC))
		return a != nil && a.Revoked() && c != nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Follow returned %v", err)
	}
}

// notifying is a store whose Changed signals when the test says.
type notifying struct {
	store.Store
	ch chan struct{}
}

func (n notifying) Changed() <-chan struct{} { return n.ch }

// TestFollowWakesOnNotification: with a poll far longer than the test, a
// change is seen once the source signals it, and not before.
func TestFollowWakesOnNotification(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := notifying{openStore(t), make(chan struct{}, 1)}
	ring := keyring.New(testenv.Quiet())
	ring.SetPolicy(snapshot(t, base))
	if err := ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ring.Follow(ctx, st, time.Hour, nil) }()
	if err := st.CreateKey(ctx, store.Key{ID: "key_a", Prefix: "p", Hash: apikey.Hash(secretA), Team: "red", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if ring.Resolve(apikey.Hash(secretA)) != nil {
		t.Fatal("the key was seen before any signal or poll")
	}
	st.ch <- struct{}{}
	waitFor(t, "the new key after the signal", func() bool { return ring.Resolve(apikey.Hash(secretA)) != nil })
	cancel()
	if err := testctx.Receive(t, "Follow to return", done); err != nil {
		t.Fatalf("Follow returned %v", err)
	}
}

// failing is a hand-written fake ChangeSource.
type failing struct {
	changes func(since int64) (store.Changes, error)
}

func (f failing) Changes(_ context.Context, since int64) (store.Changes, error) {
	return f.changes(since)
}

func TestFailedSyncKeepsReplica(t *testing.T) {
	ctx := context.Background()
	ring := keyring.New(testenv.Quiet())
	ring.SetPolicy(snapshot(t, base))
	ok := failing{func(since int64) (store.Changes, error) {
		return store.Changes{Keys: []store.Key{{ID: "key_a", Hash: apikey.Hash(secretA), Team: "red"}}, Rev: 5}, nil
	}}
	if err := ring.Sync(ctx, ok); err != nil {
		t.Fatal(err)
	}
	var asked int64 = -1
	bad := failing{func(since int64) (store.Changes, error) {
		asked = since
		return store.Changes{}, errors.New("disk on fire")
	}}
	if err := ring.Sync(ctx, bad); err == nil || err.Error() != "keyring: read store changes: disk on fire" {
		t.Fatalf("Sync error = %v", err)
	}
	if asked != 5 {
		t.Errorf("second Sync asked since=%d, want 5", asked)
	}
	if ring.Resolve(apikey.Hash(secretA)) == nil {
		t.Error("replica lost after a failed sync")
	}
}

func TestPolicyChangeRepublishes(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	ring := keyring.New(testenv.Quiet())
	ring.SetPolicy(snapshot(t, base))
	if err := st.CreateKey(ctx, store.Key{ID: "key_a", Prefix: "p", Hash: apikey.Hash(secretA), Team: "red", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	if p := ring.Resolve(apikey.Hash(secretA)); p.TeamMissing || !p.TeamModels.Allows("m1") {
		t.Fatalf("before: %+v", p)
	}
	// The team is removed from the config: the key's team is now missing.
	ring.SetPolicy(snapshot(t, `
providers: [{name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}]
models: [{name: m1, provider: local}]
`))
	if p := ring.Resolve(apikey.Hash(secretA)); p == nil || !p.TeamMissing {
		t.Fatalf("after: %+v", p)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOrgLimits: an org the config declares has the config's limits, even
// if the store has one of the same name; an org only in the store has the
// store's, and a change to them reaches its keys with the next Sync. Team
// and Org report the same limits for the budgets view.
func TestOrgLimits(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	ring := keyring.New(testenv.Quiet())
	ring.SetPolicy(snapshot(t, `
providers: [{name: local, kind: openai-compatible, base_url: "http://127.0.0.1:8000"}]
models: [{name: m1, provider: local}]
orgs: [{name: acme, limits: {requests: {per_day: 1000}}}]
teams: [{name: red, org: acme}]
`))
	monthly := func(usd int64) policies.Limits {
		return policies.Limits{Budgets: []policies.Budget{{MicroUSD: usd * 1_000_000, Period: policies.PeriodMonth}}}
	}
	for _, o := range []store.Org{{Name: "acme", Limits: monthly(1)}, {Name: "beta", Limits: monthly(50)}} {
		if err := st.PutOrg(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.PutTeam(ctx, store.Team{Name: "blue", Org: "beta"}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []store.Key{
		{ID: "key_a", Prefix: "p", Hash: apikey.Hash(secretA), Team: "red", CreatedAt: t0},
		{ID: "key_b", Prefix: "p", Hash: apikey.Hash(secretB), Team: "blue", CreatedAt: t0},
	} {
		if err := st.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	configured := policies.Limits{Requests: policies.RateLimits{PerDay: 1000}}
	if diff := cmp.Diff(configured, ring.ByID("key_a").OrgLimits); diff != "" {
		t.Errorf("key of a config org: org limits (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(monthly(50), ring.ByID("key_b").OrgLimits); diff != "" {
		t.Errorf("key of a stored org: org limits (-want +got):\n%s", diff)
	}

	if err := st.PutOrg(ctx, store.Org{Name: "beta", Limits: monthly(70)}); err != nil {
		t.Fatal(err)
	}
	if err := ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(monthly(70), ring.ByID("key_b").OrgLimits); diff != "" {
		t.Errorf("after PutOrg: org limits (-want +got):\n%s", diff)
	}
	team := ring.Team("blue")
	if team == nil || team.KeyID != "" || team.Team != "blue" || team.Org != "beta" || !cmp.Equal(monthly(70), team.OrgLimits) {
		t.Errorf("Team(blue) = %+v", team)
	}
	if org := ring.Org("acme"); org == nil || org.Org != "acme" || org.Team != "" || !cmp.Equal(configured, org.OrgLimits) {
		t.Errorf("Org(acme) = %+v", org)
	}
	if ring.Team("nope") != nil || ring.Org("nope") != nil || ring.Org("") != nil {
		t.Error("Team or Org found one that does not exist")
	}
}

// changesFunc is a ChangeSource from a function.
type changesFunc func(since int64) store.Changes

func (f changesFunc) Changes(_ context.Context, since int64) (store.Changes, error) {
	return f(since), nil
}

// TestStaleSyncDoesNotUndoRevocation: two overlapping Syncs may deliver
// their results out of order; the older record must not replace the newer.
func TestStaleSyncDoesNotUndoRevocation(t *testing.T) {
	r := keyring.New(testenv.Quiet())
	h := sha256.Sum256([]byte("sk-sluice-stale"))
	live := store.Key{ID: "key_s", Hash: h, Team: "t", Rev: 3}
	revoked := live
	revoked.RevokedAt, revoked.Rev = time.Unix(1_800_000_000, 0), 5
	ctx := context.Background()
	if err := r.Sync(ctx, changesFunc(func(int64) store.Changes { return store.Changes{Keys: []store.Key{revoked}, Rev: 5} })); err != nil {
		t.Fatal(err)
	}
	if err := r.Sync(ctx, changesFunc(func(int64) store.Changes { return store.Changes{Keys: []store.Key{live}, Rev: 3} })); err != nil {
		t.Fatal(err)
	}
	p := r.Resolve(h)
	if p == nil || p.RevokedAt.IsZero() {
		t.Fatalf("a stale record undid the revocation: %+v", p)
	}
}

// TestKeyTimesKeepTheirInstant: a key's expiry and revocation times come
// back as the same instants, to the nanosecond, in UTC, whatever zone they
// were given in and however far from the epoch; unset ones stay zero. The
// ring keeps them in fewer bytes than time.Time does.
func TestKeyTimesKeepTheirInstant(t *testing.T) {
	zone := time.FixedZone("UTC+5:30", 5*3600+1800)
	for _, tt := range []struct {
		name             string
		expires, revoked time.Time
	}{
		{"unset", time.Time{}, time.Time{}},
		{"nanoseconds, another zone", time.Date(2031, 3, 4, 5, 6, 7, 999_999_999, zone), time.Date(2026, 12, 2, 0, 0, 0, 1, zone)},
		{"the epoch", time.Unix(0, 0), time.Unix(0, 0)},
		{"before the epoch", time.Date(1969, 12, 31, 23, 59, 59, 5, time.UTC), time.Time{}},
		{"the last second of year 9999", time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC), time.Time{}},
		{"with a monotonic reading", time.Now().Add(time.Hour), time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := keyring.New(testenv.Quiet())
			h := sha256.Sum256([]byte("sk-sluice-times-" + tt.name))
			k := store.Key{ID: "key_t", Hash: h, Team: "t", ExpiresAt: tt.expires, RevokedAt: tt.revoked, Rev: 1}
			if err := r.Sync(context.Background(), changesFunc(func(int64) store.Changes { return store.Changes{Keys: []store.Key{k}, Rev: 1} })); err != nil {
				t.Fatal(err)
			}
			p := r.Resolve(h)
			if p == nil {
				t.Fatal("the key does not resolve")
			}
			for _, c := range []struct {
				what      string
				got, want time.Time
			}{{"ExpiresAt", p.ExpiresAt, tt.expires}, {"RevokedAt", p.RevokedAt, tt.revoked}} {
				if !c.got.Equal(c.want) || c.got.IsZero() != c.want.IsZero() || c.got.Location() != time.UTC {
					t.Errorf("%s = %v (%v), want %v in UTC", c.what, c.got, c.got.Location(), c.want)
				}
			}
			if !tt.expires.IsZero() && (!p.Expired(tt.expires) || p.Expired(tt.expires.Add(-time.Nanosecond))) {
				t.Errorf("Expired is not exact at %v", tt.expires)
			}
			if p.Revoked() != !tt.revoked.IsZero() {
				t.Errorf("Revoked() = %v, want %v", p.Revoked(), !tt.revoked.IsZero())
			}
		})
	}
}

// TestFirstLoadTakesTheCurrentPolicysKeys checks that the first load from
// the store indexes the declared keys of the policy in force, however
// often it changed before, beside the stored keys.
func TestFirstLoadTakesTheCurrentPolicysKeys(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	if err := st.CreateKey(ctx, store.Key{ID: "key_c", Prefix: apikey.PublicPrefix(secretC), Hash: apikey.Hash(secretC), Team: "red", CreatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	ring := keyring.New(testenv.Quiet())
	ring.SetPolicy(snapshot(t, base+`
keys:
  - {name: first, team: red, sha256: `+apikey.HashHex(secretA)+`}
`))
	ring.SetPolicy(snapshot(t, base+`
keys:
  - {name: second, team: red, sha256: `+apikey.HashHex(secretB)+`, models: [m2]}
`))
	if err := ring.Sync(ctx, st); err != nil {
		t.Fatal(err)
	}
	if ring.Len() != 2 {
		t.Errorf("Len = %d, want 2", ring.Len())
	}
	if p := ring.Resolve(apikey.Hash(secretA)); p != nil {
		t.Errorf("a key of the replaced policy resolved to %+v", p)
	}
	if p := ring.Resolve(apikey.Hash(secretB)); p == nil || p.KeyID != "config:second" || !p.KeyModels.Allows("m2") || p.KeyModels.Allows("m1") {
		t.Errorf("the declared key resolved to %+v", p)
	}
	if p := ring.Resolve(apikey.Hash(secretC)); p == nil || p.KeyID != "key_c" {
		t.Errorf("the stored key resolved to %+v", p)
	}
}

package keyring_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/sqlite"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/policies"
)

// changesOnly hides every method of a store but Changes, so that a Sync
// from it takes the whole batch.
type changesOnly struct{ src keyring.ChangeSource }

func (c changesOnly) Changes(ctx context.Context, since int64) (store.Changes, error) {
	return c.src.Changes(ctx, since)
}

// streamer is a store.KeyStreamer made of functions, recording what it
// was asked.
type streamer struct {
	changes func(ctx context.Context, since int64) (store.Changes, error)
	each    func(ctx context.Context, size func(int), fn func(store.Key) error) (store.Changes, error)
	streams int
	since   []int64
}

func (s *streamer) Changes(ctx context.Context, since int64) (store.Changes, error) {
	s.since = append(s.since, since)
	return s.changes(ctx, since)
}

func (s *streamer) EachKey(ctx context.Context, size func(int), fn func(store.Key) error) (store.Changes, error) {
	s.streams++
	return s.each(ctx, size, fn)
}

func over(st *sqlite.Store) *streamer {
	return &streamer{changes: st.Changes, each: st.EachKey}
}

const declaredShadow = `
keys:
  - {name: bot, team: red, sha256: %s, prefix: sk-sluice-AAAA45, models: [m1]}
`

// fill writes a population with every shape of key the ring treats apart:
// with and without a team (a declared one, a stored one, one that exists
// nowhere), with and without their own allow-list (one invalid), simple
// and full limits, revoked, expired, and one whose hash a declared key
// has. It returns every key's id and hash.
func fill(t *testing.T, st *sqlite.Store) map[string][32]byte {
	t.Helper()
	ctx := t.Context()
	write := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write(st.PutOrg(ctx, store.Org{Name: "beta", Limits: policies.Limits{Requests: policies.RateLimits{PerDay: 1000}}}))
	write(st.PutTeam(ctx, store.Team{Name: "blue", Org: "beta", Models: []string{"m2"}, Limits: policies.Limits{Requests: policies.RateLimits{PerHour: 7}}}))
	write(st.PutTeam(ctx, store.Team{Name: "green", Org: "acme"}))
	teams := []string{"red", "blue", "green", "", "gone"}
	full := policies.Limits{Requests: policies.RateLimits{PerMinute: 5}, Budgets: []policies.Budget{{MicroUSD: 1000, Period: "day"}}}
	var keys []store.Key
	for i := range 300 {
		k := store.Key{
			ID: fmt.Sprintf("key_%04d", i), Prefix: fmt.Sprintf("sk-sluice-%04d", i), Hash: hashOf(i),
			Team: teams[i%len(teams)], Name: fmt.Sprintf("key %d", i), CreatedAt: t0,
		}
		switch i % 4 {
		case 1:
			k.Models = []string{"m1"}
		case 2:
			k.Models = []string{"m1", "m2*"}
		}
		switch i % 6 {
		case 1:
			k.Limits = policies.Limits{Requests: policies.RateLimits{PerMinute: 600}}
		case 2:
			k.Limits = full
		}
		switch i % 5 {
		case 1:
			k.ExpiresAt = t0.Add(-time.Hour) // expired
		case 2:
			k.ExpiresAt = t0.Add(time.Hour)
		}
		keys = append(keys, k)
	}
	keys[7].Models = []string{"not a pattern!"} // the key is disabled
	keys = append(keys, store.Key{ID: "key_dup", Prefix: "x", Hash: apikey.Hash(secretA), Team: "blue", CreatedAt: t0})
	write(st.CreateKeys(ctx, keys))
	for i := 0; i < len(keys)-1; i += 7 {
		if _, err := st.RevokeKey(ctx, keys[i].ID, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.SetKeyLimits(ctx, keys[3].ID, full); err != nil {
		t.Fatal(err)
	}
	write(st.PutTeam(ctx, store.Team{Name: "green", Org: "beta", Models: []string{"m1"}}))
	ids := map[string][32]byte{}
	for _, k := range keys {
		ids[k.ID] = k.Hash
	}
	return ids
}

// principalOpts compare principals by what they say: allow-lists by their
// patterns, unexported parts through Metadata.
var principalOpts = cmp.Options{
	cmpopts.IgnoreUnexported(keyring.Principal{}),
	cmp.Transformer("patterns", func(m policies.ModelSet) []string { return m.Patterns() }),
}

// sameRing fails unless a and b hold the same keys, teams and orgs.
func sameRing(t *testing.T, a, b *keyring.Ring, ids map[string][32]byte, teams ...string) {
	t.Helper()
	if a.Len() != b.Len() || a.Synced() != b.Synced() {
		t.Errorf("Len %d / %d, Synced %v / %v", a.Len(), b.Len(), a.Synced(), b.Synced())
	}
	found := 0
	for id, h := range ids {
		pa, pb := a.Resolve(h), b.Resolve(h)
		if diff := cmp.Diff(pa, pb, principalOpts); diff != "" {
			t.Errorf("Resolve(hash of %s) (-batch +streamed):\n%s", id, diff)
			continue
		}
		if pa != nil {
			found++
			if diff := cmp.Diff(pa.Metadata(), pb.Metadata(), protocmp.Transform()); diff != "" {
				t.Errorf("metadata of %s (-batch +streamed):\n%s", id, diff)
			}
		}
		if diff := cmp.Diff(a.ByID(id), b.ByID(id), principalOpts); diff != "" {
			t.Errorf("ByID(%s) (-batch +streamed):\n%s", id, diff)
		}
	}
	if found < len(ids)/2 {
		t.Errorf("only %d of %d keys resolve", found, len(ids))
	}
	for _, name := range teams {
		if diff := cmp.Diff(a.Team(name), b.Team(name), principalOpts); diff != "" {
			t.Errorf("Team(%s) (-batch +streamed):\n%s", name, diff)
		}
		if diff := cmp.Diff(a.Org(name), b.Org(name), principalOpts); diff != "" {
			t.Errorf("Org(%s) (-batch +streamed):\n%s", name, diff)
		}
	}
}

// TestStreamedLoadEqualsBatch: the first Sync from a store that streams
// leaves the ring a Sync from Changes(0) leaves — every key by hash and
// by id, its metadata, the teams and orgs — and at the same revision, so
// that the Syncs that follow read the same changes.
func TestStreamedLoadEqualsBatch(t *testing.T) {
	ctx := t.Context()
	st := openStore(t).(*sqlite.Store)
	ids := fill(t, st)
	ids["config:bot"] = apikey.Hash(secretA)
	pol := snapshot(t, base+fmt.Sprintf(declaredShadow, apikey.HashHex(secretA)))
	groups := []string{"red", "blue", "green", "gone", "acme", "beta"}

	batch, streamed := keyring.New(testenv.Quiet()), keyring.New(testenv.Quiet())
	batch.SetPolicy(pol)
	streamed.SetPolicy(pol)
	bsrc, ssrc := &streamer{changes: st.Changes}, over(st)
	if err := batch.Sync(ctx, changesOnly{bsrc}); err != nil {
		t.Fatal(err)
	}
	if err := streamed.Sync(ctx, ssrc); err != nil {
		t.Fatal(err)
	}
	if ssrc.streams != 1 || len(ssrc.since) != 0 {
		t.Fatalf("streamed Sync: %d EachKey and Changes since %v; want one EachKey only", ssrc.streams, ssrc.since)
	}
	if p := streamed.ByID("key_0007"); p != nil {
		t.Errorf("the key with an invalid allow-list resolved: %+v", p)
	}
	if p := streamed.Resolve(apikey.Hash(secretA)); p == nil || p.KeyID != "config:bot" {
		t.Errorf("the declared key does not win over the stored one with its hash: %+v", p)
	}
	sameRing(t, batch, streamed, ids, groups...)

	// The next Syncs start from the same revision and stay equal.
	if _, err := st.RevokeKey(ctx, "key_0001", t0); err != nil {
		t.Fatal(err)
	}
	if err := st.PutTeam(ctx, store.Team{Name: "blue", Org: "acme"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		ring *keyring.Ring
		src  keyring.ChangeSource
	}{{batch, changesOnly{bsrc}}, {streamed, ssrc}} {
		if err := r.ring.Sync(ctx, r.src); err != nil {
			t.Fatal(err)
		}
	}
	all, err := st.Changes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := all.Rev - 2; len(bsrc.since) != 2 || bsrc.since[1] != want || !cmp.Equal(bsrc.since[1:], ssrc.since) {
		t.Errorf("second Sync asked since %v (batch) and %v (streamed); want %d for both", bsrc.since[1:], ssrc.since, want)
	}
	sameRing(t, batch, streamed, ids, groups...)
	if p := streamed.ByID("key_0001"); p == nil || !p.Revoked() {
		t.Errorf("key_0001 after its revocation: %+v", p)
	}

	// The shadowed stored key comes back, in both, once the declared one
	// goes.
	plain := snapshot(t, base)
	batch.SetPolicy(plain)
	streamed.SetPolicy(plain)
	if p := streamed.Resolve(apikey.Hash(secretA)); p == nil || p.KeyID != "key_dup" {
		t.Errorf("after the declared key went, its hash resolves to %+v; want key_dup", p)
	}
	sameRing(t, batch, streamed, ids, groups...)
}

// TestStreamedLoadFailure: a store that fails in the middle of the first
// read fails the Sync with its error and leaves the ring as it was — not
// synced, no stored key, team or org — and the next Sync loads it whole.
func TestStreamedLoadFailure(t *testing.T) {
	ctx := t.Context()
	st := openStore(t).(*sqlite.Store)
	ids := fill(t, st)
	pol := snapshot(t, base+fmt.Sprintf(declaredShadow, apikey.HashHex(secretA)))
	ring := keyring.New(testenv.Quiet())
	ring.SetPolicy(pol)
	fire := errors.New("disk on fire")
	src := over(st)
	delivered := 0
	src.each = func(ctx context.Context, size func(int), fn func(store.Key) error) (store.Changes, error) {
		_, err := st.EachKey(ctx, size, func(k store.Key) error {
			if delivered == 100 {
				return fire
			}
			delivered++
			return fn(k)
		})
		return store.Changes{}, err
	}
	if err := ring.Sync(ctx, src); !errors.Is(err, fire) {
		t.Fatalf("Sync error = %v; want the store's", err)
	}
	if delivered != 100 {
		t.Fatalf("the store delivered %d keys before failing; want 100", delivered)
	}
	if ring.Synced() || ring.Len() != 1 || ring.Team("blue") != nil || ring.Org("beta") != nil {
		t.Errorf("after a failed load: Synced=%v Len=%d Team(blue)=%v Org(beta)=%v; want the declared key only",
			ring.Synced(), ring.Len(), ring.Team("blue"), ring.Org("beta"))
	}
	for id, h := range ids {
		if p := ring.Resolve(h); p != nil && p.KeyID != "config:bot" || ring.ByID(id) != nil {
			t.Errorf("stored key %s resolves after a failed load", id)
		}
	}
	if p := ring.Resolve(apikey.Hash(secretA)); p == nil || p.KeyID != "config:bot" {
		t.Errorf("the declared key after a failed load: %+v", p)
	}

	src.each = st.EachKey
	if err := ring.Sync(ctx, src); err != nil {
		t.Fatal(err)
	}
	if src.streams != 2 || len(src.since) != 0 {
		t.Errorf("%d EachKey and Changes since %v; want the second Sync to stream too", src.streams, src.since)
	}
	want := keyring.New(testenv.Quiet())
	want.SetPolicy(pol)
	if err := want.Sync(ctx, changesOnly{st}); err != nil {
		t.Fatal(err)
	}
	ids["config:bot"] = apikey.Hash(secretA)
	sameRing(t, want, ring, ids, "red", "blue", "green", "acme", "beta")
}

// TestStreamedLoadMeetsOtherWriters: what changes in the ring while the
// store is read is not lost. A policy reloaded meanwhile is the one the
// table is made with; a load finished by another Sync meanwhile wins, and
// the streamed Sync then reads what changed since that one.
func TestStreamedLoadMeetsOtherWriters(t *testing.T) {
	ctx := t.Context()
	st := openStore(t).(*sqlite.Store)
	ids := fill(t, st)
	old := snapshot(t, base)
	pol := snapshot(t, base+fmt.Sprintf(declaredShadow, apikey.HashHex(secretA)))

	t.Run("policy", func(t *testing.T) {
		ring := keyring.New(testenv.Quiet())
		ring.SetPolicy(old)
		src := over(st)
		src.each = func(ctx context.Context, size func(int), fn func(store.Key) error) (store.Changes, error) {
			ring.SetPolicy(pol)
			return st.EachKey(ctx, size, fn)
		}
		if err := ring.Sync(ctx, src); err != nil {
			t.Fatal(err)
		}
		want := keyring.New(testenv.Quiet())
		want.SetPolicy(pol)
		if err := want.Sync(ctx, changesOnly{st}); err != nil {
			t.Fatal(err)
		}
		if p := ring.Resolve(apikey.Hash(secretA)); p == nil || p.KeyID != "config:bot" {
			t.Errorf("the key declared while the store was read: %+v", p)
		}
		withDeclared := map[string][32]byte{"config:bot": apikey.Hash(secretA)}
		for id, h := range ids {
			withDeclared[id] = h
		}
		sameRing(t, want, ring, withDeclared, "red", "blue", "green")
	})

	t.Run("load", func(t *testing.T) {
		ring := keyring.New(testenv.Quiet())
		ring.SetPolicy(old)
		other := store.Key{ID: "key_other", Hash: apikey.Hash(secretC), Team: "blue", Rev: 1 << 40}
		src := over(st)
		src.each = func(ctx context.Context, size func(int), fn func(store.Key) error) (store.Changes, error) {
			ring.Apply(store.Changes{Keys: []store.Key{other}, Rev: other.Rev})
			return st.EachKey(ctx, size, fn)
		}
		src.changes = func(ctx context.Context, since int64) (store.Changes, error) {
			return store.Changes{Rev: since}, nil
		}
		if err := ring.Sync(ctx, src); err != nil {
			t.Fatal(err)
		}
		if !cmp.Equal(src.since, []int64{other.Rev}) {
			t.Errorf("after losing the race the Sync asked Changes since %v; want [%d]", src.since, other.Rev)
		}
		if ring.Len() != 1 || ring.ByID("key_other") == nil || ring.ByID("key_0002") != nil {
			t.Errorf("Len %d: the streamed snapshot replaced the load that finished first", ring.Len())
		}
	})
}

package keyring_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/internal/store/sqlite"
	"github.com/sluicegw/sluice/internal/testenv"
	"github.com/sluicegw/sluice/policies"
)

// population is n stored keys shaped like bench/keyscale's: one team per
// 100 keys with an allow-list and request limits, every 10th key with its
// own allow-list, every 7th with a per-minute limit, every 5th expiring.
func population(n int) store.Changes {
	ch := store.Changes{Rev: int64(n) + int64(n/100) + 1}
	for t := range max(1, (n+99)/100) {
		ch.Teams = append(ch.Teams, store.Team{Name: "team-" + strconv.Itoa(t), Org: "acme", Models: []string{"m1", "m2"},
			Limits: policies.Limits{Requests: policies.RateLimits{PerMinute: 6000, PerDay: 1000000}}, Rev: int64(t + 1)})
	}
	ch.Keys = make([]store.Key, n)
	for i := range n {
		k := store.Key{
			ID: "key_" + strconv.Itoa(1000000000+i), Prefix: "sk-sluice-" + strconv.Itoa(100000+i%900000),
			Hash: hashOf(i), Team: "team-" + strconv.Itoa(i/100), Name: "key-" + strconv.Itoa(i),
			CreatedAt: t0, Rev: int64(len(ch.Teams) + i + 1),
		}
		if i%10 == 0 {
			k.Models = []string{"m1"}
		}
		if i%7 == 0 {
			k.Limits.Requests.PerMinute = 600
		}
		if i%5 == 0 {
			k.ExpiresAt = t0.Add(365 * 24 * time.Hour)
		}
		ch.Keys[i] = k
	}
	return ch
}

func hashOf(i int) [32]byte {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(i))
	return sha256.Sum256(b[:])
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkApply loads n stored keys into an empty ring, as serve's first
// sync does, and reports what the ring keeps per key once the batch it was
// given is gone (retained-B/key).
func BenchmarkApply(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			var retained uint64
			for b.Loop() {
				b.StopTimer()
				before := heapInUse()
				ch := population(n)
				b.StartTimer()
				ring := keyring.New(testenv.Quiet())
				ring.Apply(ch)
				b.StopTimer()
				ch = store.Changes{}
				retained = heapInUse() - before
				runtime.KeepAlive(ring)
				b.StartTimer()
			}
			b.ReportMetric(float64(retained)/float64(n), "retained-B/key")
		})
	}
}

// TestTableFindsEveryKey: with 100,000 stored keys, every key resolves by
// hash and by id to its own principal, and no absent hash or id resolves.
func TestTableFindsEveryKey(t *testing.T) {
	const n = 100000
	ch := population(n)
	ring := keyring.New(testenv.Quiet())
	ring.Apply(ch)
	if ring.Len() != n {
		t.Fatalf("Len = %d, want %d", ring.Len(), n)
	}
	for i, k := range ch.Keys {
		p := ring.Resolve(k.Hash)
		if p == nil || p.KeyID != k.ID || p.KeyName != k.Name || p.Team != k.Team {
			t.Fatalf("key %d: Resolve = %+v", i, p)
		}
		if q := ring.ByID(k.ID); q != p {
			t.Fatalf("key %d: ByID = %+v, Resolve = %+v", i, q, p)
		}
	}
	for i := n; i < 2*n; i++ {
		if p := ring.Resolve(hashOf(i)); p != nil {
			t.Fatalf("absent hash %d resolved to %s", i, p.KeyID)
		}
		if p := ring.ByID("key_" + strconv.Itoa(1000000000+i)); p != nil {
			t.Fatalf("absent id %d resolved", i)
		}
	}
}

// TestOverlayAndCompaction: stored-key changes after the first load —
// few (kept beside the table) and many (the table is rebuilt) — are seen
// by hash and by id, keep the latest record, and count new keys once.
func TestOverlayAndCompaction(t *testing.T) {
	ch := population(2000)
	ring := keyring.New(testenv.Quiet())
	ring.Apply(ch)
	rev := ch.Rev
	revoke := func(ids ...int) {
		var batch []store.Key
		for _, i := range ids {
			k := ch.Keys[i]
			rev++
			k.RevokedAt, k.Rev = t0, rev
			batch = append(batch, k)
		}
		ring.Apply(store.Changes{Keys: batch, Rev: rev})
	}
	revoke(3)
	newKey := store.Key{ID: "key_new", Hash: hashOf(-1), Team: "team-0", Rev: rev + 1}
	rev++
	ring.Apply(store.Changes{Keys: []store.Key{newKey}, Rev: rev})
	if p := ring.Resolve(ch.Keys[3].Hash); p == nil || !p.Revoked() || ring.ByID(ch.Keys[3].ID) != p {
		t.Fatalf("revoked key: %+v", p)
	}
	if p := ring.Resolve(ch.Keys[4].Hash); p == nil || p.Revoked() {
		t.Fatalf("untouched key: %+v", p)
	}
	if p := ring.ByID("key_new"); p == nil || ring.Resolve(hashOf(-1)) != p || ring.Len() != 2001 {
		t.Fatalf("new key: %+v, Len %d", p, ring.Len())
	}
	// Enough changes to rebuild the table.
	var many []int
	for i := 0; i < 1500; i++ {
		many = append(many, i)
	}
	revoke(many...)
	if ring.Len() != 2001 {
		t.Errorf("Len after rebuild = %d, want 2001", ring.Len())
	}
	for i, k := range ch.Keys {
		p := ring.Resolve(k.Hash)
		if p == nil || p.Revoked() != (i < 1500) || ring.ByID(k.ID) != p {
			t.Fatalf("key %d after rebuild: %+v", i, p)
		}
	}
	if ring.ByID("key_new") == nil {
		t.Error("new key lost by the rebuild")
	}
	// A team change reaches every key, those beside the table included.
	rev++
	ring.Apply(store.Changes{Teams: []store.Team{{Name: "team-0", Org: "other", Rev: rev}}, Rev: rev})
	for _, id := range []string{ch.Keys[0].ID, "key_new"} {
		if p := ring.ByID(id); p == nil || p.Org != "other" || !p.TeamModels.Unrestricted() || p.TeamLimits.Requests != (policies.RateLimits{}) {
			t.Errorf("%s after the team change: %+v", id, p)
		}
	}
}

// BenchmarkResolve is a lookup of a key already used (its principal made)
// and of an absent key, in a ring of 100,000.
func BenchmarkResolve(b *testing.B) {
	ring := keyring.New(testenv.Quiet())
	ch := population(100000)
	ring.Apply(ch)
	h := ch.Keys[777].Hash
	ring.Resolve(h)
	b.Run("known", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ring.Resolve(h) == nil {
				b.Fatal("not found")
			}
		}
	})
	absent := hashOf(-5)
	b.Run("absent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ring.Resolve(absent) != nil {
				b.Fatal("found")
			}
		}
	})
}

// BenchmarkMetadata is the per-request cost of the ext_authz metadata of
// a key with its own allow-list in a team with one.
func BenchmarkMetadata(b *testing.B) {
	ring := keyring.New(testenv.Quiet())
	ch := population(100)
	ring.Apply(ch)
	p := ring.Resolve(ch.Keys[10].Hash)
	b.ReportAllocs()
	for b.Loop() {
		if len(p.Metadata().Fields) != 7 {
			b.Fatal("fields")
		}
	}
}

// BenchmarkSyncStore is serve's first Sync from a SQLite key store of
// 100,000 keys shaped like population's: streamed key by key (the store
// is a store.KeyStreamer) and, for comparison, from one Changes(0) batch.
func BenchmarkSyncStore(b *testing.B) {
	const n = 100000
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "keys.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	ch := population(n)
	for _, t := range ch.Teams {
		if err := st.PutTeam(ctx, t); err != nil {
			b.Fatal(err)
		}
	}
	if err := st.CreateKeys(ctx, ch.Keys); err != nil {
		b.Fatal(err)
	}
	ch = store.Changes{}
	for _, c := range []struct {
		name string
		src  keyring.ChangeSource
	}{{"streamed", st}, {"batch", changesOnly{st}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ring := keyring.New(testenv.Quiet())
				if err := ring.Sync(ctx, c.src); err != nil || ring.Len() != n {
					b.Fatalf("Len %d, %v", ring.Len(), err)
				}
			}
		})
	}
}

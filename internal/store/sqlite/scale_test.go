package sqlite

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/policies"
)

// benchStore is a store of n keys shaped like bench/keyscale's.
func benchStore(b *testing.B, n int) *Store {
	ctx := context.Background()
	s := openTest(b, filepath.Join(b.TempDir(), "store.sqlite"))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	keys := make([]store.Key, n)
	for i := range keys {
		var buf [8]byte
		binary.LittleEndian.PutUint64(buf[:], uint64(i))
		keys[i] = store.Key{ID: "key_" + strconv.Itoa(1e9+i), Prefix: "sk-sluice-" + strconv.Itoa(1e5+i), Hash: sha256.Sum256(buf[:]),
			Team: "team-" + strconv.Itoa(i/100), Name: "key-" + strconv.Itoa(i), CreatedAt: t0}
		if i%10 == 0 {
			keys[i].Models = []string{"gpt-4o-mini"}
		}
		if i%7 == 0 {
			keys[i].Limits = policies.Limits{Requests: policies.RateLimits{PerMinute: 600}}
		}
	}
	if err := s.CreateKeys(ctx, keys); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkChangesAll reads every key of a store of 100,000 into one
// batch, as Changes(0) does.
func BenchmarkChangesAll(b *testing.B) {
	const n = 100000
	s := benchStore(b, n)
	b.ReportAllocs()
	for b.Loop() {
		ch, err := s.Changes(context.Background(), 0)
		if err != nil || len(ch.Keys) != n {
			b.Fatalf("%d keys, %v", len(ch.Keys), err)
		}
	}
}

// BenchmarkEachKey reads every key of a store of 100,000 one by one, as
// serve's first sync does, keeping none.
func BenchmarkEachKey(b *testing.B) {
	const n = 100000
	s := benchStore(b, n)
	b.ReportAllocs()
	for b.Loop() {
		got := 0
		_, err := s.EachKey(context.Background(), nil, func(store.Key) error { got++; return nil })
		if err != nil || got != n {
			b.Fatalf("%d keys, %v", got, err)
		}
	}
}

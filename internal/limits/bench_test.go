package limits

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"
)

// requestDemands is what authz asks for one request: the key's and the
// team's per-minute limits, plus an hour and a day limit when n is 4.
func requestDemands(n int, key string, limit int64) []Demand {
	all := []Demand{
		dm("key/"+key+"/requests/1m", time.Minute, limit, 1),
		dm("team/t/requests/1m", time.Minute, limit, 1),
		dm("key/"+key+"/requests/1h", time.Hour, limit, 1),
		dm("team/t/requests/1d", 24*time.Hour, limit, 1),
	}
	return all[:n]
}

func BenchmarkAdmit(b *testing.B) {
	tests := []struct {
		name  string
		n     int
		limit int64
		into  bool // reuse a Remaining slice
	}{
		{"demands=1", 1, math.MaxInt64, true},
		{"demands=4", 4, math.MaxInt64, true},
		{"demands=4/denied", 4, 1, true},
		{"demands=4/Admit", 4, math.MaxInt64, false},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			c := New(Options{})
			demands := requestDemands(tt.n, "key_abc", tt.limit)
			remaining := make([]int64, tt.n)
			now := base
			c.Admit(now, demands)
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond) // a new minute bucket every 10⁶ calls
				var d Decision
				if tt.into {
					d = c.AdmitInto(now, demands, remaining)
				} else {
					d = c.Admit(now, demands)
				}
				if d.Admitted != (tt.limit > 1) {
					b.Fatalf("Admit() = %+v", d)
				}
			}
		})
	}
}

func BenchmarkAdmitParallel(b *testing.B) {
	tests := []struct {
		name     string
		n        int
		sameKeys bool // every goroutine on one key; otherwise one key each (the team is always shared when n > 1)
	}{
		{"demands=1/same-key", 1, true},
		{"demands=1/own-key", 1, false},
		{"demands=4/same-key", 4, true},
		{"demands=4/own-key", 4, false},
	}
	for _, tt := range tests {
		b.Run(tt.name, func(b *testing.B) {
			c := New(Options{})
			var next atomic.Int64
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				key := "key_abc"
				if !tt.sameKeys {
					key = fmt.Sprintf("key_%d", next.Add(1))
				}
				demands := requestDemands(tt.n, key, math.MaxInt64)
				remaining := make([]int64, tt.n)
				now := base
				for pb.Next() {
					now = now.Add(time.Microsecond)
					if !c.AdmitInto(now, demands, remaining).Admitted {
						b.Error("denied")
						return
					}
				}
			})
		})
	}
}

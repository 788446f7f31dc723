package redis_test

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/admission/redis"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/testenv/redistest"
	"github.com/sluicegw/sluice/policies"
)

// BenchmarkAdmitSettle is what one Redis sustains: each op is a request's
// three round trips (CountRequest, Admit, Settle) for one of 1,000 keys in
// 100 teams of 10 orgs, with request and token windows, a daily and a
// rolling budget, from parallel callers on one client (as a replica's
// handlers share one). ops/s is requests admitted and settled a second;
// Redis runs on the same machine, its CPU included in the wall time, not
// in the op's.
//
//	go test -run '^$' -bench BenchmarkAdmitSettle -benchtime 5s -cpu 2,8 ./internal/admission/redis
func BenchmarkAdmitSettle(b *testing.B) {
	s := redistest.Own(b)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), PoolSize: 64})
	b.Cleanup(func() { c.Close() })
	be := redis.New(c, redis.Options{})
	if err := be.Load(b.Context()); err != nil {
		b.Fatal(err)
	}
	lim := policies.Limits{
		Requests: policies.RateLimits{PerMinute: 1 << 40},
		Tokens:   policies.TokenLimits{Total: policies.RateLimits{PerMinute: 1 << 50}},
	}
	team := policies.Limits{Budgets: []policies.Budget{{MicroUSD: 1 << 50, Period: policies.PeriodDay}, {MicroUSD: 1 << 50, Period: policies.PeriodRolling, Window: time.Hour}}}
	ps := make([]*keyring.Principal, 1000)
	for i := range ps {
		ps[i] = &keyring.Principal{KeyID: fmt.Sprintf("key_%04d", i), Team: fmt.Sprintf("team_%03d", i%100), Org: fmt.Sprintf("org_%02d", i%10),
			KeyLimits: lim, TeamLimits: team}
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := b.Context()
		for pb.Next() {
			p := ps[n.Add(1)%int64(len(ps))]
			if err := be.CountRequest(ctx, p, time.Now()); err != nil {
				b.Error(err)
				return
			}
			g, err := be.Admit(ctx, admission.Claim{Principal: p, Model: "m", InputTokens: 500, MaxOutputTokens: 500, CostPico: 1_000_000, At: time.Now()})
			if err != nil {
				b.Error(err)
				return
			}
			if err := be.TrySettle(ctx, g, admission.Actual{InputTokens: 480, OutputTokens: 120, CostPico: 600_000, At: time.Now()}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
	if st, err := s.Do("INFO", "commandstats"); err == nil {
		for _, line := range strings.Split(st, "\n") {
			if strings.HasPrefix(line, "cmdstat_evalsha") {
				b.Log(strings.TrimSpace(line))
			}
		}
	}
}

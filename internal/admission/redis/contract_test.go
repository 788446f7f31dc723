package redis_test

import (
	"context"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/admission/admissiontest"
	"github.com/sluicegw/sluice/internal/admission/redis"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/testenv/redistest"
)

// contract runs the contract suite against backends on c, each on a
// flushed database, with a spend index behind their budgets (as serve's
// Local has) and the calls' own clock.
func contract(t *testing.T, c goredis.UniversalClient, flush func(t *testing.T)) {
	admissiontest.Run(t, func(t *testing.T, cfg admissiontest.Config) admission.Backend {
		flush(t)
		idx := admission.NewSpendIndex(nil, nil)
		return redis.New(c, redis.Options{
			TimeZone:    cfg.TimeZone,
			CallerClock: true,
			Spent: func(_ context.Context, kind, id, model string, since time.Time) (money.Sum, error) {
				return idx.Spent(kind, id, model, since), nil
			},
			Record: idx.Add,
		})
	})
}

// TestContract: the suite against one Redis.
func TestContract(t *testing.T) {
	s := redistest.Own(t)
	c := goredis.NewClient(&goredis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	contract(t, c, func(t *testing.T) {
		if err := c.FlushAll(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestContractCluster: the suite against a Redis Cluster of three
// masters: every key of a call in one slot.
func TestContractCluster(t *testing.T) {
	cl := redistest.OwnCluster(t)
	c := goredis.NewClusterClient(&goredis.ClusterOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { c.Close() })
	contract(t, c, func(t *testing.T) {
		if err := c.ForEachMaster(t.Context(), func(ctx context.Context, m *goredis.Client) error {
			return m.FlushAll(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
	})
}

package redis_test

import (
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/admission/redis"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/internal/testenv/redistest"
	"github.com/sluicegw/sluice/policies"
)

// aclRules is the ACL deploy/redis.md gives Sluice's user: its keys, the
// scripting commands, and what a connection says when it opens.
const aclRules = "~sluice:v2:* +@read +@write +@scripting +@connection +time"

// TestTheDocumentedACLSuffices: a user with only the documented ACL can
// load the script, count, admit, settle and read budgets; and one
// without the key pattern cannot.
func TestTheDocumentedACLSuffices(t *testing.T) {
	s := redistest.Own(t)
	if _, err := s.Do("ACL", "SETUSER", "sluice", "on", ">pw", "~sluice:v2:*", "+@read", "+@write", "+@scripting", "+@connection", "+time"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Do("ACL", "SETUSER", "nokeys", "on", ">pw", "+@read", "+@write", "+@scripting", "+@connection", "+time"); err != nil {
		t.Fatal(err)
	}
	ctx := testctx.Deadline(t)
	p := &keyring.Principal{KeyID: "k", Team: "t", Org: "o",
		KeyLimits:  policies.Limits{Requests: policies.RateLimits{PerMinute: 10}},
		TeamLimits: policies.Limits{Budgets: []policies.Budget{{MicroUSD: 1000, Period: policies.PeriodDay}, {MicroUSD: 1000, Period: policies.PeriodRolling, Window: time.Hour}}}}
	use := func(user string) error {
		c := goredis.NewClient(&goredis.Options{Addr: s.Addr(), Username: user, Password: "pw", DB: 0})
		defer c.Close()
		b := redis.New(c, redis.Options{})
		if err := b.Load(ctx); err != nil {
			return err
		}
		if err := b.CountRequest(ctx, p, time.Now()); err != nil {
			return err
		}
		g, err := b.Admit(ctx, admission.Claim{Principal: p, CostPico: 5, At: time.Now()})
		if err != nil {
			return err
		}
		if err := b.TrySettle(ctx, g, admission.Actual{CostPico: 3, At: time.Now()}); err != nil {
			return err
		}
		if bs := b.Budgets(p, time.Now()); len(bs) != 2 {
			t.Errorf("%s: budgets %+v", user, bs)
		}
		return nil
	}
	if err := use("sluice"); err != nil {
		t.Fatalf("the documented ACL (%s): %v", aclRules, err)
	}
	if err := use("nokeys"); err == nil {
		t.Fatal("a user without the key pattern admitted: the ACL is not what limits it")
	}
}

package admission

import (
	"maps"
	"slices"
	"time"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/sat"
	"github.com/sluicegw/sluice/policies"
)

// This file is what a backend other than Local needs of the semantics
// Local implements: which limits cover a claim and what each reserves
// (Plan), how each refuses, and the Remaining and Grant it returns. A
// backend counts; this package decides what is counted and what a
// refusal says, so two backends cannot disagree on either.

// Kind is what a window or a budget counts of a claim: its index in
// Plan.Amounts.
type Kind int

// The kinds, in Plan.Amounts' order.
const (
	InputTokens  = Kind(inputTokens)
	OutputTokens = Kind(outputTokens)
	TotalTokens  = Kind(totalTokens)
	CostPico     = Kind(costPico)
)

// Window is one sliding-window limit a claim is admitted against: its
// counter's demand (limits.Demand: the key, the window, the limit, what
// this claim adds), and what it counts.
type Window struct {
	limits.Demand
	// Request: a request-rate limit (Amount 1, or 0 when ext_authz
	// counted it); otherwise Kind is what it counts (tokens or, for a
	// rolling budget, pico-dollars), reserved and settled.
	Request bool
	Kind    Kind
	r       reservation
}

// Scope is whose limit w is: key, team or org, its id, and the model
// for a per-model limit ("" otherwise).
func (w Window) Scope() (kind, id, model string) { return w.r.who.kind, w.r.who.id, w.r.who.model }

// Refusal is the refusal of a claim that w did not fit, as d (a
// limits.Decision, or what a backend computed as one) says.
func (w Window) Refusal(d limits.Decision) *apierr.Error { return denial(w.r, d) }

// Budget is one calendar or lifetime budget that covers a claim (or a
// principal, in Budgets): whose, its period kind and its amount.
type Budget struct {
	Scope, ID, Model string
	Period           string
	MicroUSD         int64
	// Window is a rolling budget's length (BudgetsOf only: Plan counts
	// rolling budgets as Windows).
	Window time.Duration
	s      scope
	b      policies.Budget
}

// Refusal is the refusal of a claim of cost (its worst case) by b, whose
// period [start, end) holds at, with left remaining.
func (b Budget) Refusal(start, end, at time.Time, left, cost money.Sum) *apierr.Error {
	l := &Local{}
	return l.budgetDenial(&b.s, b.b, &budgetState{start: start, end: end}, at, left, cost)
}

// Rolling is b as the window it is counted in (a rolling budget).
func (b Budget) Rolling() limits.Demand { return rollingDemand(&b.s, b.b, 0) }

// Plan is everything a claim reserves: its sliding windows (request and
// token windows, rolling budgets) in the order they are evaluated — the
// principal's own request limits first (Requests of them, what ext_authz
// counted: given back when the claim is refused) — its calendar and
// lifetime budgets, and what it reserves of each kind.
type Plan struct {
	Windows  []Window
	Requests int
	Budgets  []Budget
	Amounts  [4]int64
	// Cost is the claim's worst case as a sum (money.Max if saturated).
	Cost money.Sum
}

// PlanClaim is c's Plan.
func PlanClaim(c Claim) Plan {
	input, output := max(c.InputTokens, 0), max(c.MaxOutputTokens, 0)
	var p Plan
	p.Amounts = [4]int64{inputTokens: input, outputTokens: output, totalTokens: sat.Add(input, output), costPico: max(c.CostPico, 0)}
	p.Cost = claimCost(p.Amounts[costPico])
	scs := scopes(nil, c.Principal, c.Model)
	for _, r := range reservations(nil, c, scs, p.Amounts) {
		p.Windows = append(p.Windows, Window{Demand: r.demand, Request: r.req, Kind: Kind(r.kind), r: r})
	}
	p.Requests = len(principalRequests(c.Principal).demands)
	for i := range scs {
		s := &scs[i]
		for _, b := range s.l.Budgets {
			if b.Period != policies.PeriodRolling {
				p.Budgets = append(p.Budgets, Budget{Scope: s.kind, ID: s.id, Model: s.model, Period: b.Period, MicroUSD: b.MicroUSD, s: *s, b: b})
			}
		}
	}
	return p
}

// RequestWindows are p's own request-rate limits, what CountRequest
// counts (one request each).
func RequestWindows(p *keyring.Principal) []limits.Demand {
	return principalRequests(p).demands
}

// RequestRefusal is CountRequest's refusal of p by d (d.Denied indexes
// RequestWindows).
func RequestRefusal(p *keyring.Principal, d limits.Decision) *apierr.Error {
	return requestDenial(principalRequests(p), d)
}

// BudgetsOf lists every budget that covers p's requests, for any model,
// in the order Budgets reports them: rolling ones with their Window.
func BudgetsOf(p *keyring.Principal) []Budget {
	var out []Budget
	add := func(kind, id, model string, lim policies.Limits) {
		s := scope{kind: kind, id: id, l: lim, model: model}
		for _, b := range lim.Budgets {
			out = append(out, Budget{Scope: kind, ID: id, Model: model, Period: b.Period, MicroUSD: b.MicroUSD, Window: b.Window, s: s, b: b})
		}
	}
	for _, sc := range []struct {
		kind, id string
		lim      policies.Limits
	}{{"key", p.KeyID, p.KeyLimits}, {"team", p.Team, p.TeamLimits}, {"org", p.Org, p.OrgLimits}} {
		if sc.id == "" {
			continue
		}
		add(sc.kind, sc.id, "", sc.lim)
		for _, m := range slices.Sorted(maps.Keys(sc.lim.Models)) {
			add(sc.kind, sc.id, m, sc.lim.Models[m])
		}
	}
	return out
}

// PeriodOf is the calendar period of kind (policies.PeriodDay, …) that
// holds at in tz: [start, end); a lifetime period starts at the zero time
// and never ends (end zero).
func PeriodOf(kind string, at time.Time, tz *time.Location) (start, end time.Time) {
	return periodOf(kind, at, tz)
}

// AddWindow counts w, with left remaining and reset until it is whole
// again, in the response headers' figures.
func (r *Remaining) AddWindow(w Window, left int64, reset time.Duration) {
	switch {
	case w.Request:
		r.requests(w.Limit, left, reset)
	case w.Kind == CostPico:
		r.budget(w.r.budgetMicros, left/money.PicoPerMicro)
	default:
		r.tokens(w.Limit, left, reset)
	}
}

// AddBudget counts a calendar or lifetime budget of limit micro-dollars
// with leftMicros remaining after the claim.
func (r *Remaining) AddBudget(limit, leftMicros int64) { r.budget(limit, leftMicros) }

// NewGrant is the grant of c by a backend other than Local, with its own
// id (what its Settle finds the reservation by).
func NewGrant(c Claim, rem Remaining, id uint64) Grant {
	return Grant{Claim: c, Remaining: rem, id: id}
}

// ID is the id NewGrant gave g.
func (g Grant) ID() uint64 { return g.id }

package admission

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/sat"
	"github.com/sluicegw/sluice/policies"
)

// Local admits against in-process state: sliding windows (request and
// token rates, rolling budgets) in a limits.Counters, where CountRequest
// (ext_authz) and Admit (ext_proc) count a request limit in one counter,
// and calendar and lifetime budgets in its own table. One mutex makes an
// admission atomic across everything that covers the request: either every
// limit reserves, or none does.
type Local struct {
	counters *limits.Counters
	opts     LocalOptions

	mu sync.Mutex
	// budgets holds the calendar and lifetime budgets' current periods, by
	// scope and then by period kind. A state outlives its budget: it is
	// kept current by every settle of its scope (Settle), so a budget that
	// goes away and comes back in the same period finds it right.
	budgets map[budgetScope]map[string]*budgetState
	held    map[uint64]*hold // unsettled reservations, by grant id
	nextID  uint64
	expired int64
	// expiredHeld counts the holds in held that expired (not reserving).
	expiredHeld int
}

// LocalOptions configure a Local.
type LocalOptions struct {
	// TimeZone places calendar budget periods (nil: UTC).
	TimeZone *time.Location
	// Spent, when set, tells what the ledger recorded for a scope (kind
	// key, team or org; id; model, "" for all) since a time (the zero time:
	// ever). A budget period this process has not tracked yet starts from
	// it, so budgets survive a restart and a budget added mid-period starts
	// from what its scope already spent. It is called under Local's lock
	// and must not block: answer from memory.
	Spent func(kind, id, model string, since time.Time) money.Sum
	// Record, when set, is told of every settled request's cost in
	// pico-dollars, per scope (key, team, org) and model, with the time it
	// started: what Spent must answer later for a budget period that
	// begins after it.
	Record func(kind, id, model string, at time.Time, cost int64)
}

// NewLocal returns a Local counting in counters, which the caller sweeps
// (limits.Counters.Run).
func NewLocal(counters *limits.Counters, opts LocalOptions) *Local {
	if opts.TimeZone == nil {
		opts.TimeZone = time.UTC
	}
	return &Local{counters: counters, opts: opts, budgets: map[budgetScope]map[string]*budgetState{}, held: map[uint64]*hold{}}
}

// budgetScope is whose calendar and lifetime budgets a state counts: a
// key, team or org, for one model or (model "") for all.
type budgetScope struct{ kind, id, model string }

// budgetState is one period of a calendar or lifetime budget: what its
// scope spent in it (settled, whether or not the budget covered the
// request when it was admitted) and what admitted requests hold against
// it (reserved), exactly.
type budgetState struct {
	start, end      time.Time // end zero: lifetime
	spent, reserved money.Sum
}

// covers reports whether at falls in st's period.
func (st *budgetState) covers(at time.Time) bool {
	return !at.Before(st.start) && (st.end.IsZero() || at.Before(st.end))
}

// hold is what a grant reserved, to be settled or released.
type hold struct {
	at      time.Time
	tokens  []tokenHold    // token windows and rolling budgets
	budgets []*budgetState // calendar and lifetime budgets reserved against
	amount  [4]int64       // reserved, by tokenKind
	cost    money.Sum      // reserved against budgets (amount[costPico], or money.Max if saturated)
	expired bool           // released by ExpireBefore; Settle still charges
}

type tokenHold struct {
	key    string
	period time.Duration
	kind   tokenKind
}

type tokenKind uint8

const (
	inputTokens tokenKind = iota
	outputTokens
	totalTokens
	costPico // money, in pico-dollars
)

// scope is one of the key, its team and its org, with the limits that
// cover this request there: the base limits and the model's.
type scope struct {
	kind, id string
	l        policies.Limits
	model    string // set for the per-model limits
}

// scopeName names a scope without its limits: what a reservation keeps
// of it, for a refusal's message.
type scopeName struct{ kind, id, model string }

func (s scope) name() scopeName { return scopeName{s.kind, s.id, s.model} }

func scopes(out []scope, p *keyring.Principal, model string) []scope {
	out = addScope(out, "key", p.KeyID, &p.KeyLimits, model)
	out = addScope(out, "team", p.Team, &p.TeamLimits, model)
	return addScope(out, "org", p.Org, &p.OrgLimits, model)
}

// maxScopes is how many scopes a request can have: the key, its team and
// its org, each with its limits for the model.
const maxScopes = 6

// addScope appends the scope of kind and id, when there is one, and its
// limits for model, when it has some.
//
// Each scope is written in place: a scope literal appended would be a
// temporary copy on the caller's stack, and Admit's frames must stay small
// (see admitScratch); for the same reason it is not inlined.
//
//go:noinline
func addScope(out []scope, kind, id string, l *policies.Limits, model string) []scope {
	if id == "" {
		return out
	}
	out = append(out, scope{})
	s := &out[len(out)-1]
	s.kind, s.id, s.l = kind, id, *l
	if ml, ok := l.Models[model]; ok {
		out = append(out, scope{})
		s := &out[len(out)-1]
		s.kind, s.id, s.l, s.model = kind, id, ml, model
	}
	return out
}

// counterKey is the key of one of scope s's limits in limits.Counters
// (windows and rolling budgets; calendar and lifetime budgets are in
// Local's own table, by budgetScope and period). It is "<kind>/<id>", then
// "/model/<model>" for a per-model limit, then the limit's parts joined by
// "/": "key/key_a/requests/1m", "team/t/model/gpt-4o/tokens/input/1h",
// "org/o/budget/rolling/1h0m0s". Every key of a scope is built here, the
// principal's own request limits' too (principalRequests).
func counterKey(s *scope, parts ...string) string {
	n := len(s.kind) + 1 + len(s.id)
	if s.model != "" {
		n += len("/model/") + len(s.model)
	}
	for _, p := range parts {
		n += 1 + len(p)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(s.kind)
	b.WriteByte('/')
	b.WriteString(s.id)
	if s.model != "" {
		b.WriteString("/model/")
		b.WriteString(s.model)
	}
	for _, p := range parts {
		b.WriteByte('/')
		b.WriteString(p)
	}
	return b.String()
}

func (s scope) describe() string { return s.name().describe() }

func (s scopeName) describe() string {
	d := s.kind + " " + s.id
	if s.model != "" {
		d += " for model " + s.model
	}
	return d
}

var windows = []struct {
	name   string
	period time.Duration
	get    func(policies.RateLimits) int64
}{
	{"1m", time.Minute, func(l policies.RateLimits) int64 { return l.PerMinute }},
	{"1h", time.Hour, func(l policies.RateLimits) int64 { return l.PerHour }},
	{"1d", 24 * time.Hour, func(l policies.RateLimits) int64 { return l.PerDay }},
}

// tokenLimits are a scope's token-rate limits, by what they count.
var tokenLimits = []struct {
	kind tokenKind
	name string
	get  func(policies.TokenLimits) policies.RateLimits
}{
	{inputTokens, "input", func(t policies.TokenLimits) policies.RateLimits { return t.Input }},
	{outputTokens, "output", func(t policies.TokenLimits) policies.RateLimits { return t.Output }},
	{totalTokens, "total", func(t policies.TokenLimits) policies.RateLimits { return t.Total }},
}

// reservation is one sliding-window limit a claim is admitted against:
// the counter demand and what it stands for.
type reservation struct {
	demand limits.Demand
	who    scopeName // whose limit it is
	what   string    // "requests", "input tokens", …, "rolling 1h0m0s budget"
	kind   tokenKind // what the demand's Amount counts (token and budget limits)
	req    bool      // a request-rate limit
	// budgetMicros is a rolling budget's configured cap, in micro-dollars
	// (its demand counts pico-dollars).
	budgetMicros int64
}

// requests are a principal's own request-rate limits — its key's, then
// its team's, per minute, hour and day — as counter demands of one
// request each, beside whose limit each is.
type requests struct {
	demands []limits.Demand
	who     []scopeName
}

// principalRequests returns p's requests, made on first use and kept with
// p (keyring.Principal.SetDerived): ext_authz counts them on every request,
// and their counter keys are the same strings every time.
func principalRequests(p *keyring.Principal) *requests {
	if r, ok := p.Derived().(*requests); ok {
		return r
	}
	return makeRequests(p)
}

// makeRequests is principalRequests' first use of p. It runs on the
// request path within the first goroutine stack (extproc's
// TestHandlingFitsTheFirstStack), so it copies no policies.Limits.
//
//go:noinline
func makeRequests(p *keyring.Principal) *requests {
	r := &requests{}
	r.add("key", p.KeyID, p.KeyLimits.Requests)
	r.add("team", p.Team, p.TeamLimits.Requests)
	p.SetDerived(r)
	return r
}

// add appends the request windows of one scope, keyed as counterKey keys
// the scope's ("requests", window).
func (r *requests) add(kind, id string, rl policies.RateLimits) {
	if id == "" {
		return
	}
	for _, w := range windows {
		if n := w.get(rl); n > 0 {
			r.demands = append(r.demands, limits.Demand{Key: kind + "/" + id + "/requests/" + w.name, Period: w.period, Limit: n, Amount: 1})
			r.who = append(r.who, scopeName{kind: kind, id: id})
		}
	}
}

// CountRequest counts one request of p against the request-rate windows
// of its key and its team, in every one of them or in none: ext_authz's
// admission, before the body is read. Its counters are the ones Admit
// checks (and counts in when ext_authz did not): one limit, one counter.
func (l *Local) CountRequest(_ context.Context, p *keyring.Principal, at time.Time) error {
	pr := principalRequests(p)
	if len(pr.demands) == 0 {
		return nil
	}
	var buf [8]int64
	res := l.counters.AdmitInto(at, pr.demands, buf[:0])
	if res.Admitted {
		return nil
	}
	return requestDenial(pr, res)
}

// requestDenial is CountRequest's refusal by the window res names.
func requestDenial(pr *requests, res limits.Decision) *apierr.Error {
	denied := pr.demands[res.Denied]
	e := &apierr.Error{Status: http.StatusTooManyRequests, Code: apierr.CodeRateLimited, RetryAfter: res.RetryAfter}
	// The seconds the retry-after header says (at least 1).
	ra := max(e.RetryAfterSeconds(), 1)
	who, period := pr.who[res.Denied].describe(), limits.PeriodName(denied.Period)
	e.Message = fmt.Sprintf("rate limit reached: %s allows %d requests per %s; retry in %ds",
		who, denied.Limit, period, ra)
	// OpenAI's words for a full request window ("Rate limit reached for
	// gpt-4o in organization org-… on requests per min (RPM): Limit 3,
	// Used 3, Requested 1. Please try again in 20s."), naming Sluice's
	// limit where OpenAI names its model and organization.
	// A request is refused only by a full window, so it has used its limit
	// (what it holds past a limit lowered since is not told).
	e.OpenAIMessage = fmt.Sprintf("Rate limit reached for %s on requests per %s: Limit %d, Used %d, Requested 1. Please try again in %s.",
		who, openAIPeriod(period), denied.Limit, denied.Limit,
		llmapi.OpenAIDuration(time.Duration(ra)*time.Second))
	return e
}

// openAIPeriod is a request window as OpenAI's rate-limit messages name
// it: "min (RPM)", "day (RPD)"; and, for the hour OpenAI has no limit
// per, "hour (RPH)".
func openAIPeriod(name string) string {
	switch name {
	case "minute":
		return "min (RPM)"
	case "hour":
		return "hour (RPH)"
	case "day":
		return "day (RPD)"
	}
	return name
}

// reservations lists every sliding window that covers claim c with the
// amounts it reserves, appended to rs: the principal's request limits
// (counted only when c.CountRequest; otherwise ext_authz counted them and
// they are checked with amount 0, for the remaining headers), then per
// scope its request limits that ext_authz cannot count (an org's, and
// per-model ones), its token windows and its rolling budgets.
//
// Like addScope, it writes each reservation in place (add), not as a
// literal copied onto the stack.
func reservations(rs []reservation, c Claim, scs []scope, amount [4]int64) []reservation {
	add := func(d limits.Demand, who scopeName, what string, kind tokenKind, req bool, budgetMicros int64) {
		rs = append(rs, reservation{})
		r := &rs[len(rs)-1]
		r.demand, r.who, r.what, r.kind, r.req, r.budgetMicros = d, who, what, kind, req, budgetMicros
	}
	pr := principalRequests(c.Principal)
	for i, d := range pr.demands {
		if !c.CountRequest {
			d.Amount = 0
		}
		add(d, pr.who[i], "requests", 0, true, 0)
	}
	for i := range scs {
		s := &scs[i]
		for _, w := range windows {
			// Request limits of orgs and per-model ones: ext_authz knows
			// neither the org's limits nor the model, so they are counted
			// here.
			if n := w.get(s.l.Requests); n > 0 && (s.kind == "org" || s.model != "") {
				add(limits.Demand{Key: counterKey(s, "requests", w.name), Period: w.period, Limit: n, Amount: 1},
					s.name(), "requests", 0, true, 0)
			}
			for _, t := range tokenLimits {
				if n := w.get(t.get(s.l.Tokens)); n > 0 {
					add(limits.Demand{Key: counterKey(s, "tokens", t.name, w.name), Period: w.period, Limit: n, Amount: amount[t.kind]},
						s.name(), t.name+" tokens", t.kind, false, 0)
				}
			}
		}
		for _, b := range s.l.Budgets {
			if b.Period == policies.PeriodRolling {
				add(rollingDemand(s, b, amount[costPico]), s.name(), "rolling "+b.Window.String()+" budget", costPico, false, b.MicroUSD)
			}
		}
	}
	return rs
}

// rollingDemand is rolling budget b of scope s as a limits.Demand, in
// pico-dollars: its window sums the exact costs. A window holds an int64,
// so the limit is the budget × 10⁶ capped one below math.MaxInt64 (a
// rolling budget above $9,223,372.036854 per window counts as that much),
// and a saturated cost, math.MaxInt64, never fits at all.
func rollingDemand(s *scope, b policies.Budget, amount int64) limits.Demand {
	limit := min(sat.Mul(b.MicroUSD, money.PicoPerMicro), sat.Max-1)
	return limits.Demand{Key: counterKey(s, "budget", "rolling", b.Window.String()), Period: b.Window, Limit: limit, Amount: amount}
}

// claimCost is a claim's worst-case cost as a sum to compare with what a
// budget has left: exact, except that a saturated cost (math.MaxInt64, a
// worst case too large for an int64 of pico-dollars) is money.Max, more
// than any budget.
func claimCost(pico int64) money.Sum {
	if pico >= sat.Max {
		return money.Max
	}
	return money.FromPico(pico)
}

// Admit reserves, atomically, what c may use against every limit that
// covers it, or returns an *apierr.Error (429: rate_limited,
// tokens_rate_limited or insufficient_quota, with RetryAfter when a retry
// can succeed) and reserves nothing.
func (l *Local) Admit(_ context.Context, c Claim) (Grant, error) {
	if c.Principal == nil {
		return Grant{}, fmt.Errorf("admission: claim without a principal")
	}
	// Amounts saturate (internal/sat): a claim too large for an int64 is
	// math.MaxInt64, more than any limit allows at all.
	input, output := max(c.InputTokens, 0), max(c.MaxOutputTokens, 0)
	amount := [4]int64{inputTokens: input, outputTokens: output, totalTokens: sat.Add(input, output), costPico: max(c.CostPico, 0)}
	cost := claimCost(amount[costPico])

	sc := admitScratchPool.Get().(*admitScratch)
	defer sc.put()
	scs := scopes(sc.scopes[:0], c.Principal, c.Model)
	rs := reservations(sc.rs[:0], c, scs, amount)
	// limits.Counters takes the demands alone, in the same order.
	ds := sc.ds[:0]
	for _, r := range rs {
		ds = append(ds, r.demand)
	}
	sc.n = max(len(scs), len(rs))

	l.mu.Lock()
	defer l.mu.Unlock()

	// Calendar and lifetime budgets first: they are only read until
	// everything is known to fit.
	var bh []*budgetState
	var rem Remaining
	for i := range scs {
		s := &scs[i]
		for _, b := range s.l.Budgets {
			if b.Period == policies.PeriodRolling {
				continue
			}
			st := l.budget(s, b, c.At)
			// Exact: the budget's micro-dollars against the pico-dollars
			// spent and reserved.
			left := money.FromMicros(b.MicroUSD).Sub(st.spent).Sub(st.reserved)
			// A request that costs nothing (an unpriced model) is
			// invisible to budgets, as it is to a rolling one.
			if !cost.IsZero() && (left.IsZero() || cost.Cmp(left) > 0) {
				l.uncount(c)
				return Grant{}, l.budgetDenial(s, b, st, c.At, left, cost)
			}
			rem.budget(b.MicroUSD, left.Sub(cost).MicrosDown())
			bh = append(bh, st)
		}
	}
	dec := l.counters.AdmitWithResets(c.At, ds, sc.remaining[:0], sc.resets[:0])
	if !dec.Admitted {
		l.uncount(c)
		return Grant{}, denial(rs[dec.Denied], dec)
	}
	for _, st := range bh {
		st.reserved = st.reserved.Add(cost)
	}
	h := &hold{at: c.At, budgets: bh, amount: amount, cost: cost}
	for i, r := range rs {
		d, left, reset := r.demand, dec.Remaining[i], dec.Resets[i]
		switch {
		case r.req:
			rem.requests(d.Limit, left, reset)
		case r.kind == costPico:
			h.tokens = append(h.tokens, tokenHold{key: d.Key, period: d.Period, kind: costPico})
			rem.budget(r.budgetMicros, left/money.PicoPerMicro)
		default:
			h.tokens = append(h.tokens, tokenHold{key: d.Key, period: d.Period, kind: r.kind})
			rem.tokens(d.Limit, left, reset)
		}
	}
	l.nextID++
	id := l.nextID
	l.held[id] = h
	return Grant{Claim: c, id: id, Remaining: rem}, nil
}

// admitScratch is the working space of one Admit: a request's scopes,
// reservations and demands, and the counters' answers. It is pooled
// rather than on Admit's stack, where it would take some 5 KB and make
// every goroutine that admits a request, each gRPC handler among them,
// grow its stack to 16 KB; most requests fit in it, and one that does
// not spills to the heap.
type admitScratch struct {
	scopes    [maxScopes]scope
	rs        [16]reservation
	ds        [16]limits.Demand
	remaining [16]int64
	resets    [16]time.Duration
	n         int // entries of scopes, rs and ds the last Admit used
}

var admitScratchPool = sync.Pool{New: func() any { return new(admitScratch) }}

// put clears what the last Admit left (so that the pool keeps no keys or
// limits alive) and returns sc to the pool.
func (sc *admitScratch) put() {
	n := min(sc.n, len(sc.rs))
	clear(sc.scopes[:min(sc.n, len(sc.scopes))])
	clear(sc.rs[:n])
	clear(sc.ds[:n])
	sc.n = 0
	admitScratchPool.Put(sc)
}

// uncount takes back the request ext_authz counted for a request that
// admission refuses: a refused request is counted nowhere.
func (l *Local) uncount(c Claim) {
	if c.CountRequest {
		return // counted here, and Admit counts nothing it refuses
	}
	for _, d := range principalRequests(c.Principal).demands {
		l.counters.Adjust(c.At, c.At, d.Key, d.Period, -1)
	}
}

// budget returns the state of budget b of scope s for the period that
// holds at, starting a new period when the last one has ended.
func (l *Local) budget(s *scope, b policies.Budget, at time.Time) *budgetState {
	bs := budgetScope{s.kind, s.id, s.model}
	periods := l.budgets[bs]
	st := periods[b.Period]
	// A time before the current period (concurrent requests near a
	// boundary carry slightly out-of-order clocks) counts in the current
	// period: going back would throw the current period's state away.
	if st != nil && (st.end.IsZero() || at.Before(st.end)) {
		return st
	}
	start, end := periodOf(b.Period, at, l.opts.TimeZone)
	if st != nil && st.start.Equal(start) {
		return st
	}
	st = &budgetState{start: start, end: end}
	if l.opts.Spent != nil {
		// A period this process has not seen yet: what the ledger holds
		// for it (after a restart, the spend before it; for a budget added
		// mid-period, what its scope spent without it).
		st.spent = l.opts.Spent(s.kind, s.id, s.model, start)
	}
	if periods == nil {
		periods = map[string]*budgetState{}
		l.budgets[bs] = periods
	}
	periods[b.Period] = st
	return st
}

// spend counts cost, settled by the request held by h that started at,
// in every current budget period of scope bs: those h reserved against,
// and those that exist without having covered the request (a budget
// removed since, or added while the request was in flight, or covering
// it no more) whose period holds at. So a budget's state is always what
// its scope spent, whether the budget was there or not, and a budget that
// comes back in the same period starts from all of it.
func (l *Local) spend(bs budgetScope, h *hold, at time.Time, cost money.Sum) {
	for _, st := range l.budgets[bs] {
		if st.covers(at) || slices.Contains(h.budgets, st) {
			st.spent = st.spent.Add(cost)
		}
	}
}

// periodOf returns the calendar period of kind that holds at, in tz: [start,
// end); a lifetime period starts at the zero time and never ends.
func periodOf(kind string, at time.Time, tz *time.Location) (start, end time.Time) {
	t := at.In(tz)
	y, m, d := t.Date()
	switch kind {
	case policies.PeriodDay:
		start = time.Date(y, m, d, 0, 0, 0, 0, tz)
		end = start.AddDate(0, 0, 1)
	case policies.PeriodWeek:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		start = time.Date(y, m, d-back, 0, 0, 0, 0, tz)
		end = start.AddDate(0, 0, 7)
	case policies.PeriodMonth:
		start = time.Date(y, m, 1, 0, 0, 0, 0, tz)
		end = start.AddDate(0, 1, 0)
	}
	return start, end
}

// Settle replaces g's reservation by what the request used: token windows
// and rolling budgets are corrected in the bucket the reservation went to
// (a use above it is counted now), calendar budgets move the reserved
// amount to spent — in the period the request started in. The cost is
// spent in every calendar and lifetime budget state of the request's
// scopes, also those that did not cover it at admission (see spend).
// Settling a grant twice does nothing.
func (l *Local) Settle(_ context.Context, g Grant, a Actual) {
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.held[g.id]
	if !ok {
		return
	}
	delete(l.held, g.id)
	if h.expired {
		l.expiredHeld--
	}
	now := a.At
	if now.IsZero() {
		now = g.Claim.At
	}
	in, out := max(a.InputTokens, 0), max(a.OutputTokens, 0)
	used := [4]int64{inputTokens: in, outputTokens: out, totalTokens: sat.Add(in, out), costPico: max(a.CostPico, 0)}
	for _, t := range h.tokens {
		l.counters.Adjust(h.at, now, t.key, t.period, used[t.kind]-h.amount[t.kind])
	}
	for _, st := range h.budgets {
		st.reserved = st.reserved.Sub(h.cost)
	}
	if used[costPico] == 0 {
		return
	}
	cost := money.FromPico(used[costPico])
	// A calendar budget is charged in the period the request started in,
	// the one that admitted it — as the ledger's aggregates count it
	// (ledger.Aggregate), so a restart rebuilds the same numbers — and so
	// is the spend index, for every scope, covered by a budget or not.
	p, c := g.Claim.Principal, g.Claim
	for _, s := range [...][2]string{{"key", p.KeyID}, {"team", p.Team}, {"org", p.Org}} {
		if s[1] == "" {
			continue
		}
		l.spend(budgetScope{s[0], s[1], ""}, h, c.At, cost)
		if c.Model != "" {
			l.spend(budgetScope{s[0], s[1], c.Model}, h, c.At, cost)
		}
		if rec := l.opts.Record; rec != nil {
			rec(s[0], s[1], c.Model, c.At, used[costPico])
		}
	}
}

// ForgetBudgets drops the calendar and lifetime budgets' periods this
// Local tracks, so that each starts again from Spent at its next use: a
// Failover's fallback does so when the shared backend answers again,
// whose settles its own states never saw. Reservations held keep
// nothing of them.
func (l *Local) ForgetBudgets() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.budgets)
	for _, h := range l.held {
		h.budgets = nil
	}
}

// ExpireBefore releases every reservation made before cutoff and not yet
// settled — requests whose end Sluice has not seen — and returns how many
// it released. A request that does end later is still charged its whole
// use when it settles; one that never ends is forgotten a day later.
func (l *Local) ExpireBefore(now, cutoff time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for id, h := range l.held {
		if !h.at.Before(cutoff) {
			continue
		}
		// The reservation is released, but the hold stays (with nothing
		// reserved) so that the request, if it ends after all, is charged
		// its whole use by Settle. Holds expired twice over are dropped.
		if h.expired {
			if h.at.Before(cutoff.Add(-24 * time.Hour)) {
				delete(l.held, id)
			}
			continue
		}
		for _, t := range h.tokens {
			l.counters.Adjust(h.at, now, t.key, t.period, -h.amount[t.kind])
		}
		for _, st := range h.budgets {
			st.reserved = st.reserved.Sub(h.cost)
		}
		h.amount, h.cost, h.expired = [4]int64{}, money.Sum{}, true
		l.expiredHeld++
		n++
	}
	l.expired += int64(n)
	return n
}

// Run releases reservations older than ttl once a minute until ctx ends.
func (l *Local) Run(ctx context.Context, ttl time.Duration, now func() time.Time) error {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			n := now()
			l.ExpireBefore(n, n.Add(-ttl))
		}
	}
}

// Expired reports how many reservations ExpireBefore has released.
func (l *Local) Expired() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expired
}

// Held reports the number of unsettled reservations.
func (l *Local) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.held) - l.expiredHeld
}

// Remaining is what is left after an admission, for the x-ratelimit-*
// response headers: per kind the tightest covering limit — the one with
// the least left, of two with as much left the one that resets later —
// its size, what it has left, and (requests and tokens, sliding windows)
// how long until it resets, when everything its window counts has left it
// and its whole limit is free again.
type Remaining struct {
	RequestsLimit, Requests int64
	RequestsReset           time.Duration
	// Tokens is the tightest token window of any kind — input, output or
	// total tokens: a request whose input and output together fit in
	// Tokens fits every token window that covers it.
	TokensLimit, Tokens int64
	TokensReset         time.Duration
	BudgetLimit, Budget int64
	set                 uint8
}

func (r *Remaining) requests(limit, left int64, reset time.Duration) {
	if r.set&1 == 0 || left < r.Requests || (left == r.Requests && reset > r.RequestsReset) {
		r.RequestsLimit, r.Requests, r.RequestsReset = limit, left, reset
	}
	r.set |= 1
}

func (r *Remaining) tokens(limit, left int64, reset time.Duration) {
	if r.set&2 == 0 || left < r.Tokens || (left == r.Tokens && reset > r.TokensReset) {
		r.TokensLimit, r.Tokens, r.TokensReset = limit, left, reset
	}
	r.set |= 2
}

func (r *Remaining) budget(limit, left int64) {
	if r.set&4 == 0 || left < r.Budget {
		r.BudgetLimit, r.Budget = limit, left
	}
	r.set |= 4
}

// Headers lists the rate-limit response headers for the kinds of limit
// that covered the request, each kind a complete set in OpenAI's format
// (docs/limits.md): x-ratelimit-limit-, -remaining- and -reset-requests,
// the same for -tokens, the resets in OpenAI's duration notation
// (llmapi.OpenAIDuration: "6m0s", "20ms"); and Sluice's own budget pair,
// x-ratelimit-limit- and -remaining-budget-micro-usd.
func (r Remaining) Headers() []Header {
	if r.set == 0 {
		return nil
	}
	h := headers{out: make([]Header, 0, 8), buf: make([]byte, 0, 96)}
	if r.set&1 != 0 {
		h.int("x-ratelimit-limit-requests", r.RequestsLimit)
		h.int("x-ratelimit-remaining-requests", max(r.Requests, 0))
		h.str("x-ratelimit-reset-requests", llmapi.OpenAIDuration(r.RequestsReset))
	}
	if r.set&2 != 0 {
		h.int("x-ratelimit-limit-tokens", r.TokensLimit)
		h.int("x-ratelimit-remaining-tokens", max(r.Tokens, 0))
		h.str("x-ratelimit-reset-tokens", llmapi.OpenAIDuration(r.TokensReset))
	}
	if r.set&4 != 0 {
		h.int("x-ratelimit-limit-budget-micro-usd", r.BudgetLimit)
		h.int("x-ratelimit-remaining-budget-micro-usd", max(r.Budget, 0))
	}
	return h.out
}

// Header is one response header. Headers' values share one buffer; a
// value must not be changed in place.
type Header struct {
	Name  string
	Value []byte
}

func (h Header) String() string { return h.Name + ": " + string(h.Value) }

// headers builds Headers' list, the values appended to one buffer (a
// value keeps the buffer it was written to when a later one outgrows it).
type headers struct {
	out []Header
	buf []byte
}

func (h *headers) int(name string, v int64) {
	start := len(h.buf)
	h.buf = strconv.AppendInt(h.buf, v, 10)
	h.out = append(h.out, Header{name, h.buf[start:len(h.buf):len(h.buf)]})
}

func (h *headers) str(name, v string) {
	start := len(h.buf)
	h.buf = append(h.buf, v...)
	h.out = append(h.out, Header{name, h.buf[start:len(h.buf):len(h.buf)]})
}

// denial is the refusal of a claim by reservation r, which did not fit.
func denial(r reservation, dec limits.Decision) *apierr.Error {
	d := r.demand
	e := &apierr.Error{Status: http.StatusTooManyRequests, RetryAfter: dec.RetryAfter}
	ra := e.RetryAfterSeconds()
	who := r.who.describe()
	switch {
	case r.req:
		e.Code = apierr.CodeRateLimited
		e.Message = fmt.Sprintf("rate limit reached: %s allows %d requests per %s; retry in %ds", who, d.Limit, limits.PeriodName(d.Period), ra)
	case r.kind == costPico && dec.Impossible:
		e.Code, e.RetryAfter = apierr.CodeInsufficientQuota, 0
		e.Message = fmt.Sprintf("budget exceeded: this request may cost up to %s, more than the %s budget of %s (%s) allows at all; lower max_tokens",
			usdUp(claimCost(d.Amount)), r.what, who, usdUp(money.FromMicros(r.budgetMicros)))
	case r.kind == costPico:
		e.Code = apierr.CodeInsufficientQuota
		e.Message = fmt.Sprintf("budget exceeded: the %s budget of %s (%s) has no room for this request (up to %s); retry in %ds",
			r.what, who, usdUp(money.FromMicros(r.budgetMicros)), usdUp(claimCost(d.Amount)), ra)
	case dec.Impossible:
		e.Code, e.RetryAfter = apierr.CodeTokensRateLimited, 0
		e.Message = fmt.Sprintf("token limit: this request may use up to %d %s, more than %s allows per %s (%d) at all; lower max_tokens or shorten the prompt", d.Amount, r.what, who, limits.PeriodName(d.Period), d.Limit)
	default:
		e.Code = apierr.CodeTokensRateLimited
		e.Message = fmt.Sprintf("token limit reached: %s allows %d %s per %s and this request may use up to %d; retry in %ds", who, d.Limit, r.what, limits.PeriodName(d.Period), d.Amount, ra)
	}
	return e
}

func (l *Local) budgetDenial(s *scope, b policies.Budget, st *budgetState, at time.Time, left, cost money.Sum) *apierr.Error {
	what := map[string]string{policies.PeriodDay: "daily", policies.PeriodWeek: "weekly", policies.PeriodMonth: "monthly", policies.PeriodLifetime: "lifetime"}[b.Period]
	budget := money.FromMicros(b.MicroUSD)
	if cost.Cmp(budget) > 0 {
		// No period will ever have room: no retry-after (a saturated
		// worst case, math.MaxInt64, always lands here).
		return &apierr.Error{Status: http.StatusTooManyRequests, Code: apierr.CodeInsufficientQuota,
			Message: fmt.Sprintf("budget exceeded: this request may cost up to %s, more than the %s budget of %s (%s) allows at all; lower max_tokens",
				usdUp(cost), what, s.describe(), usdUp(budget))}
	}
	if b.Period == policies.PeriodLifetime {
		return &apierr.Error{Status: http.StatusTooManyRequests, Code: apierr.CodeInsufficientQuota,
			Message: fmt.Sprintf("budget exhausted: the lifetime budget of %s (%s) has %s left, not enough for this request", s.describe(), usdUp(budget), usdDown(left))}
	}
	ra := st.end.Sub(at)
	return &apierr.Error{Status: http.StatusTooManyRequests, Code: apierr.CodeInsufficientQuota, RetryAfter: ra,
		Message: fmt.Sprintf("budget exceeded: the %s budget of %s (%s) has %s left, not enough for this request; it resets at %s",
			what, s.describe(), usdUp(budget), usdDown(left), st.end.Format(time.RFC3339))}
}

// usdUp formats an amount as dollars to the micro-dollar, rounded up (what
// a request may cost); usdDown rounds down (what a budget has left).
func usdUp(s money.Sum) string { return usd(s.MicrosUp()) }

func usdDown(s money.Sum) string { return usd(s.MicrosDown()) }

func usd(micros int64) string {
	return fmt.Sprintf("$%d.%06d", micros/1_000_000, micros%1_000_000)
}

// BudgetStatus is one budget that covers a principal, as it stands.
type BudgetStatus struct {
	Scope, ID string // key, team or org, and its name or id
	Model     string // "" for the scope's own budgets
	Period    string
	Window    time.Duration // rolling budgets
	// Limit is the budget, in micro-dollars as configured; Spent (settled
	// in the current period; for a rolling budget, spent and reserved
	// together), Reserved (held by requests in flight) and Remaining are
	// exact.
	Limit                      int64
	Spent, Reserved, Remaining money.Sum
	Resets                     time.Time // zero: lifetime or rolling
}

// Budgets reports every budget that covers p's requests (for any model)
// at time at, without reserving anything.
func (l *Local) Budgets(p *keyring.Principal, at time.Time) []BudgetStatus {
	var out []BudgetStatus
	var scs []scope
	add := func(kind, id string, lim policies.Limits) {
		if id == "" {
			return
		}
		scs = append(scs, scope{kind: kind, id: id, l: lim})
		for _, m := range slices.Sorted(maps.Keys(lim.Models)) {
			scs = append(scs, scope{kind: kind, id: id, l: lim.Models[m], model: m})
		}
	}
	add("key", p.KeyID, p.KeyLimits)
	add("team", p.Team, p.TeamLimits)
	add("org", p.Org, p.OrgLimits)
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range scs {
		s := &scs[i]
		for _, b := range s.l.Budgets {
			bs := BudgetStatus{Scope: s.kind, ID: s.id, Model: s.model, Period: b.Period, Window: b.Window, Limit: b.MicroUSD}
			if b.Period == policies.PeriodRolling {
				d := rollingDemand(s, b, 0)
				left := l.counters.Admit(at, []limits.Demand{d}).Remaining[0] // pico-dollars, below 0 if over
				bs.Remaining = money.FromPico(left)
				bs.Spent = money.FromPico(sat.Sub(d.Limit, left))
				if left < 0 {
					bs.Spent = money.FromPico(d.Limit).Add(money.FromPico(-max(left, -sat.Max)))
				}
			} else {
				st := l.budget(s, b, at)
				bs.Spent, bs.Reserved = st.spent, st.reserved
				bs.Remaining = money.FromMicros(b.MicroUSD).Sub(st.spent).Sub(st.reserved)
				bs.Resets = st.end
			}
			out = append(out, bs)
		}
	}
	return out
}

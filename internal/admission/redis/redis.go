package redis

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/policies"
)

//go:embed admit.lua
var scriptSource string

// script is admit.lua, run by EVALSHA (go-redis loads it by EVAL when
// the server answers NOSCRIPT).
var script = goredis.NewScript(scriptSource)

// Prefix starts every key the backend writes. Its version changes with
// the keys' layout, so replicas of two layouts run side by side in a
// rollout, each on its own keys.
const Prefix = "sluice:v2:"

// DefaultReservationTTL is how long a reservation is held before it is
// released when Options.ReservationTTL is 0.
const DefaultReservationTTL = 15 * time.Minute

// buckets is the number of buckets of every window: limits.DefaultBuckets,
// as the script's B.
const buckets = limits.DefaultBuckets

// Options configure a Backend.
type Options struct {
	// TimeZone places calendar budget periods (nil: UTC).
	TimeZone *time.Location
	// CallerClock counts at the times the calls carry (Claim.At, …), as
	// the contract suite needs; by default the scripts read the server's
	// clock, one clock for the fleet.
	CallerClock bool
	// ReservationTTL is how long a reservation is held unsettled before
	// it is released (a replica that died, a stream lost); 0 means
	// DefaultReservationTTL.
	ReservationTTL time.Duration
	// Spent tells what the ledger recorded for a scope (kind key, team or
	// org; id; model, "" for all) since a time: where a budget period
	// Redis lacks starts from.
	Spent func(ctx context.Context, kind, id, model string, since time.Time) (money.Sum, error)
	// SpentBuckets tells what the ledger recorded for a scope per bucket
	// since a time: where a rolling budget's window Redis lacks starts
	// from. Nil: such a window starts empty.
	SpentBuckets func(ctx context.Context, kind, id, model string, since time.Time) ([]SpentBucket, error)
	// Record, when set, is told of every settled request's cost, as
	// admission.LocalOptions.Record.
	Record func(kind, id, model string, at time.Time, cost int64)
	// Logger is told what Settle cannot return (an error). Nil: discarded.
	Logger *slog.Logger
	// Timeout bounds each round trip to Redis (admission.redis.timeout);
	// 0: the caller's context alone. A budget period's start read from the
	// ledger is not bounded by it.
	Timeout time.Duration
	// Observe, when set, is told of every call to Redis: its phase
	// (count, admit, settle, budgets, reconcile, ping), how long the round
	// trip took, and its error.
	Observe func(phase string, d time.Duration, err error)
}

// Backend is an admission.Backend counting in Redis, shared by every
// replica that uses the same Redis.
type Backend struct {
	c       goredis.UniversalClient
	opts    Options
	replica string // makes hold ids unique across replicas
	next    atomic.Uint64
	ttl     atomic.Int64
}

var _ admission.Shared = (*Backend)(nil)

// New returns a Backend on c, a client of one Redis or of a cluster.
func New(c goredis.UniversalClient, opts Options) *Backend {
	if opts.TimeZone == nil {
		opts.TimeZone = time.UTC
	}
	if opts.ReservationTTL <= 0 {
		opts.ReservationTTL = DefaultReservationTTL
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var id [8]byte
	rand.Read(id[:])
	b := &Backend{c: c, opts: opts, replica: hex.EncodeToString(id[:])}
	b.ttl.Store(int64(opts.ReservationTTL))
	return b
}

// Load loads the script on every server (every master of a cluster), so
// that the first call of each is one round trip.
func (b *Backend) Load(ctx context.Context) error {
	if cc, ok := b.c.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, c *goredis.Client) error {
			return script.Load(ctx, c).Err()
		})
	}
	return script.Load(ctx, b.c).Err()
}

// tag is the hash tag every key of p's calls carries: one slot per org
// (per team, or per key, where there is none).
func tag(p *keyring.Principal) string {
	owner := "o:" + p.Org
	switch {
	case p.Org != "":
	case p.Team != "":
		owner = "t:" + p.Team
	default:
		owner = "k:" + p.KeyID
	}
	h := fnv.New64a()
	h.Write([]byte(owner))
	return Prefix + "{" + strconv.FormatUint(h.Sum64(), 16) + "}:"
}

// width is the bucket width of a window of period, in whole seconds.
func width(period time.Duration) (int64, error) {
	w := period / buckets
	if period <= 0 || period%buckets != 0 || w%time.Second != 0 {
		return 0, fmt.Errorf("admission/redis: a window of %v does not divide into %d buckets of whole seconds", period, buckets)
	}
	return int64(w / time.Second), nil
}

// clockArgs are the script's clock arguments for at.
func (b *Backend) clockArgs(at time.Time) []any {
	if b.opts.CallerClock {
		return []any{"c", at.Unix(), at.Nanosecond()}
	}
	return []any{"s", "", ""}
}

func windowArgs(args []any, d limits.Demand, kind string) ([]any, error) {
	ws, err := width(d.Period)
	if err != nil {
		return nil, err
	}
	return append(args, ws, d.Limit, d.Amount, kind), nil
}

// run runs the script and returns its reply's strings and the server's
// time it counted at.
func (b *Backend) run(ctx context.Context, phase string, keys []string, args []any) ([]string, time.Time, error) {
	if b.opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, b.opts.Timeout)
		defer cancel()
	}
	start := time.Now()
	v, err := script.Run(ctx, b.c, keys, args...).StringSlice()
	if b.opts.Observe != nil {
		b.opts.Observe(phase, time.Since(start), err)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("admission/redis: %w", err)
	}
	if len(v) < 3 {
		return nil, time.Time{}, fmt.Errorf("admission/redis: a reply of %d values", len(v))
	}
	s, err1 := strconv.ParseInt(v[1], 10, 64)
	n, err2 := strconv.ParseInt(v[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return nil, time.Time{}, fmt.Errorf("admission/redis: the script's time: %w", err)
	}
	return v, time.Unix(s, n), nil
}

// CountRequest counts one request of p against its key's and team's
// request windows, in one round trip.
func (b *Backend) CountRequest(ctx context.Context, p *keyring.Principal, at time.Time) error {
	ds := admission.RequestWindows(p)
	if len(ds) == 0 {
		return nil
	}
	t := tag(p)
	keys := make([]string, 0, 1+len(ds))
	keys = append(keys, t+"holds")
	args := append([]any{"count"}, b.clockArgs(at)...)
	args = append(args, len(ds))
	var err error
	for _, d := range ds {
		keys = append(keys, t+"w:"+d.Key)
		if args, err = windowArgs(args, d, "r"); err != nil {
			return err
		}
	}
	v, _, err := b.run(ctx, "count", keys, args)
	if err != nil {
		return err
	}
	if v[0] == "window" {
		dec, err := decision(v)
		if err != nil {
			return err
		}
		return admission.RequestRefusal(p, dec)
	}
	return nil
}

// decision reads a 'window' reply: the denied window (from 1), the
// retry-after in ns, whether it can never fit.
func decision(v []string) (limits.Decision, error) {
	if len(v) < 6 {
		return limits.Decision{}, fmt.Errorf("admission/redis: a refusal of %d values", len(v))
	}
	i, err1 := strconv.Atoi(v[3])
	ra, err2 := strconv.ParseInt(v[4], 10, 64)
	if err := errors.Join(err1, err2); err != nil || i < 1 {
		return limits.Decision{}, fmt.Errorf("admission/redis: a refusal %q: %v", v, err)
	}
	return limits.Decision{Denied: i - 1, RetryAfter: time.Duration(ra), Impossible: v[5] == "1"}, nil
}

// Admit reserves what c may use against every limit that covers it, in
// one round trip — two when a budget period is new to Redis (its start
// read from the ledger first), or the server's clock is in another
// period than the replica's.
func (b *Backend) Admit(ctx context.Context, c admission.Claim) (admission.Grant, error) {
	if c.Principal == nil {
		return admission.Grant{}, fmt.Errorf("admission/redis: claim without a principal")
	}
	p := admission.PlanClaim(c)
	t := tag(c.Principal)
	id := b.next.Add(1)
	hold := b.replica + "-" + strconv.FormatUint(id, 10)

	keys := make([]string, 0, 1+len(p.Windows)+len(p.Budgets))
	keys = append(keys, t+"holds")
	for _, w := range p.Windows {
		keys = append(keys, t+"w:"+w.Key)
	}
	for _, bu := range p.Budgets {
		keys = append(keys, stateKey(t, bu.Scope, bu.ID, bu.Model, bu.Period))
	}
	at := c.At
	if !b.opts.CallerClock {
		at = time.Now()
	}
	seeds := make([]string, len(p.Budgets))
	wseeds := make([]string, len(p.Windows))
	for i := range wseeds {
		wseeds[i] = "?"
	}
	for range 4 {
		args := append([]any{"admit"}, b.clockArgs(c.At)...)
		args = append(args, boolArg(c.CountRequest), hold, time.Duration(b.ttl.Load()).Milliseconds(), p.Cost.PicoString())
		for _, a := range p.Amounts {
			args = append(args, a)
		}
		args = append(args, len(p.Windows), len(p.Budgets), p.Requests)
		var err error
		for _, w := range p.Windows {
			kind := "r"
			if !w.Request {
				kind = strconv.Itoa(int(w.Kind))
			}
			if args, err = windowArgs(args, w.Demand, kind); err != nil {
				return admission.Grant{}, err
			}
		}
		for i, bu := range p.Budgets {
			start, end := admission.PeriodOf(bu.Period, at, b.opts.TimeZone)
			args = append(args, money.FromMicros(bu.MicroUSD).PicoString(), start.Unix(), endArg(end), seeds[i])
		}
		for _, ws := range wseeds {
			args = append(args, ws)
		}
		v, now, err := b.run(ctx, "admit", keys, args)
		if err != nil {
			return admission.Grant{}, err
		}
		switch v[0] {
		case "ok":
			return b.granted(c, p, v, hold, id)
		case "window":
			dec, err := decision(v)
			if err != nil {
				return admission.Grant{}, err
			}
			if dec.Denied >= len(p.Windows) {
				return admission.Grant{}, fmt.Errorf("admission/redis: a refusal by window %d of %d", dec.Denied+1, len(p.Windows))
			}
			return admission.Grant{}, p.Windows[dec.Denied].Refusal(dec)
		case "budget":
			return admission.Grant{}, budgetRefusal(p, v, now, b.opts.TimeZone)
		case "seed":
			for _, s := range v[3:] {
				i, err := strconv.Atoi(s)
				if err != nil || i < 1 || i > len(p.Budgets) {
					return admission.Grant{}, fmt.Errorf("admission/redis: a seed asked for budget %q", s)
				}
				bu := p.Budgets[i-1]
				start, _ := admission.PeriodOf(bu.Period, at, b.opts.TimeZone)
				spent, err := b.spent(ctx, bu.Scope, bu.ID, bu.Model, start)
				if err != nil {
					return admission.Grant{}, err
				}
				seeds[i-1] = spent.PicoString()
			}
		case "wseed":
			for _, s := range v[3:] {
				i, err := strconv.Atoi(s)
				if err != nil || i < 1 || i > len(p.Windows) {
					return admission.Grant{}, fmt.Errorf("admission/redis: a seed asked for window %q", s)
				}
				if wseeds[i-1], err = b.windowSeed(ctx, p.Windows[i-1], now); err != nil {
					return admission.Grant{}, err
				}
			}
		case "clock":
			at = now
			clear(seeds)
		default:
			return admission.Grant{}, fmt.Errorf("admission/redis: a reply %q", v[0])
		}
	}
	return admission.Grant{}, fmt.Errorf("admission/redis: no answer in four calls (budget periods changing under the clock)")
}

// windowSeed is what the ledger holds of rolling budget w's window at
// now, as the script's seed: each 15-minute bucket's spend counted in the
// window's bucket of that bucket's end (no earlier than its records, so
// it leaves the window no earlier than they would), or of now if it ends
// later.
func (b *Backend) windowSeed(ctx context.Context, w admission.Window, now time.Time) (string, error) {
	if b.opts.SpentBuckets == nil {
		return "", nil
	}
	kind, id, model := w.Scope()
	from := now.Add(-w.Period)
	bs, err := b.opts.SpentBuckets(ctx, kind, id, model, from)
	if err != nil {
		return "", fmt.Errorf("admission/redis: what %s %s spent in its rolling budget's window, from the ledger: %w: %w", kind, id, admission.ErrLedger, err)
	}
	ws, err := width(w.Period)
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, bu := range bs {
		end := bu.Start.Add(SpentBucketWidth)
		if !end.After(from) || bu.Cost.IsZero() {
			continue
		}
		if end.After(now) {
			end = now
		}
		fmt.Fprintf(&out, "%d:%d;", floorDiv(end.Unix(), ws), bu.Cost.Pico())
	}
	return out.String(), nil
}

// SpentBucket is what a scope spent in one of the ledger's buckets
// (SpentBucketWidth wide, from Start).
type SpentBucket struct {
	Start time.Time
	Cost  money.Sum
}

// SpentBucketWidth is the width of the ledger's buckets
// (ledger.BucketWidth).
const SpentBucketWidth = 15 * time.Minute

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b < 0 {
		q--
	}
	return q
}

func (b *Backend) spent(ctx context.Context, kind, id, model string, since time.Time) (money.Sum, error) {
	if b.opts.Spent == nil {
		return money.Sum{}, nil
	}
	s, err := b.opts.Spent(ctx, kind, id, model, since)
	if err != nil {
		return money.Sum{}, fmt.Errorf("admission/redis: what %s %s spent since %s, from the ledger: %w: %w", kind, id, since.Format(time.RFC3339), admission.ErrLedger, err)
	}
	return s, nil
}

// granted reads an 'ok' reply of admit.
func (b *Backend) granted(c admission.Claim, p admission.Plan, v []string, hold string, id uint64) (admission.Grant, error) {
	want := 3 + 2*len(p.Windows) + len(p.Budgets)
	if len(v) != want {
		return admission.Grant{}, fmt.Errorf("admission/redis: an admission of %d values, want %d", len(v), want)
	}
	var rem admission.Remaining
	bv := v[3+2*len(p.Windows):]
	for i, bu := range p.Budgets {
		left, err := parseSum(bv[i])
		if err != nil {
			return admission.Grant{}, err
		}
		rem.AddBudget(bu.MicroUSD, left.Sub(p.Cost).MicrosDown())
	}
	for i, w := range p.Windows {
		left, err1 := strconv.ParseInt(v[3+2*i], 10, 64)
		reset, err2 := strconv.ParseInt(v[4+2*i], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return admission.Grant{}, fmt.Errorf("admission/redis: window %d: %w", i+1, err)
		}
		rem.AddWindow(w, left, time.Duration(reset))
	}
	return admission.NewGrant(c, rem, id), nil
}

// budgetRefusal reads a 'budget' reply: the budget (from 1), what it has
// left, its period's start and end.
func budgetRefusal(p admission.Plan, v []string, now time.Time, tz *time.Location) error {
	if len(v) < 7 {
		return fmt.Errorf("admission/redis: a budget refusal of %d values", len(v))
	}
	i, err := strconv.Atoi(v[3])
	if err != nil || i < 1 || i > len(p.Budgets) {
		return fmt.Errorf("admission/redis: a refusal by budget %q", v[3])
	}
	left, err := parseSum(v[4])
	if err != nil {
		return err
	}
	start, end, err := period(v[5], v[6], tz)
	if err != nil {
		return err
	}
	return p.Budgets[i-1].Refusal(start, end, now, left, p.Cost)
}

// period reads a budget state's start and end (Unix seconds; end ""
// for a lifetime), in tz as PeriodOf gives them.
func period(s, e string, tz *time.Location) (start, end time.Time, err error) {
	ss, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return start, end, fmt.Errorf("admission/redis: a period's start %q", s)
	}
	start = time.Unix(ss, 0).In(tz)
	if ss == (time.Time{}).Unix() {
		start = time.Time{}
	}
	if e != "" {
		es, err := strconv.ParseInt(e, 10, 64)
		if err != nil {
			return start, end, fmt.Errorf("admission/redis: a period's end %q", e)
		}
		end = time.Unix(es, 0).In(tz)
	}
	return start, end, nil
}

// Settle replaces g's reservation by what the request used, in one round
// trip. A grant settled twice, or whose hold Redis no longer has, changes
// nothing. A Settle Redis does not take is logged; its reservation is
// released when it expires (admission.Failover keeps it to retry).
func (b *Backend) Settle(ctx context.Context, g admission.Grant, a admission.Actual) {
	if err := b.TrySettle(ctx, g, a); err != nil {
		b.opts.Logger.Error("settling a reservation in Redis failed; it is released when it expires", "err", err)
	}
}

// TrySettle is Settle, saying whether Redis took it.
func (b *Backend) TrySettle(ctx context.Context, g admission.Grant, a admission.Actual) error {
	c := g.Claim
	if c.Principal == nil {
		return nil
	}
	t := tag(c.Principal)
	hold := b.replica + "-" + strconv.FormatUint(g.ID(), 10)
	now := a.At
	if now.IsZero() {
		now = c.At
	}
	in, out := max(a.InputTokens, 0), max(a.OutputTokens, 0)
	cost := max(a.CostPico, 0)
	keys := append([]string{t + "holds"}, stateKeys(t, c)...)
	args := append([]any{"settle"}, b.clockArgs(now)...)
	args = append(args, hold, in, out, satAdd(in, out), cost, len(keys)-1)
	v, _, err := b.run(ctx, "settle", keys, args)
	if err != nil {
		return err
	}
	if v[0] == "ok" && cost > 0 {
		b.record(c, cost)
	}
	return nil
}

func (b *Backend) record(c admission.Claim, cost int64) {
	if b.opts.Record == nil {
		return
	}
	p := c.Principal
	for _, s := range [...][2]string{{"key", p.KeyID}, {"team", p.Team}, {"org", p.Org}} {
		if s[1] != "" {
			b.opts.Record(s[0], s[1], c.Model, c.At, cost)
		}
	}
}

// stateKeys are the keys of every budget period state c's cost may count
// in: every period kind of its key, team and org, for all models and for
// c's.
func stateKeys(t string, c admission.Claim) []string {
	var keys []string
	p := c.Principal
	for _, s := range [...][2]string{{"key", p.KeyID}, {"team", p.Team}, {"org", p.Org}} {
		if s[1] == "" {
			continue
		}
		models := []string{""}
		if c.Model != "" {
			models = append(models, c.Model)
		}
		for _, model := range models {
			for _, per := range []string{policies.PeriodDay, policies.PeriodWeek, policies.PeriodMonth, policies.PeriodLifetime} {
				keys = append(keys, stateKey(t, s[0], s[1], model, per))
			}
		}
	}
	return keys
}

// Reconcile counts, once for id, what a request admitted without Redis
// used (admission.Shared): its tokens in its windows at its start, its
// request in the request windows unless ext_authz counted it already
// (c.CountRequest false: in whichever backend answered it), and its cost
// in the rolling budgets and budget periods Redis made before it
// settled — age ago, by the replica's monotonic clock, so that the
// comparison is with Redis's own clock, never with the replica's.
func (b *Backend) Reconcile(ctx context.Context, id string, c admission.Claim, a admission.Actual, age time.Duration) error {
	if c.Principal == nil {
		return nil
	}
	t := tag(c.Principal)
	in, out := max(a.InputTokens, 0), max(a.OutputTokens, 0)
	used := [4]int64{in, out, satAdd(in, out), max(a.CostPico, 0)}
	p := admission.PlanClaim(c)
	keys := []string{t + "holds"}
	args := append([]any{"reconcile"}, b.clockArgs(a.At)...)
	args = append(args, id, c.At.Unix(), max(age, 0).Milliseconds(), used[admission.CostPico])
	states := stateKeys(t, c)
	var ws []admission.Window
	for i, w := range p.Windows {
		if i < p.Requests && !c.CountRequest {
			continue // counted by ext_authz
		}
		ws = append(ws, w)
	}
	args = append(args, len(ws), len(states))
	var err error
	for _, w := range ws {
		d, kind := w.Demand, "r"
		d.Amount = 1
		if !w.Request {
			d.Amount, kind = used[w.Kind], strconv.Itoa(int(w.Kind))
		}
		keys = append(keys, t+"w:"+d.Key)
		if args, err = windowArgs(args, d, kind); err != nil {
			return err
		}
	}
	keys = append(keys, states...)
	// The request was settled, and recorded (Options.Record), by the
	// backend that admitted it.
	_, _, err = b.run(ctx, "reconcile", keys, args)
	return err
}

// Ping runs the script once (loading it if the server lacks it).
func (b *Backend) Ping(ctx context.Context) error {
	_, _, err := b.run(ctx, "ping", []string{Prefix + "{ping}:holds"}, append([]any{"ping"}, b.clockArgs(time.Now())...))
	return err
}

// Budgets reports every budget that covers p's requests at at.
func (b *Backend) Budgets(p *keyring.Principal, at time.Time) []admission.BudgetStatus {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bs := admission.BudgetsOf(p)
	t := tag(p)
	keys := []string{t + "holds"}
	var rolling, calendar []int
	args := append([]any{"budgets"}, b.clockArgs(at)...)
	for i, bu := range bs {
		if bu.Period == policies.PeriodRolling {
			rolling = append(rolling, i)
		} else {
			calendar = append(calendar, i)
		}
	}
	args = append(args, len(rolling), len(calendar))
	var err error
	for _, i := range rolling {
		d := bs[i].Rolling()
		keys = append(keys, t+"w:"+d.Key)
		if args, err = windowArgs(args, d, "3"); err != nil {
			b.opts.Logger.Error("reading budgets from Redis", "err", err)
			return nil
		}
	}
	for _, i := range calendar {
		bu := bs[i]
		keys = append(keys, stateKey(t, bu.Scope, bu.ID, bu.Model, bu.Period))
	}
	v, now, err := b.run(ctx, "budgets", keys, args)
	if err != nil || len(v) != 3+len(rolling)+4*len(calendar) {
		b.opts.Logger.Error("reading budgets from Redis", "err", err, "values", len(v))
		return nil
	}
	if b.opts.CallerClock {
		now = at
	}
	out := make([]admission.BudgetStatus, len(bs))
	for k, i := range rolling {
		bu, d := bs[i], bs[i].Rolling()
		total, err := strconv.ParseInt(v[3+k], 10, 64)
		if err != nil {
			total = d.Limit
		}
		left := max(d.Limit-total, 0)
		out[i] = admission.BudgetStatus{Scope: bu.Scope, ID: bu.ID, Model: bu.Model, Period: bu.Period, Window: bu.Window, Limit: bu.MicroUSD,
			Remaining: money.FromPico(left), Spent: money.FromPico(d.Limit - left)}
	}
	cv := v[3+len(rolling):]
	for k, i := range calendar {
		bu := bs[i]
		st := admission.BudgetStatus{Scope: bu.Scope, ID: bu.ID, Model: bu.Model, Period: bu.Period, Limit: bu.MicroUSD}
		f := cv[4*k : 4*k+4]
		if f[0] == "" {
			start, end := admission.PeriodOf(bu.Period, now, b.opts.TimeZone)
			spent, err := b.spent(ctx, bu.Scope, bu.ID, bu.Model, start)
			if err != nil {
				b.opts.Logger.Error("reading budgets", "err", err)
			}
			st.Spent, st.Resets = spent, end
		} else {
			spent, err1 := parseSum(f[2])
			reserved, err2 := parseSum(f[3])
			_, end, err3 := period(f[0], f[1], b.opts.TimeZone)
			if err := errors.Join(err1, err2, err3); err != nil {
				b.opts.Logger.Error("reading budgets from Redis", "err", err)
			}
			st.Spent, st.Reserved, st.Resets = spent, reserved, end
		}
		st.Remaining = money.FromMicros(bu.MicroUSD).Sub(st.Spent).Sub(st.Reserved)
		out[i] = st
	}
	return out
}

// Run holds ttl as the reservations' lifetime until ctx ends: the
// scripts release what expired whenever they touch an org.
func (b *Backend) Run(ctx context.Context, ttl time.Duration, _ func() time.Time) error {
	if ttl > 0 {
		b.ttl.Store(int64(ttl))
	}
	<-ctx.Done()
	return nil
}

// stateKey is the key of a calendar or lifetime budget's state: a
// scope's (a model's, model not "") period of kind per.
//
// Ids and models are length-prefixed, so that no two scopes share a key
// whatever their names hold ("t/model/m" is a team's name, not team t's
// budget for model m).
func stateKey(tag, kind, id, model, per string) string {
	return tag + "b:" + kind + ":" + strconv.Itoa(len(id)) + ":" + id + ":" + strconv.Itoa(len(model)) + ":" + model + ":" + per
}

func endArg(end time.Time) string {
	if end.IsZero() {
		return ""
	}
	return strconv.FormatInt(end.Unix(), 10)
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// parseSum reads pico-dollars as a decimal string, up to money.Max.
func parseSum(s string) (money.Sum, error) {
	if s == "" {
		return money.Sum{}, nil
	}
	if len(s) <= 6 {
		p, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return money.Sum{}, fmt.Errorf("admission/redis: an amount %q", s)
		}
		return money.FromPico(p), nil
	}
	m, err1 := strconv.ParseInt(s[:len(s)-6], 10, 64)
	p, err2 := strconv.ParseInt(s[len(s)-6:], 10, 64)
	if err := errors.Join(err1, err2); err != nil || m < 0 || p < 0 {
		return money.Sum{}, fmt.Errorf("admission/redis: an amount %q", s)
	}
	return money.FromParts(m, p), nil
}

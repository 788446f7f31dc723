package keyring

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/policies"
)

// Principal is who a key speaks for: the key, its team and org, what they
// may call, and the limits that cover them. Principals are immutable: the
// ring makes a key's principal on its first lookup and returns that one
// until a change to the key or to the teams makes a new one.
type Principal struct {
	KeyID     string
	KeyName   string
	KeyPrefix string
	Team      string
	Org       string
	// KeyModels and TeamModels are the two allow-lists; a model must be
	// allowed by both. A zero ModelSet allows everything.
	KeyModels  policies.ModelSet
	TeamModels policies.ModelSet
	// KeyLimits, TeamLimits and OrgLimits are the limits of the key, its
	// team and its org, as configured: an admission backend counts what
	// they allow (ext_authz the key's and team's Requests, ext_proc the
	// rest) in its own terms.
	KeyLimits  policies.Limits
	TeamLimits policies.Limits
	OrgLimits  policies.Limits
	ExpiresAt  time.Time // zero: never
	RevokedAt  time.Time // zero: not revoked
	// TeamMissing is set when the key names a team that exists neither in
	// the config nor in the store (it was removed after the key was made).
	TeamMissing bool

	// derived is what a caller made of the principal's fields for every
	// request to use (Derived).
	derived atomic.Pointer[derivedValue]

	team        *teamInfo       // nil when TeamMissing
	keyModelsMD *structpb.Value // KeyModels as metadata, shared; nil: unrestricted
}

type derivedValue struct{ v any }

// Derived returns the value kept with SetDerived, or nil.
func (p *Principal) Derived() any {
	if d := p.derived.Load(); d != nil {
		return d.v
	}
	return nil
}

// SetDerived keeps v with the principal: a value made from its fields that
// a caller would otherwise make again on every request (the in-process
// admission backend's counters for its request limits). The principal
// never changes, so v stays true for as long as the principal is in use; a
// change to the key or its team makes a new principal, without it.
func (p *Principal) SetDerived(v any) { p.derived.Store(&derivedValue{v}) }

// Revoked reports whether the key has been revoked.
func (p *Principal) Revoked() bool { return !p.RevokedAt.IsZero() }

// Expired reports whether the key has expired at now.
func (p *Principal) Expired(now time.Time) bool {
	return !p.ExpiresAt.IsZero() && !now.Before(p.ExpiresAt)
}

// ChangeSource is the part of store.Store the ring follows.
type ChangeSource interface {
	Changes(ctx context.Context, since int64) (store.Changes, error)
}

// Ring is the replica. The zero value is not usable; call New.
type Ring struct {
	log *slog.Logger

	mu     sync.Mutex // serialises writers; readers use view
	policy *policies.Snapshot
	teams  map[string]store.Team
	orgs   map[string]store.Org
	// shadowed are stored keys whose hash a declared key has: the
	// config's wins, and they return if it goes.
	shadowed map[string]keyRec
	rev      int64
	synced   bool
	interner // values that many keys share

	view atomic.Pointer[view]
}

// interner holds one copy of the values that many keys share.
type interner struct {
	names     map[string]string
	modelSets map[string]*models
	limitSets map[simpleLimits]*policies.Limits
	buf       []byte // scratch for modelSets' keys
}

func newInterner() interner {
	return interner{names: map[string]string{}, modelSets: map[string]*models{}, limitSets: map[simpleLimits]*policies.Limits{}}
}

// clone is a copy of in whose maps are its own.
func (in *interner) clone() interner {
	return interner{names: maps.Clone(in.names), modelSets: maps.Clone(in.modelSets), limitSets: maps.Clone(in.limitSets)}
}

// merge adds the values of from that in does not hold. Where both hold
// one, records made by either share an equal value, if not the same one.
func (in *interner) merge(from *interner) {
	for k, v := range from.names {
		if _, ok := in.names[k]; !ok {
			in.names[k] = v
		}
	}
	for k, v := range from.modelSets {
		if _, ok := in.modelSets[k]; !ok {
			in.modelSets[k] = v
		}
	}
	for k, v := range from.limitSets {
		if _, ok := in.limitSets[k]; !ok {
			in.limitSets[k] = v
		}
	}
}

// simpleLimits are limits with no budgets and no per-model limits: the
// ones keys commonly have, interned by value.
type simpleLimits struct {
	requests policies.RateLimits
	tokens   policies.TokenLimits
}

// New returns an empty ring: it resolves nothing until SetPolicy and a
// first Sync (or Apply).
func New(log *slog.Logger) *Ring {
	r := &Ring{
		log:      log.With("component", "keyring"),
		teams:    map[string]store.Team{},
		orgs:     map[string]store.Org{},
		shadowed: map[string]keyRec{},
		interner: newInterner(),
	}
	r.view.Store(&view{base: newBuilder(0).build(nil), teams: map[string]*teamInfo{}})
	return r
}

// Resolve returns the principal of the key whose secret hashes to h, or
// nil if no key has that hash. It never blocks.
//
// The lookup compares hashes, never secrets: SHA-256 is preimage
// resistant, so timing differences in comparing hashes reveal nothing
// about any secret.
func (r *Ring) Resolve(h [32]byte) *Principal { return r.view.Load().resolve(h) }

// ByID returns the principal of the key with that id, or nil. ext_proc
// uses it to turn the key id ext_authz passed on into the current
// principal (allow-lists, limits) without re-parsing metadata.
func (r *Ring) ByID(id string) *Principal { return r.view.Load().byKeyID(id) }

// Len reports how many keys the replica holds (revoked ones included).
func (r *Ring) Len() int { return r.view.Load().n }

// Synced reports whether the ring has loaded the store at least once.
func (r *Ring) Synced() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.synced
}

// SetPolicy makes s the policy the ring resolves against (declared keys,
// teams, orgs) and republishes.
func (r *Ring) SetPolicy(s *policies.Snapshot) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.policy = s
	r.rebuild(r.view.Load())
}

// Apply merges a batch of store changes and republishes.
func (r *Ring) Apply(ch store.Changes) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apply(ch)
}

// apply merges ch into the view and publishes the result. Stored keys
// changed since the table was built go to the view's overlay, copied per
// batch; once the overlay outgrows an eighth of the table, the table is
// rebuilt. A change of teams or orgs rebuilds the teams only.
func (r *Ring) apply(ch store.Changes) {
	old := r.view.Load()
	first := r.applyGroups(ch)
	if first {
		// The first load: no stored key is held yet, so the batch and the
		// declared keys make the table directly.
		b := r.declaredRows(len(ch.Keys))
		for i := range ch.Keys {
			if rec, ok := r.storedRec(r.log, &ch.Keys[i]); ok {
				b.add(&rec)
			}
		}
		r.publishTable(b)
		return
	}
	if len(ch.Keys) == 0 && len(ch.Teams) == 0 && len(ch.Orgs) == 0 {
		return
	}
	v := &view{base: old.base, cache: old.cache, byID: old.byID, byHash: old.byHash, teams: old.teams, n: old.n}
	owned := false // v's overlay maps are its own, not old's
	if len(ch.Teams) > 0 || len(ch.Orgs) > 0 {
		// Principals take their team's part when made: every one is made
		// anew, from fresh caches.
		v.teams = r.teamInfos()
		v.cache = make([]atomic.Pointer[Principal], v.base.len())
		v.byID, v.byHash, owned = nil, nil, true
		for _, o := range old.byID {
			v.put(o.rec)
		}
	}
	for i := range ch.Keys {
		k := &ch.Keys[i]
		if cur, ok := r.storedRev(v, k.ID); ok && k.Rev+1 <= cur {
			// Two Syncs may overlap (a follower and an explicit one): a
			// record older than the one held must not replace it, or a
			// revocation could be undone.
			continue
		}
		rec, ok := r.storedRec(r.log, k)
		if !ok {
			continue
		}
		if j := v.base.findHash(rec.hash); j >= 0 && v.base.declaredAt(j) {
			r.log.Warn("a stored key has the same hash as a key declared in the config; the config's wins", "key_id", rec.id())
			r.shadowed[rec.id()] = rec
			continue
		}
		if !owned {
			v.copyOverlay()
			owned = true
		}
		if v.base.findID(rec.id()) < 0 {
			if _, inOver := v.byID[rec.id()]; !inOver {
				v.n++
			}
		}
		v.put(rec)
	}
	if len(v.byID) > 1024+v.base.len()/8 {
		r.rebuild(v)
		return
	}
	r.view.Store(v)
}

// applyGroups merges ch's teams and orgs, takes its revision and marks the
// ring synced; it reports whether this is the first load. Caller holds
// r.mu.
func (r *Ring) applyGroups(ch store.Changes) (first bool) {
	first = !r.synced
	for _, t := range ch.Teams {
		if o, ok := r.teams[t.Name]; !ok || t.Rev > o.Rev {
			r.teams[t.Name] = t
		}
	}
	for _, o := range ch.Orgs {
		if p, ok := r.orgs[o.Name]; !ok || o.Rev > p.Rev {
			r.orgs[o.Name] = o
		}
	}
	if ch.Rev > r.rev {
		r.rev = ch.Rev
	}
	r.synced = true
	return first
}

func (v *view) copyOverlay() {
	byID := make(map[string]*overRec, len(v.byID)+1)
	byHash := make(map[[32]byte]*overRec, len(v.byID)+1)
	for id, o := range v.byID {
		byID[id], byHash[o.rec.hash] = o, o
	}
	v.byID, v.byHash = byID, byHash
}

// put adds rec to v's overlay, which the caller has made v's own.
func (v *view) put(rec keyRec) {
	if v.byID == nil {
		v.byID, v.byHash = map[string]*overRec{}, map[[32]byte]*overRec{}
	}
	if o, ok := v.byID[rec.id()]; ok && o.rec.hash != rec.hash {
		delete(v.byHash, o.rec.hash)
	}
	o := &overRec{rec: rec}
	v.byID[rec.id()], v.byHash[rec.hash] = o, o
}

// storedRev is the rev of the stored key with that id that the ring
// holds, shadowed ones included.
func (r *Ring) storedRev(v *view, id string) (int64, bool) {
	if o, ok := v.byID[id]; ok {
		return o.rec.rev, true
	}
	if i := v.base.findID(id); i >= 0 && !v.base.declaredAt(i) {
		return v.base.rows[i].rev, true
	}
	if rec, ok := r.shadowed[id]; ok {
		return rec.rev, true
	}
	return 0, false
}

// Sync reads the store's changes since the last sync and applies them. It
// republishes only when something changed.
//
// The first Sync from a src that is also a store.KeyStreamer reads the
// store key by key into the new table (see load): no batch of every key
// is held beside it. The ring it leaves is the one Changes(ctx, 0) would
// have made, at the same revision.
func (r *Ring) Sync(ctx context.Context, src ChangeSource) error {
	r.mu.Lock()
	since, first := r.rev, !r.synced
	r.mu.Unlock()
	if ks, ok := src.(store.KeyStreamer); ok && first {
		loaded, err := r.load(ctx, ks)
		if err != nil || loaded {
			return err
		}
		// Another Sync loaded the ring meanwhile, perhaps from an older
		// snapshot: read what changed since that one.
		r.mu.Lock()
		since, first = r.rev, false
		r.mu.Unlock()
	}
	ch, err := src.Changes(ctx, since)
	if err != nil {
		return fmt.Errorf("keyring: read store changes: %w", err)
	}
	if !first && len(ch.Keys) == 0 && len(ch.Teams) == 0 && len(ch.Orgs) == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apply(ch)
	r.log.Debug("store changes applied", "keys", len(ch.Keys), "teams", len(ch.Teams), "orgs", len(ch.Orgs), "rev", ch.Rev)
	return nil
}

// loader makes the first table from a streamed read apart from the ring,
// with its own copy of the ring's interned values, so that the ring stays
// as it was, and usable, while the store is read, and unchanged if the
// read fails.
type loader struct {
	interner
	log *slog.Logger
	// policy is the ring's when the read began; rows starts with its
	// declared keys (lead of them), which the table indexes first.
	policy *policies.Snapshot
	lead   int
	rows   *builder
	// base is the ring's table when the read began, whose first declared
	// rows are policy's declared keys when it holds them: copied, they
	// need not be made again. more is how many stored keys the store
	// announced.
	base     *table
	declared int
	more     int
}

// size takes note that the store holds n keys.
func (l *loader) size(n int) { l.more = n }

// start makes rows, with room for the stored keys, once the first comes
// (or at the end of the read): a store with no keys leaves the table of
// the declared keys as it is (see reuses).
func (l *loader) start() {
	switch {
	case l.rows != nil:
	case l.policy != nil && l.declared == l.policy.DeclaredKeyCount():
		l.rows = newBuilder(l.declared + l.more)
		for i := range l.declared {
			rec := l.base.rec(i)
			l.rows.add(&rec)
		}
		l.lead = l.rows.len()
	default:
		l.rows = l.declaredRows(l.policy, l.more)
		l.lead = l.rows.len()
	}
}

// reuses reports whether the read left the ring's table of declared keys
// as it was: no stored key came, the policy is the one whose declared
// keys the table holds, and it holds nothing else.
func (l *loader) reuses(cur *table, policy *policies.Snapshot) bool {
	return l.rows == nil && policy == l.policy && cur == l.base && cur != nil &&
		l.declared == cur.len() && l.policy != nil && l.declared == l.policy.DeclaredKeyCount()
}

func (l *loader) add(k store.Key) error {
	l.start()
	if rec, ok := l.storedRec(l.log, &k); ok {
		l.rows.add(&rec)
	}
	return nil
}

// load is the first Sync from a store that streams: each key becomes its
// record as it is read. It reports false, having changed nothing, if
// another Sync loaded the ring meanwhile.
func (r *Ring) load(ctx context.Context, src store.KeyStreamer) (bool, error) {
	r.mu.Lock()
	base := r.view.Load().base
	l := &loader{interner: r.interner.clone(), log: r.log, policy: r.policy, base: base, declared: base.declared()}
	r.mu.Unlock()
	ch, err := src.EachKey(ctx, l.size, l.add)
	if err != nil {
		return false, fmt.Errorf("keyring: read store: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.synced {
		return false, nil
	}
	r.interner.merge(&l.interner)
	r.applyGroups(ch)
	if l.reuses(r.view.Load().base, r.policy) {
		r.publish(l.base)
		r.log.Debug("store loaded", "keys", 0, "teams", len(ch.Teams), "orgs", len(ch.Orgs), "rev", ch.Rev)
		return true, nil
	}
	l.start()
	b, stored := l.rows, l.rows.len()-l.lead
	if r.policy != l.policy {
		// The policy changed while the store was read.
		b = r.declaredRows(stored)
		for i := l.lead; i < l.rows.len(); i++ {
			rec := l.rows.rec(i)
			b.add(&rec)
		}
	}
	r.publishTable(b)
	r.log.Debug("store loaded", "keys", stored, "teams", len(ch.Teams), "orgs", len(ch.Orgs), "rev", ch.Rev)
	return true, nil
}

// Notifier is what a ChangeSource may offer besides its changes: a
// signal soon after each change is committed (PostgreSQL's
// LISTEN/NOTIFY), so that a follower need not wait for its next poll.
type Notifier interface {
	// Changed signals, without blocking its sender (a buffer of one
	// suffices), after changes are committed. A signal may be lost (a
	// dropped connection); the follower's poll covers that.
	Changed() <-chan struct{}
}

// Follow calls Sync every interval until ctx ends, and at once on each
// signal when src is also a Notifier (the interval's poll then is the
// backstop for a signal lost). A failed sync is reported through onErr
// (may be nil) and logged; the last good replica stays in force. Returns
// nil when ctx ends.
func (r *Ring) Follow(ctx context.Context, src ChangeSource, interval time.Duration, onErr func(error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	var changed <-chan struct{} // nil: never ready
	if n, ok := src.(Notifier); ok {
		changed = n.Changed()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-changed:
		}
		if err := r.Sync(ctx, src); err != nil && ctx.Err() == nil {
			r.log.Error("store sync failed; keeping the last good key replica", "err", err)
			if onErr != nil {
				onErr(err)
			}
		}
	}
}

// orgLimits are the limits of org: the config's when the config declares
// it, else the store's (none for an org that is in neither).
func (r *Ring) orgLimits(org string) policies.Limits {
	if org == "" {
		return policies.Limits{}
	}
	if r.policy != nil && r.policy.Org(org) {
		return r.policy.OrgLimits(org)
	}
	return r.orgs[org].Limits
}

// Team returns a principal for the team as a whole — no key: its limits,
// its org's, its allow-list — for reports such as the budgets that cover
// the team; nil if neither the config nor the store has the team. It is
// built on each call; the hot path never uses it.
func (r *Ring) Team(name string) *Principal {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.team(name)
	if !ok {
		return nil
	}
	return &Principal{Team: t.Name, Org: t.Org, TeamModels: t.Models, TeamLimits: t.Limits, OrgLimits: r.orgLimits(t.Org)}
}

// Org returns a principal for the org as a whole (its limits only), or nil
// if neither the config nor the store has the org.
func (r *Ring) Org(name string) *Principal {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, stored := r.orgs[name]
	if name == "" || !stored && (r.policy == nil || !r.policy.Org(name)) {
		return nil
	}
	return &Principal{Org: name, OrgLimits: r.orgLimits(name)}
}

// rebuild publishes a new table from the policy's declared keys and every
// stored key v and the shadowed set hold. Caller holds r.mu.
func (r *Ring) rebuild(v *view) {
	b := r.declaredRows(v.base.len() + len(v.byID) + len(r.shadowed))
	for i := range v.base.len() {
		if v.base.declaredAt(i) {
			continue
		}
		if _, changed := v.byID[v.base.id(i)]; changed {
			continue
		}
		rec := v.base.rec(i)
		b.add(&rec)
	}
	for _, o := range v.byID {
		b.add(&o.rec)
	}
	for _, rec := range r.shadowed {
		b.add(&rec)
	}
	r.publishTable(b)
}

// publishTable indexes b's rows (declared first) and publishes them with
// freshly built teams. Caller holds r.mu.
func (r *Ring) publishTable(b *builder) {
	clear(r.shadowed)
	if b.full > 0 {
		r.log.Error("key records past 4 GiB of ids, prefixes and names are not held; those keys do not resolve", "keys", b.full)
	}
	r.publish(b.build(func(rec, by *keyRec) {
		if rec.declared() {
			return // a repeated declared key: Validate refuses those
		}
		if by.declared() && by.hash == rec.hash {
			r.log.Warn("a stored key has the same hash as a key declared in the config; the config's wins", "key_id", rec.id())
		}
		r.shadowed[rec.id()] = *rec
	}))
}

// publish publishes the table t, with no overlay, and freshly built
// teams. Caller holds r.mu.
func (r *Ring) publish(t *table) {
	r.view.Store(&view{base: t, cache: make([]atomic.Pointer[Principal], t.len()), teams: r.teamInfos(), n: t.len()})
}

// declaredRows is a builder holding the policy's declared keys, with room
// for more. Caller holds r.mu.
func (r *Ring) declaredRows(more int) *builder { return r.interner.declaredRows(r.policy, more) }

// declaredRows is a builder holding pol's declared keys (none for a nil
// pol), with room for more.
func (in *interner) declaredRows(pol *policies.Snapshot, more int) *builder {
	if pol == nil {
		return newBuilder(more)
	}
	b := newBuilder(pol.DeclaredKeyCount() + more)
	pol.EachDeclaredKey(func(k *policies.KeyPolicy) {
		rec := keyRec{hash: k.Hash, team: in.intern(k.Team), times: newKeyTimes(k.ExpiresAt, time.Time{})}
		rec.setNames(k.ID, k.Prefix, k.Name)
		rec.models = in.internModels(k.Models)
		rec.limits = in.internLimits(k.Limits)
		b.add(&rec)
	})
	return b
}

// storedRec is k as a record; false (logged) if its allow-list is invalid.
// It allocates only the record's own strings (one array for its id,
// prefix and name) and what is interned for the first time.
func (in *interner) storedRec(log *slog.Logger, k *store.Key) (keyRec, bool) {
	rec := keyRec{hash: k.Hash, team: in.intern(k.Team), times: newKeyTimes(k.ExpiresAt, k.RevokedAt), rev: k.Rev + 1}
	rec.setNames(k.ID, k.Prefix, k.Name)
	if len(k.Models) > 0 {
		in.buf = in.buf[:0]
		for i, p := range k.Models {
			if i > 0 {
				in.buf = append(in.buf, 0)
			}
			in.buf = append(in.buf, p...)
		}
		m, ok := in.modelSets[string(in.buf)]
		if !ok {
			set, err := policies.NewModelSet(k.Models)
			if err != nil {
				log.Error("stored key has an invalid model allow-list; the key is disabled", "key_id", k.ID, "err", err)
				return keyRec{}, false
			}
			m = &models{set: set, md: stringList(set.Patterns())}
			in.modelSets[string(in.buf)] = m
		}
		rec.models = m
	}
	rec.limits = in.internLimits(k.Limits)
	return rec, true
}

func (in *interner) intern(s string) string {
	if v, ok := in.names[s]; ok {
		return v
	}
	in.names[s] = s
	return s
}

// internModels shares one *models among the keys with the same compiled
// allow-list patterns; nil for an unrestricted set.
func (in *interner) internModels(set policies.ModelSet) *models {
	ps := set.Patterns()
	if len(ps) == 0 {
		return nil
	}
	key := strings.Join(ps, "\x00")
	if m, ok := in.modelSets[key]; ok {
		return m
	}
	m := &models{set: set, md: stringList(ps)}
	in.modelSets[key] = m
	return m
}

// internLimits is nil for no limits, a shared value for simple ones, and
// a copy of l otherwise.
func (in *interner) internLimits(l policies.Limits) *policies.Limits {
	if l.Budgets != nil || l.Models != nil {
		return &l
	}
	k := simpleLimits{l.Requests, l.Tokens}
	if k == (simpleLimits{}) {
		return nil
	}
	if p, ok := in.limitSets[k]; ok {
		return p
	}
	p := &l
	in.limitSets[k] = p
	return p
}

// teamInfos builds every team's shared part: the config's teams, then the
// store's that the config does not declare. Caller holds r.mu.
func (r *Ring) teamInfos() map[string]*teamInfo {
	out := make(map[string]*teamInfo, len(r.teams)+8)
	add := func(t policies.TeamPolicy) {
		ti := &teamInfo{
			name: r.intern(t.Name), org: t.Org, models: t.Models,
			limits: t.Limits, orgLimits: r.orgLimits(t.Org),
			mdTeam: structpb.NewStringValue(t.Name), mdOrg: structpb.NewStringValue(t.Org),
		}
		if !t.Models.Unrestricted() {
			ti.mdModels = stringList(t.Models.Patterns())
		}
		out[ti.name] = ti
	}
	if r.policy != nil {
		for _, t := range r.policy.Teams() {
			add(t)
		}
	}
	for name := range r.teams {
		if _, declared := out[name]; declared {
			continue
		}
		if t, ok := r.team(name); ok {
			add(t)
		}
	}
	return out
}

// team finds a team in the config first, then in the store.
func (r *Ring) team(name string) (policies.TeamPolicy, bool) {
	if r.policy != nil {
		if t, ok := r.policy.Team(name); ok {
			return t, true
		}
	}
	t, ok := r.teams[name]
	if !ok {
		return policies.TeamPolicy{Name: name}, false
	}
	models, err := policies.NewModelSet(t.Models)
	if err != nil {
		// Patterns are validated when written; a bad one here means the
		// database was edited by hand. Treat the team as unusable.
		r.log.Error("stored team has an invalid model allow-list; its keys are refused", "team", t.Name, "err", err)
		return policies.TeamPolicy{Name: name}, false
	}
	return policies.TeamPolicy{Name: t.Name, Org: t.Org, Models: models, Limits: t.Limits}, true
}

package keyring

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/policies"
)

// Principal is who a key speaks for: the key, its team and org, what they
// may call, and the request-rate limits that cover them. Principals are
// immutable once published; a change produces new ones.
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
	KeyLimits  policies.Limits
	TeamLimits policies.Limits
	OrgLimits  policies.Limits
	ExpiresAt  time.Time // zero: never
	RevokedAt  time.Time // zero: not revoked
	// TeamMissing is set when the key names a team that exists neither in
	// the config nor in the store (it was removed after the key was made).
	TeamMissing bool
	// Requests are the request-rate demands (Amount 1) for every limited
	// window of the key and its team, ready for limits.Counters.Admit.
	Requests []limits.Demand

	metadata *structpb.Struct
}

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
	keys   map[string]store.Key
	teams  map[string]store.Team
	orgs   map[string]store.Org
	rev    int64
	synced bool

	view atomic.Pointer[view]
}

type view struct {
	byHash map[[32]byte]*Principal
	byID   map[string]*Principal
}

// New returns an empty ring: it resolves nothing until SetPolicy and a
// first Sync (or Apply).
func New(log *slog.Logger) *Ring {
	r := &Ring{
		log:   log.With("component", "keyring"),
		keys:  map[string]store.Key{},
		teams: map[string]store.Team{},
		orgs:  map[string]store.Org{},
	}
	r.view.Store(&view{byHash: map[[32]byte]*Principal{}, byID: map[string]*Principal{}})
	return r
}

// Resolve returns the principal of the key whose secret hashes to h, or
// nil if no key has that hash. It never blocks.
//
// The lookup compares hashes, never secrets: SHA-256 is preimage
// resistant, so timing differences in comparing hashes reveal nothing
// about any secret.
func (r *Ring) Resolve(h [32]byte) *Principal {
	return r.view.Load().byHash[h]
}

// ByID returns the principal of the key with that id, or nil. ext_proc
// uses it to turn the key id ext_authz passed on into the current
// principal (allow-lists, limits) without re-parsing metadata.
func (r *Ring) ByID(id string) *Principal {
	return r.view.Load().byID[id]
}

// Len reports how many keys the replica holds (revoked ones included).
func (r *Ring) Len() int { return len(r.view.Load().byHash) }

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
	r.rebuild()
}

// Apply merges a batch of store changes and republishes.
func (r *Ring) Apply(ch store.Changes) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.apply(ch)
	r.rebuild()
}

func (r *Ring) apply(ch store.Changes) {
	// Two Syncs may overlap (a follower and an explicit one): a record
	// older than the one held must not replace it, or a revocation could
	// be undone.
	for _, k := range ch.Keys {
		if old, ok := r.keys[k.ID]; !ok || k.Rev > old.Rev {
			r.keys[k.ID] = k
		}
	}
	for _, t := range ch.Teams {
		if old, ok := r.teams[t.Name]; !ok || t.Rev > old.Rev {
			r.teams[t.Name] = t
		}
	}
	for _, o := range ch.Orgs {
		if old, ok := r.orgs[o.Name]; !ok || o.Rev > old.Rev {
			r.orgs[o.Name] = o
		}
	}
	if ch.Rev > r.rev {
		r.rev = ch.Rev
	}
	r.synced = true
}

// Sync reads the store's changes since the last sync and applies them. It
// republishes only when something changed.
func (r *Ring) Sync(ctx context.Context, src ChangeSource) error {
	r.mu.Lock()
	since, first := r.rev, !r.synced
	r.mu.Unlock()
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
	r.rebuild()
	r.log.Debug("store changes applied", "keys", len(ch.Keys), "teams", len(ch.Teams), "orgs", len(ch.Orgs), "rev", ch.Rev)
	return nil
}

// Follow calls Sync every interval until ctx ends. A failed sync is
// reported through onErr (may be nil) and logged; the last good replica
// stays in force. Returns nil when ctx ends.
func (r *Ring) Follow(ctx context.Context, src ChangeSource, interval time.Duration, onErr func(error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
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

// rebuild publishes a new view from the policy and the store records.
// Caller holds r.mu.
func (r *Ring) rebuild() {
	byHash := make(map[[32]byte]*Principal, len(r.keys)+8)
	if r.policy != nil {
		for _, k := range r.policy.DeclaredKeys() {
			team, ok := r.team(k.Team)
			p := &Principal{
				KeyID: k.ID, KeyName: k.Name, KeyPrefix: k.Prefix,
				Team: k.Team, Org: team.Org, TeamMissing: !ok,
				KeyModels: k.Models, TeamModels: team.Models,
				KeyLimits: k.Limits, TeamLimits: team.Limits, OrgLimits: r.orgLimits(team.Org),
				ExpiresAt: k.ExpiresAt,
			}
			publish(byHash, k.Hash, p)
		}
	}
	for _, k := range r.keys {
		if _, dup := byHash[k.Hash]; dup {
			r.log.Warn("a stored key has the same hash as a key declared in the config; the config's wins", "key_id", k.ID)
			continue
		}
		models, err := policies.NewModelSet(k.Models)
		if err != nil {
			r.log.Error("stored key has an invalid model allow-list; the key is disabled", "key_id", k.ID, "err", err)
			continue
		}
		team, ok := r.team(k.Team)
		p := &Principal{
			KeyID: k.ID, KeyName: k.Name, KeyPrefix: k.Prefix,
			Team: k.Team, Org: team.Org, TeamMissing: !ok,
			KeyModels: models, TeamModels: team.Models,
			KeyLimits: k.Limits, TeamLimits: team.Limits, OrgLimits: r.orgLimits(team.Org),
			ExpiresAt: k.ExpiresAt, RevokedAt: k.RevokedAt,
		}
		publish(byHash, k.Hash, p)
	}
	byID := make(map[string]*Principal, len(byHash))
	for _, p := range byHash {
		byID[p.KeyID] = p
	}
	r.view.Store(&view{byHash: byHash, byID: byID})
}

// publish completes p's derived fields and adds it to the view.
func publish(byHash map[[32]byte]*Principal, h [32]byte, p *Principal) {
	p.Requests = requestDemands(p)
	p.metadata = encodeMetadata(p)
	byHash[h] = p
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

var windows = [...]struct {
	name   string
	period time.Duration
	get    func(policies.RateLimits) int64
}{
	{"1m", time.Minute, func(l policies.RateLimits) int64 { return l.PerMinute }},
	{"1h", time.Hour, func(l policies.RateLimits) int64 { return l.PerHour }},
	{"1d", 24 * time.Hour, func(l policies.RateLimits) int64 { return l.PerDay }},
}

// requestDemands turns the key's and the team's request limits into
// demands. Counter keys are "key/<id>/requests/<window>" and
// "team/<name>/requests/<window>"; Describe turns them back into words.
func requestDemands(p *Principal) []limits.Demand {
	var ds []limits.Demand
	for _, w := range windows {
		if n := w.get(p.KeyLimits.Requests); n > 0 {
			ds = append(ds, limits.Demand{Key: "key/" + p.KeyID + "/requests/" + w.name, Period: w.period, Limit: n, Amount: 1})
		}
	}
	for _, w := range windows {
		if n := w.get(p.TeamLimits.Requests); n > 0 {
			ds = append(ds, limits.Demand{Key: "team/" + p.Team + "/requests/" + w.name, Period: w.period, Limit: n, Amount: 1})
		}
	}
	return ds
}

package store

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/sluicegw/sluice/policies"
)

// Sentinel errors every backend returns (wrapped is fine; test with errors.Is).
var (
	// ErrNotFound: no record with that id or name.
	ErrNotFound = errors.New("not found")
	// ErrExists: a record with that id, name or hash already exists.
	ErrExists = errors.New("already exists")
)

// LatestTime is the latest whole second every backend stores exactly
// (2262-04-11T23:47:16Z: the last second of Unix nanoseconds in an int64,
// SQLite's encoding). Writers refuse a later time as the caller's error, at
// the field that holds it, before it reaches a backend, which would refuse
// it as its own failure.
func LatestTime() time.Time { return time.Unix(0, math.MaxInt64).UTC().Truncate(time.Second) }

// Key is an API key managed at runtime. The secret is never stored: only its
// SHA-256 hash and its public prefix.
type Key struct {
	ID     string   // "key_" + random base62, stable, safe to log
	Prefix string   // public prefix of the secret, safe to log
	Hash   [32]byte // SHA-256 of the whole secret
	Team   string
	Name   string
	// Models is the key's own allow-list (patterns); empty means the team's.
	Models    []string
	Limits    policies.Limits
	CreatedAt time.Time
	ExpiresAt time.Time // zero: never expires
	RevokedAt time.Time // zero: not revoked
	// Rev is the store revision of the key's last change (set by the store).
	Rev int64
}

// Revoked reports whether the key has been revoked.
func (k Key) Revoked() bool { return !k.RevokedAt.IsZero() }

// Expired reports whether the key has expired at now.
func (k Key) Expired(now time.Time) bool { return !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt) }

// Team is a team managed at runtime (teams can also be declared in config).
type Team struct {
	Name   string
	Org    string
	Models []string
	Limits policies.Limits
	Rev    int64
}

// Org is an org managed at runtime. Its limits cover every key of every
// team of the org, together (an org declared in the config uses the
// config's).
type Org struct {
	Name   string
	Limits policies.Limits
	Rev    int64
}

// Changes is every record whose revision is greater than the one asked for,
// and the store revision they bring the reader up to.
type Changes struct {
	Keys  []Key
	Teams []Team
	Orgs  []Org
	// Rev is the highest revision included; pass it to the next Changes
	// call. It never goes backwards.
	Rev int64
}

// Store is the contract every key-store backend satisfies (store/sqlite now,
// PostgreSQL later). Every write assigns the changed record a new,
// store-wide, strictly increasing revision, which is what Changes follows:
// that is how a running server learns of a key revoked by another process.
type Store interface {
	// CreateKey inserts k. ErrExists if its ID or Hash is taken. CreatedAt
	// is kept as given; Rev is assigned.
	CreateKey(ctx context.Context, k Key) error
	// CreateKeys inserts keys in one transaction, every key or none, each
	// with its own next revision in slice order, as CreateKey one by one
	// would: an import of many keys, where a transaction per key would
	// take minutes. ErrExists if an ID or Hash is taken, by a stored key or
	// by another of keys; then nothing is written. No keys: no write.
	CreateKeys(ctx context.Context, keys []Key) error
	// ReplaceKeys replaces the Prefix, Team, Name, Models, Limits and
	// ExpiresAt of each key stored with the ID of one of keys, in one
	// transaction, every key or none, each with its own next revision in
	// slice order; its Hash, CreatedAt and RevokedAt are kept (a revoked
	// key stays revoked). ErrNotFound if an ID is unknown; then nothing is
	// written. No keys: no write.
	ReplaceKeys(ctx context.Context, keys []Key) error
	// RevokeKey marks the key revoked at `at` and returns it. Revoking a
	// revoked key keeps the first revocation time and succeeds.
	// ErrNotFound if there is no such key.
	RevokeKey(ctx context.Context, id string, at time.Time) (Key, error)
	// ListKeys returns every key, revoked ones included, ordered by
	// creation time then ID.
	ListKeys(ctx context.Context) ([]Key, error)
	// SetKeyLimits replaces the key's limits and returns the key. It
	// assigns a new Rev even when the limits are unchanged (a revoked
	// key's too), so followers always see the write. ErrNotFound if there
	// is no such key.
	SetKeyLimits(ctx context.Context, id string, l policies.Limits) (Key, error)
	// PutTeam creates or replaces a team.
	PutTeam(ctx context.Context, t Team) error
	// PutOrg creates or replaces an org.
	PutOrg(ctx context.Context, o Org) error
	// Changes returns every key, team and org changed after revision
	// `since` (0: everything). Records are returned in their latest state.
	Changes(ctx context.Context, since int64) (Changes, error)
	// Close releases the store.
	Close() error
}

// KeyStreamer is what a backend may offer besides Store for the first,
// full read: Changes(ctx, 0) with the keys handed over one at a time
// instead of returned together, so that a reader building its own index of
// a million keys never holds them all as Keys as well.
type KeyStreamer interface {
	// EachKey reads what Changes(ctx, 0) returns, from one snapshot. It
	// calls size once, before any key, with the number of keys to come
	// (size may be nil), then fn once per key. It returns the teams, the orgs and the Rev that
	// Changes(ctx, 0) returns, with Keys nil. If fn fails, EachKey stops
	// and returns fn's error, wrapped. fn may keep the Key it is given,
	// with its strings and slices, but must not modify its slices: a
	// backend may share them between keys.
	EachKey(ctx context.Context, size func(n int), fn func(Key) error) (Changes, error)
}

// CollectKeys is Changes made from a read that hands keys over one at a
// time (the shape of KeyStreamer.EachKey): the keys gathered into a slice
// of the size the read announces, set as the result's Keys.
func CollectKeys(read func(size func(n int), fn func(Key) error) (Changes, error)) (Changes, error) {
	var keys []Key
	c, err := read(func(n int) {
		if n > 0 {
			keys = make([]Key, 0, n)
		}
	}, func(k Key) error {
		keys = append(keys, k)
		return nil
	})
	if err != nil {
		return Changes{}, err
	}
	c.Keys = keys
	return c, nil
}

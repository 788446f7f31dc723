package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/policies"
)

const keyColumns = `id, prefix, hash, team, name, models, limits, created_at, expires_at, revoked_at, rev`

// CreateKey inserts k with the next revision. ErrExists if its ID or Hash
// is taken.
func (s *Store) CreateKey(ctx context.Context, k store.Key) error {
	if err := s.createKeys(ctx, []store.Key{k}); err != nil {
		return fmt.Errorf("postgres: create key %s: %w", k.ID, err)
	}
	return nil
}

// CreateKeys inserts keys in one transaction, each with its own next
// revision in slice order, by COPY: 100,000 keys take about a second
// where an INSERT each would take a round trip each. Either every key is
// inserted or none is.
func (s *Store) CreateKeys(ctx context.Context, keys []store.Key) error {
	if err := s.createKeys(ctx, keys); err != nil {
		return fmt.Errorf("postgres: create keys: %w", err)
	}
	return nil
}

func (s *Store) createKeys(ctx context.Context, keys []store.Key) error {
	rows, err := encodeKeys(keys)
	if err != nil || len(keys) == 0 {
		return err
	}
	return s.write(ctx, len(keys), func(tx pgx.Tx, first int64) error {
		if len(keys) == 1 {
			// One round trip rather than COPY's three.
			k, r := &keys[0], &rows[0]
			_, err := tx.Exec(ctx, `INSERT INTO store_keys (`+keyColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
				k.ID, k.Prefix, k.Hash[:], k.Team, k.Name, r.models, r.limits, r.created, r.expires, r.revoked, first)
			return taken(err)
		}
		src := pgx.CopyFromSlice(len(keys), func(i int) ([]any, error) {
			k, r := &keys[i], &rows[i]
			return []any{k.ID, k.Prefix, k.Hash[:], k.Team, k.Name, r.models, r.limits,
				r.created, r.expires, r.revoked, first + int64(i)}, nil
		})
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"store_keys"}, []string{"id", "prefix", "hash", "team", "name",
			"models", "limits", "created_at", "expires_at", "revoked_at", "rev"}, src)
		return taken(err)
	})
}

// ReplaceKeys replaces the prefix, team, name, allow-list, limits and
// expiry of each key with its ID, in one transaction, each with its own
// next revision; the hash and the creation and revocation times are kept.
// The updates go in one pipelined batch. Either every key is replaced or
// none is; ErrNotFound names the first unknown ID.
func (s *Store) ReplaceKeys(ctx context.Context, keys []store.Key) error {
	rows, err := encodeKeys(keys)
	if err == nil && len(keys) > 0 {
		err = s.write(ctx, len(keys), func(tx pgx.Tx, first int64) error {
			var b pgx.Batch
			for i := range keys {
				k, r := &keys[i], &rows[i]
				b.Queue(`UPDATE store_keys SET prefix = $1, team = $2, name = $3, models = $4, limits = $5,
					expires_at = $6, rev = $7 WHERE id = $8`,
					k.Prefix, k.Team, k.Name, r.models, r.limits, r.expires, first+int64(i), k.ID)
			}
			br := tx.SendBatch(ctx, &b)
			for i := range keys {
				ct, err := br.Exec()
				if err == nil && ct.RowsAffected() == 0 {
					err = store.ErrNotFound
				}
				if err != nil {
					return errors.Join(fmt.Errorf("key %s: %w", keys[i].ID, err), br.Close())
				}
			}
			return br.Close()
		})
	}
	if err != nil {
		return fmt.Errorf("postgres: replace keys: %w", err)
	}
	return nil
}

// RevokeKey marks the key revoked at `at` with the next revision and
// returns it. A key already revoked is returned unchanged and no revision
// is taken.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) (store.Key, error) {
	k, err := s.revokeKey(ctx, id, at)
	if err != nil {
		return store.Key{}, fmt.Errorf("postgres: revoke key %s: %w", id, err)
	}
	return k, nil
}

func (s *Store) revokeKey(ctx context.Context, id string, at time.Time) (store.Key, error) {
	if at.IsZero() {
		return store.Key{}, errors.New("zero revocation time")
	}
	revoked, err := nanos("revoked_at", at)
	if err != nil {
		return store.Key{}, err
	}
	var k store.Key
	err = s.write(ctx, 1, func(tx pgx.Tx, rev int64) error {
		var err error
		k, err = scanKey(tx.QueryRow(ctx, `SELECT `+keyColumns+` FROM store_keys WHERE id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil {
			return err
		}
		if k.Revoked() {
			return errUnchanged
		}
		if _, err := tx.Exec(ctx, `UPDATE store_keys SET revoked_at = $1, rev = $2 WHERE id = $3`, revoked, rev, id); err != nil {
			return err
		}
		k.RevokedAt, k.Rev = utc(revoked), rev
		return nil
	})
	if err != nil {
		return store.Key{}, err
	}
	return k, nil
}

// SetKeyLimits replaces the key's limits with the next revision and
// returns the key.
func (s *Store) SetKeyLimits(ctx context.Context, id string, l policies.Limits) (store.Key, error) {
	k, err := s.setKeyLimits(ctx, id, l)
	if err != nil {
		return store.Key{}, fmt.Errorf("postgres: set limits of key %s: %w", id, err)
	}
	return k, nil
}

func (s *Store) setKeyLimits(ctx context.Context, id string, l policies.Limits) (store.Key, error) {
	limits, err := encodeLimits(l)
	if err != nil {
		return store.Key{}, err
	}
	var k store.Key
	err = s.write(ctx, 1, func(tx pgx.Tx, rev int64) error {
		var err error
		k, err = scanKey(tx.QueryRow(ctx, `UPDATE store_keys SET limits = $1, rev = $2 WHERE id = $3 RETURNING `+keyColumns, limits, rev, id))
		if errors.Is(err, pgx.ErrNoRows) {
			// Rolled back with the revision it took.
			return store.ErrNotFound
		}
		return err
	})
	if err != nil {
		return store.Key{}, err
	}
	return k, nil
}

// ListKeys returns every key, revoked ones included, ordered by creation
// time then ID.
func (s *Store) ListKeys(ctx context.Context) ([]store.Key, error) {
	var keys []store.Key
	err := s.read(ctx, func(tx pgx.Tx) error {
		return eachKey(ctx, tx, `SELECT count(*) FROM store_keys`, `SELECT `+keyColumns+` FROM store_keys ORDER BY created_at, id`, nil,
			func(n int) { keys = make([]store.Key, 0, n) },
			func(k store.Key) error { keys = append(keys, k); return nil })
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list keys: %w", err)
	}
	return keys, nil
}

// PutTeam creates or replaces a team, with the next revision.
func (s *Store) PutTeam(ctx context.Context, t store.Team) error {
	if err := s.putTeam(ctx, t); err != nil {
		return fmt.Errorf("postgres: put team %s: %w", t.Name, err)
	}
	return nil
}

func (s *Store) putTeam(ctx context.Context, t store.Team) error {
	if t.Name == "" {
		return errors.New("empty name")
	}
	models, err := encodeModels(t.Models)
	if err != nil {
		return err
	}
	limits, err := encodeLimits(t.Limits)
	if err != nil {
		return err
	}
	return s.write(ctx, 1, func(tx pgx.Tx, rev int64) error {
		_, err := tx.Exec(ctx, `INSERT INTO store_teams (name, org, models, limits, rev) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (name) DO UPDATE SET
				org = excluded.org, models = excluded.models,
				limits = excluded.limits, rev = excluded.rev`,
			t.Name, t.Org, models, limits, rev)
		return err
	})
}

// PutOrg creates or replaces an org, with the next revision.
func (s *Store) PutOrg(ctx context.Context, o store.Org) error {
	if err := s.putOrg(ctx, o); err != nil {
		return fmt.Errorf("postgres: put org %s: %w", o.Name, err)
	}
	return nil
}

func (s *Store) putOrg(ctx context.Context, o store.Org) error {
	if o.Name == "" {
		return errors.New("empty name")
	}
	limits, err := encodeLimits(o.Limits)
	if err != nil {
		return err
	}
	return s.write(ctx, 1, func(tx pgx.Tx, rev int64) error {
		_, err := tx.Exec(ctx, `INSERT INTO store_orgs (name, limits, rev) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET limits = excluded.limits, rev = excluded.rev`, o.Name, limits, rev)
		return err
	})
}

// Changes returns every key, team and org whose revision is greater than
// since, each kind in revision order. When nothing changed it costs one
// read of the revision counter.
func (s *Store) Changes(ctx context.Context, since int64) (store.Changes, error) {
	c, err := store.CollectKeys(func(size func(int), fn func(store.Key) error) (store.Changes, error) {
		return s.changes(ctx, since, size, fn)
	})
	if err != nil {
		return store.Changes{}, fmt.Errorf("postgres: changes since %d: %w", since, err)
	}
	return c, nil
}

// EachKey is Changes(ctx, 0) with the keys handed to fn one by one, in
// revision order, as they are read: no slice of them is made.
func (s *Store) EachKey(ctx context.Context, size func(n int), fn func(store.Key) error) (store.Changes, error) {
	c, err := s.changes(ctx, 0, size, fn)
	if err != nil {
		return store.Changes{}, fmt.Errorf("postgres: read every key: %w", err)
	}
	return c, nil
}

// changes reads every record whose revision is greater than since: the
// keys through size and fn, the teams and orgs into the result.
func (s *Store) changes(ctx context.Context, since int64, size func(int), fn func(store.Key) error) (store.Changes, error) {
	if err := ctx.Err(); err != nil {
		return store.Changes{}, err
	}
	var cur int64
	if err := s.pool.QueryRow(ctx, `SELECT rev FROM store_revision WHERE id = 1`).Scan(&cur); err != nil {
		return store.Changes{}, err
	}
	if cur <= since {
		if size != nil {
			size(0)
		}
		return store.Changes{Rev: since}, nil
	}
	// One snapshot for the three kinds: otherwise a write between two
	// queries could be reported by its revision without its record.
	c := store.Changes{Rev: since}
	err := s.read(ctx, func(tx pgx.Tx) error {
		err := eachKey(ctx, tx, `SELECT count(*) FROM store_keys WHERE rev > $1`,
			`SELECT `+keyColumns+` FROM store_keys WHERE rev > $1 ORDER BY rev`, []any{since}, size, func(k store.Key) error {
				c.Rev = max(c.Rev, k.Rev)
				return fn(k)
			})
		if err != nil {
			return err
		}
		if c.Teams, err = queryTeams(ctx, tx, since); err != nil {
			return err
		}
		c.Orgs, err = queryOrgs(ctx, tx, since)
		return err
	})
	if err != nil {
		return store.Changes{}, err
	}
	for _, t := range c.Teams {
		c.Rev = max(c.Rev, t.Rev)
	}
	for _, o := range c.Orgs {
		c.Rev = max(c.Rev, o.Rev)
	}
	return c, nil
}

// eachKey runs countQuery and passes its count to size (unless size is
// nil), then runs query, with the same args, and passes each row to fn as
// it is read, through one decoder that shares what repeats from row to
// row. It stops at fn's first error.
func eachKey(ctx context.Context, tx pgx.Tx, countQuery, query string, args []any, size func(int), fn func(store.Key) error) error {
	if size != nil {
		var n int
		if err := tx.QueryRow(ctx, countQuery, args...).Scan(&n); err != nil {
			return err
		}
		size(n)
	}
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	var d keyDecoder
	for rows.Next() {
		k, err := d.scan(rows)
		if err != nil {
			return err
		}
		if err := fn(k); err != nil {
			return err
		}
	}
	return rows.Err()
}

func queryTeams(ctx context.Context, tx pgx.Tx, since int64) ([]store.Team, error) {
	rows, err := tx.Query(ctx, `SELECT name, org, models, limits, rev FROM store_teams WHERE rev > $1 ORDER BY rev`, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var teams []store.Team
	for rows.Next() {
		var (
			t              store.Team
			models, limits []byte
		)
		if err := rows.Scan(&t.Name, &t.Org, &models, &limits, &t.Rev); err != nil {
			return nil, err
		}
		if t.Models, err = decodeModels(models); err != nil {
			return nil, fmt.Errorf("team %s: %w", t.Name, err)
		}
		if t.Limits, err = decodeLimits(limits); err != nil {
			return nil, fmt.Errorf("team %s: %w", t.Name, err)
		}
		teams = append(teams, t)
	}
	return teams, rows.Err()
}

func queryOrgs(ctx context.Context, tx pgx.Tx, since int64) ([]store.Org, error) {
	rows, err := tx.Query(ctx, `SELECT name, limits, rev FROM store_orgs WHERE rev > $1 ORDER BY rev`, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var orgs []store.Org
	for rows.Next() {
		var (
			o      store.Org
			limits []byte
		)
		if err := rows.Scan(&o.Name, &limits, &o.Rev); err != nil {
			return nil, err
		}
		if o.Limits, err = decodeLimits(limits); err != nil {
			return nil, fmt.Errorf("org %s: %w", o.Name, err)
		}
		orgs = append(orgs, o)
	}
	return orgs, rows.Err()
}

// scanKey reads one row of keyColumns.
func scanKey(row pgx.Row) (store.Key, error) {
	var d keyDecoder
	return d.scan(row)
}

// keyDecoder reads rows of keyColumns. Over many rows it shares what
// repeats: team names, allow-lists and limits equal to ones already
// decoded (records are never modified, so sharing is safe), so that a
// million keys of a few hundred teams hold a few hundred team names.
type keyDecoder struct {
	id, prefix, name, team    string
	hash, models, limits      []byte
	created, expires, revoked int64
	rev                       int64
	dest                      []any
	teams                     map[string]string
	modelSets                 map[string][]string
	limitSets                 map[string]policies.Limits
}

// maxShared bounds each of a keyDecoder's maps: past it, values are
// decoded row by row.
const maxShared = 4096

func (d *keyDecoder) scan(row pgx.Row) (store.Key, error) {
	if d.dest == nil {
		d.dest = []any{&d.id, &d.prefix, &d.hash, &d.team, &d.name, &d.models, &d.limits,
			&d.created, &d.expires, &d.revoked, &d.rev}
		d.teams, d.modelSets, d.limitSets = map[string]string{}, map[string][]string{}, map[string]policies.Limits{}
	}
	if err := row.Scan(d.dest...); err != nil {
		return store.Key{}, err
	}
	k := store.Key{ID: d.id, Prefix: d.prefix, Name: d.name, Rev: d.rev}
	if len(d.hash) != len(k.Hash) {
		return store.Key{}, fmt.Errorf("key %s: hash is %d bytes, want %d", k.ID, len(d.hash), len(k.Hash))
	}
	copy(k.Hash[:], d.hash)
	var ok bool
	if k.Team, ok = d.teams[d.team]; !ok {
		k.Team = d.team
		if len(d.teams) < maxShared {
			d.teams[k.Team] = k.Team
		}
	}
	var err error
	if k.Models, ok = d.modelSets[string(d.models)]; !ok {
		if k.Models, err = decodeModels(d.models); err != nil {
			return store.Key{}, fmt.Errorf("key %s: %w", k.ID, err)
		}
		if len(d.modelSets) < maxShared {
			d.modelSets[string(d.models)] = k.Models
		}
	}
	if k.Limits, ok = d.limitSets[string(d.limits)]; !ok {
		if k.Limits, err = decodeLimits(d.limits); err != nil {
			return store.Key{}, fmt.Errorf("key %s: %w", k.ID, err)
		}
		if len(d.limitSets) < maxShared {
			d.limitSets[string(d.limits)] = k.Limits
		}
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt = utc(d.created), utc(d.expires), utc(d.revoked)
	return k, nil
}

// keyRow is a key's columns that need encoding.
type keyRow struct {
	models, limits            string
	created, expires, revoked int64
}

// encodeKeys encodes every key's columns before a transaction starts, so
// that a key that cannot be stored is refused without writing any.
func encodeKeys(keys []store.Key) ([]keyRow, error) {
	rows := make([]keyRow, len(keys))
	for i, k := range keys {
		if k.ID == "" {
			return nil, fmt.Errorf("keys[%d]: empty id", i)
		}
		r := &rows[i]
		var err error
		if r.models, err = encodeModels(k.Models); err == nil {
			if r.limits, err = encodeLimits(k.Limits); err == nil {
				if r.created, err = nanos("created_at", k.CreatedAt); err == nil {
					if r.expires, err = nanos("expires_at", k.ExpiresAt); err == nil {
						r.revoked, err = nanos("revoked_at", k.RevokedAt)
					}
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("key %s: %w", k.ID, err)
		}
	}
	return rows, nil
}

// encodeModels stores an allow-list as a JSON array; nil and empty are
// both [] and both read back as nil. JSON goes to PostgreSQL as text:
// a []byte argument is bytea to a driver that does not ask the server for
// the parameter's type first (pgx's exec and simple protocol modes,
// which PgBouncer's transaction pooling needs), and not JSON.
func encodeModels(m []string) (string, error) {
	if len(m) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("encode models: %w", err)
	}
	return string(b), nil
}

func decodeModels(b []byte) ([]string, error) {
	var m []string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode models: %w", err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

func encodeLimits(l policies.Limits) (string, error) {
	b, err := json.Marshal(l)
	if err != nil {
		return "", fmt.Errorf("encode limits: %w", err)
	}
	return string(b), nil
}

func decodeLimits(b []byte) (policies.Limits, error) {
	var l policies.Limits
	if err := json.Unmarshal(b, &l); err != nil {
		return policies.Limits{}, fmt.Errorf("decode limits: %w", err)
	}
	return l, nil
}

// nanos is t as Unix nanoseconds, 0 for the zero time. A time that Unix
// nanoseconds cannot hold exactly (before 1678, after 2262, or the epoch
// itself, whose 0 means unset) is refused rather than silently altered,
// as store/sqlite refuses it.
func nanos(field string, t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, nil
	}
	n := t.UnixNano()
	if n == 0 || !time.Unix(0, n).Equal(t) {
		return 0, fmt.Errorf("%s: %s cannot be stored (Unix nanoseconds, 1678 to 2262, not the epoch)", field, t.Format(time.RFC3339Nano))
	}
	return n, nil
}

// utc is the inverse of nanos.
func utc(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

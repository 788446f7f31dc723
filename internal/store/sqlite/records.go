package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/policies"
)

const keyColumns = `id, prefix, hash, team, name, models, limits, created_at, expires_at, revoked_at, rev`

// CreateKey inserts k with the next revision. ErrExists if its ID or Hash
// is taken.
func (s *Store) CreateKey(ctx context.Context, k store.Key) error {
	if err := s.createKey(ctx, k); err != nil {
		return fmt.Errorf("sqlite: create key %s: %w", k.ID, err)
	}
	return nil
}

func (s *Store) createKey(ctx context.Context, k store.Key) error {
	if k.ID == "" {
		return errors.New("empty id")
	}
	models, err := encodeModels(k.Models)
	if err != nil {
		return err
	}
	limits, err := encodeLimits(k.Limits)
	if err != nil {
		return err
	}
	created, err := nanos("created_at", k.CreatedAt)
	if err != nil {
		return err
	}
	expires, err := nanos("expires_at", k.ExpiresAt)
	if err != nil {
		return err
	}
	revoked, err := nanos("revoked_at", k.RevokedAt)
	if err != nil {
		return err
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		rev, err := nextRev(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO keys (`+keyColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			k.ID, k.Prefix, k.Hash[:], k.Team, k.Name, models, limits,
			created, expires, revoked, rev)
		switch sqliteCode(err) {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("id taken: %w", store.ErrExists)
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return fmt.Errorf("hash taken: %w", store.ErrExists)
		}
		return err
	})
}

// RevokeKey marks the key revoked at `at` with the next revision and
// returns it. A key already revoked is returned unchanged and the
// revision is not bumped.
func (s *Store) RevokeKey(ctx context.Context, id string, at time.Time) (store.Key, error) {
	k, err := s.revokeKey(ctx, id, at)
	if err != nil {
		return store.Key{}, fmt.Errorf("sqlite: revoke key %s: %w", id, err)
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
	err = s.write(ctx, func(tx *sql.Tx) error {
		row := tx.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM keys WHERE id = ?`, id)
		var err error
		k, err = scanKey(row)
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrNotFound
		}
		if err != nil || k.Revoked() {
			return err
		}
		rev, err := nextRev(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE keys SET revoked_at = ?, rev = ? WHERE id = ?`, revoked, rev, id); err != nil {
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
		return store.Key{}, fmt.Errorf("sqlite: set limits of key %s: %w", id, err)
	}
	return k, nil
}

func (s *Store) setKeyLimits(ctx context.Context, id string, l policies.Limits) (store.Key, error) {
	limits, err := encodeLimits(l)
	if err != nil {
		return store.Key{}, err
	}
	var k store.Key
	err = s.write(ctx, func(tx *sql.Tx) error {
		rev, err := nextRev(ctx, tx)
		if err != nil {
			return err
		}
		row := tx.QueryRowContext(ctx, `UPDATE keys SET limits = ?, rev = ? WHERE id = ? RETURNING `+keyColumns, limits, rev, id)
		k, err = scanKey(row)
		if errors.Is(err, sql.ErrNoRows) {
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
	keys, err := queryKeys(ctx, s.db, "", `SELECT `+keyColumns+` FROM keys ORDER BY created_at, id`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list keys: %w", err)
	}
	return keys, nil
}

// PutTeam creates or replaces a team, with the next revision.
func (s *Store) PutTeam(ctx context.Context, t store.Team) error {
	if err := s.putTeam(ctx, t); err != nil {
		return fmt.Errorf("sqlite: put team %s: %w", t.Name, err)
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
	return s.write(ctx, func(tx *sql.Tx) error {
		rev, err := nextRev(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO teams (name, org, models, limits, rev)
			VALUES (?, ?, ?, ?, ?)
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
		return fmt.Errorf("sqlite: put org %s: %w", o.Name, err)
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
	return s.write(ctx, func(tx *sql.Tx) error {
		rev, err := nextRev(ctx, tx)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO orgs (name, limits, rev) VALUES (?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET limits = excluded.limits, rev = excluded.rev`, o.Name, limits, rev)
		return err
	})
}

// Changes returns every key, team and org whose revision is greater than
// since, each kind in revision order. When nothing changed it costs one
// read of the revision counter.
func (s *Store) Changes(ctx context.Context, since int64) (store.Changes, error) {
	c, err := s.changes(ctx, since)
	if err != nil {
		return store.Changes{}, fmt.Errorf("sqlite: changes since %d: %w", since, err)
	}
	return c, nil
}

func (s *Store) changes(ctx context.Context, since int64) (store.Changes, error) {
	var cur int64
	if err := s.pollRev.QueryRowContext(ctx).Scan(&cur); err != nil {
		return store.Changes{}, err
	}
	if cur <= since {
		return store.Changes{Rev: since}, nil
	}
	// One read transaction, so that the three kinds come from one
	// snapshot: otherwise a write between two queries could be reported
	// by its revision without its record.
	c := store.Changes{Rev: since}
	err := inTx(ctx, s.db, &sql.TxOptions{ReadOnly: true}, func(tx *sql.Tx) error {
		var err error
		if c.Keys, err = queryKeys(ctx, tx, `SELECT count(*) FROM keys WHERE rev > ?`,
			`SELECT `+keyColumns+` FROM keys WHERE rev > ? ORDER BY rev`, since); err != nil {
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
	for _, k := range c.Keys {
		c.Rev = max(c.Rev, k.Rev)
	}
	for _, t := range c.Teams {
		c.Rev = max(c.Rev, t.Rev)
	}
	for _, o := range c.Orgs {
		c.Rev = max(c.Rev, o.Rev)
	}
	return c, nil
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryKeys runs query (and countQuery, with the same args, for the slice's
// size: growing a slice of 100,000 keys by doubling copies it many times
// over). Rows are scanned through a decoder that reuses what repeats from
// row to row.
func queryKeys(ctx context.Context, q querier, countQuery, query string, args ...any) ([]store.Key, error) {
	var n int
	if countQuery != "" {
		rows, err := q.QueryContext(ctx, countQuery, args...)
		if err != nil {
			return nil, err
		}
		if rows.Next() {
			err = rows.Scan(&n)
		}
		if err = errors.Join(err, rows.Close()); err != nil {
			return nil, err
		}
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []store.Key
	if n > 0 {
		keys = make([]store.Key, 0, n)
	}
	d := keyDecoder{raw: true}
	for rows.Next() {
		k, err := d.scan(rows)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}

func queryTeams(ctx context.Context, q querier, since int64) ([]store.Team, error) {
	rows, err := q.QueryContext(ctx, `SELECT name, org, models, limits, rev FROM teams WHERE rev > ? ORDER BY rev`, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var teams []store.Team
	for rows.Next() {
		var (
			t              store.Team
			models, limits string
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

func queryOrgs(ctx context.Context, q querier, since int64) ([]store.Org, error) {
	rows, err := q.QueryContext(ctx, `SELECT name, limits, rev FROM orgs WHERE rev > ? ORDER BY rev`, since)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var orgs []store.Org
	for rows.Next() {
		var (
			o      store.Org
			limits string
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

type scanner interface {
	Scan(dest ...any) error
}

// scanKey reads one row of keyColumns.
func scanKey(sc scanner) (store.Key, error) {
	var d keyDecoder
	return d.scan(sc)
}

// keyDecoder reads rows of keyColumns. Over many rows it shares what
// repeats: team names, allow-lists and limits equal to the previous
// ones decoded (records are never modified, so sharing is safe).
type keyDecoder struct {
	// raw scans the byte columns as sql.RawBytes (rows only, not a Row):
	// valid until the next row, they are copied or decoded at once.
	raw    bool
	teams  map[string]string
	models map[string][]string
	limits map[string]policies.Limits
}

// maxShared bounds each of a keyDecoder's maps: past it, values are
// decoded row by row.
const maxShared = 4096

func (d *keyDecoder) scan(sc scanner) (store.Key, error) {
	var (
		k                         store.Key
		team, hash, models, limit []byte
		created, expires, revoked int64
	)
	dest := [4]any{&hash, &team, &models, &limit}
	if d.raw {
		dest = [4]any{(*sql.RawBytes)(&hash), (*sql.RawBytes)(&team), (*sql.RawBytes)(&models), (*sql.RawBytes)(&limit)}
	}
	err := sc.Scan(&k.ID, &k.Prefix, dest[0], dest[1], &k.Name, dest[2], dest[3],
		&created, &expires, &revoked, &k.Rev)
	if err != nil {
		return store.Key{}, err
	}
	if len(hash) != len(k.Hash) {
		return store.Key{}, fmt.Errorf("key %s: hash is %d bytes, want %d", k.ID, len(hash), len(k.Hash))
	}
	copy(k.Hash[:], hash)
	if d.teams == nil {
		d.teams, d.models, d.limits = map[string]string{}, map[string][]string{}, map[string]policies.Limits{}
	}
	var ok bool
	if k.Team, ok = d.teams[string(team)]; !ok {
		k.Team = string(team)
		if len(d.teams) < maxShared {
			d.teams[k.Team] = k.Team
		}
	}
	if k.Models, ok = d.models[string(models)]; !ok {
		if k.Models, err = decodeModels(string(models)); err != nil {
			return store.Key{}, fmt.Errorf("key %s: %w", k.ID, err)
		}
		if len(d.models) < maxShared {
			d.models[string(models)] = k.Models
		}
	}
	if k.Limits, ok = d.limits[string(limit)]; !ok {
		if k.Limits, err = decodeLimits(string(limit)); err != nil {
			return store.Key{}, fmt.Errorf("key %s: %w", k.ID, err)
		}
		if len(d.limits) < maxShared {
			d.limits[string(limit)] = k.Limits
		}
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt = utc(created), utc(expires), utc(revoked)
	return k, nil
}

// encodeModels stores an allow-list as a JSON array; nil and empty are
// both "[]" and both read back as nil.
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

func decodeModels(s string) ([]string, error) {
	var m []string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
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

func decodeLimits(s string) (policies.Limits, error) {
	var l policies.Limits
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return policies.Limits{}, fmt.Errorf("decode limits: %w", err)
	}
	return l, nil
}

// nanos is t as Unix nanoseconds, 0 for the zero time. A time that Unix
// nanoseconds cannot hold exactly (before 1678, after 2262, or the epoch
// itself, whose 0 means unset) is refused rather than silently altered.
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

// CreateKeys inserts keys in one transaction, each with its own next
// revision, as CreateKey would one by one: for imports and benchmarks,
// where a transaction (and an fsync) per key would take minutes. Either
// every key is inserted or none is; ErrExists names the first key whose ID
// or hash is taken.
func (s *Store) CreateKeys(ctx context.Context, keys []store.Key) error {
	type row struct {
		models, limits            string
		created, expires, revoked int64
	}
	rows := make([]row, len(keys))
	for i, k := range keys {
		if k.ID == "" {
			return fmt.Errorf("sqlite: create keys: keys[%d]: empty id", i)
		}
		var r row
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
			return fmt.Errorf("sqlite: create keys: key %s: %w", k.ID, err)
		}
		rows[i] = r
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if len(keys) == 0 {
			return nil
		}
		var first int64
		err := tx.QueryRowContext(ctx, `UPDATE revision SET rev = rev + ? WHERE id = 1 RETURNING rev`, len(keys)).Scan(&first)
		if err != nil {
			return fmt.Errorf("next revisions: %w", err)
		}
		first -= int64(len(keys)) - 1
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO keys (`+keyColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i, k := range keys {
			r := rows[i]
			_, err := stmt.ExecContext(ctx, k.ID, k.Prefix, k.Hash[:], k.Team, k.Name, r.models, r.limits,
				r.created, r.expires, r.revoked, first+int64(i))
			switch sqliteCode(err) {
			case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
				return fmt.Errorf("key %s: id taken: %w", k.ID, store.ErrExists)
			case sqlite3.SQLITE_CONSTRAINT_UNIQUE:
				return fmt.Errorf("key %s: hash taken: %w", k.ID, store.ErrExists)
			}
			if err != nil {
				return fmt.Errorf("key %s: %w", k.ID, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: create keys: %w", err)
	}
	return nil
}

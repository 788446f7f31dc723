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

// keyRead reads keyColumns, with an allow-list and limits that hold
// nothing read as NULL: most keys have neither, and a NULL costs the
// driver no allocation where a string costs two.
const keyRead = `id, prefix, hash, team, name, nullif(models, '[]'), nullif(limits, '{"requests":{}}'), created_at, expires_at, revoked_at, rev`

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
		row := tx.QueryRowContext(ctx, `SELECT `+keyRead+` FROM keys WHERE id = ?`, id)
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
		row := tx.QueryRowContext(ctx, `UPDATE keys SET limits = ?, rev = ? WHERE id = ? RETURNING `+keyRead, limits, rev, id)
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
	keys, err := queryKeys(ctx, s.db, "", `SELECT `+keyRead+` FROM keys ORDER BY created_at, id`)
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
	c, err := store.CollectKeys(func(size func(int), fn func(store.Key) error) (store.Changes, error) {
		return s.changes(ctx, since, size, fn)
	})
	if err != nil {
		return store.Changes{}, fmt.Errorf("sqlite: changes since %d: %w", since, err)
	}
	return c, nil
}

// EachKey is Changes(ctx, 0) with the keys handed to fn one by one, in
// revision order, as they are read: no slice of them is made.
func (s *Store) EachKey(ctx context.Context, size func(n int), fn func(store.Key) error) (store.Changes, error) {
	c, err := s.changes(ctx, 0, size, fn)
	if err != nil {
		return store.Changes{}, fmt.Errorf("sqlite: read every key: %w", err)
	}
	return c, nil
}

// changes reads every record whose revision is greater than since: the
// keys through size and fn, the teams and orgs into the result.
func (s *Store) changes(ctx context.Context, since int64, size func(int), fn func(store.Key) error) (store.Changes, error) {
	var cur int64
	if err := s.pollRev.QueryRowContext(ctx).Scan(&cur); err != nil {
		return store.Changes{}, err
	}
	if cur <= since {
		if size != nil {
			size(0)
		}
		return store.Changes{Rev: since}, nil
	}
	// One read transaction, so that the three kinds come from one
	// snapshot: otherwise a write between two queries could be reported
	// by its revision without its record.
	c := store.Changes{Rev: since}
	err := inTx(ctx, s.db, &sql.TxOptions{ReadOnly: true}, func(tx *sql.Tx) error {
		err := eachKey(ctx, tx, `SELECT count(*) FROM keys WHERE rev > ?`,
			`SELECT `+keyRead+` FROM keys WHERE rev > ? ORDER BY rev`, []any{since}, size, func(k store.Key) error {
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

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// queryKeys runs query and returns its keys in a slice sized by
// countQuery (with the same args): growing a slice of 100,000 keys by
// doubling copies it many times over.
func queryKeys(ctx context.Context, q querier, countQuery, query string, args ...any) ([]store.Key, error) {
	var keys []store.Key
	err := eachKey(ctx, q, countQuery, query, args, func(n int) {
		if n > 0 {
			keys = make([]store.Key, 0, n)
		}
	}, func(k store.Key) error {
		keys = append(keys, k)
		return nil
	})
	return keys, err
}

// eachKey runs countQuery (unless empty) and passes its count to size
// (unless nil), then runs query, with the same args, and passes each row
// to fn as it is read, through one decoder that reuses its buffers and
// shares what repeats from row to row. It stops at fn's first error.
func eachKey(ctx context.Context, q querier, countQuery, query string, args []any, size func(int), fn func(store.Key) error) error {
	if countQuery != "" && size != nil {
		var n int
		rows, err := q.QueryContext(ctx, countQuery, args...)
		if err != nil {
			return err
		}
		if rows.Next() {
			err = rows.Scan(&n)
		}
		if err = errors.Join(err, rows.Close()); err != nil {
			return err
		}
		size(n)
	}
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	d := keyDecoder{raw: true}
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

type scanner interface {
	Scan(dest ...any) error
}

// scanKey reads one row of keyRead.
func scanKey(sc scanner) (store.Key, error) {
	var d keyDecoder
	return d.scan(sc)
}

// keyDecoder reads rows of keyRead into buffers it reuses from row to
// row, so that a row costs what the driver allocates and the Key's own
// strings. Over many rows it shares what repeats: team names, allow-lists
// and limits equal to ones already decoded (records are never modified,
// so sharing is safe).
type keyDecoder struct {
	// raw scans the byte columns as sql.RawBytes (rows only, not a Row):
	// valid until the next row, they are copied or decoded at once.
	raw bool
	// The row being read, and the Scan destinations pointing at it.
	id, prefix, name          string
	hash, team, models, limit []byte
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

func (d *keyDecoder) scan(sc scanner) (store.Key, error) {
	if d.dest == nil {
		d.dest = []any{&d.id, &d.prefix, &d.hash, &d.team, &d.name, &d.models, &d.limit,
			&d.created, &d.expires, &d.revoked, &d.rev}
		if d.raw {
			d.dest[2], d.dest[3] = (*sql.RawBytes)(&d.hash), (*sql.RawBytes)(&d.team)
			d.dest[5], d.dest[6] = (*sql.RawBytes)(&d.models), (*sql.RawBytes)(&d.limit)
		}
		d.teams, d.modelSets, d.limitSets = map[string]string{}, map[string][]string{}, map[string]policies.Limits{}
	}
	if err := sc.Scan(d.dest...); err != nil {
		return store.Key{}, err
	}
	k := store.Key{ID: d.id, Prefix: d.prefix, Name: d.name, Rev: d.rev}
	if len(d.hash) != len(k.Hash) {
		return store.Key{}, fmt.Errorf("key %s: hash is %d bytes, want %d", k.ID, len(d.hash), len(k.Hash))
	}
	copy(k.Hash[:], d.hash)
	var (
		ok  bool
		err error
	)
	if k.Team, ok = d.teams[string(d.team)]; !ok {
		k.Team = string(d.team)
		if len(d.teams) < maxShared {
			d.teams[k.Team] = k.Team
		}
	}
	if len(d.models) == 0 {
		// NULL: no allow-list.
	} else if k.Models, ok = d.modelSets[string(d.models)]; !ok {
		if k.Models, err = decodeModels(d.models); err != nil {
			return store.Key{}, fmt.Errorf("key %s: %w", k.ID, err)
		}
		if len(d.modelSets) < maxShared {
			d.modelSets[string(d.models)] = k.Models
		}
	}
	if len(d.limit) == 0 {
		// NULL: no limits.
	} else if k.Limits, ok = d.limitSets[string(d.limit)]; !ok {
		if k.Limits, err = decodeLimits(d.limit); err != nil {
			return store.Key{}, fmt.Errorf("key %s: %w", k.ID, err)
		}
		if len(d.limitSets) < maxShared {
			d.limitSets[string(d.limit)] = k.Limits
		}
	}
	k.CreatedAt, k.ExpiresAt, k.RevokedAt = utc(d.created), utc(d.expires), utc(d.revoked)
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
	rows, err := encodeKeys(keys)
	if err != nil {
		return fmt.Errorf("sqlite: create keys: %w", err)
	}
	err = s.writeBatch(ctx, len(keys), `INSERT INTO keys (`+keyColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, func(stmt *sql.Stmt, i int, rev int64) error {
		k, r := &keys[i], &rows[i]
		_, err := stmt.ExecContext(ctx, k.ID, k.Prefix, k.Hash[:], k.Team, k.Name, r.models, r.limits,
			r.created, r.expires, r.revoked, rev)
		switch sqliteCode(err) {
		case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
			return fmt.Errorf("key %s: id taken: %w", k.ID, store.ErrExists)
		case sqlite3.SQLITE_CONSTRAINT_UNIQUE:
			return fmt.Errorf("key %s: hash taken: %w", k.ID, store.ErrExists)
		}
		if err != nil {
			return fmt.Errorf("key %s: %w", k.ID, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: create keys: %w", err)
	}
	return nil
}

// ReplaceKeys replaces the prefix, team, name, allow-list, limits and
// expiry of each key with its ID, in one transaction, each with its own
// next revision; the hash and the creation and revocation times are kept.
// Either every key is replaced or none is; ErrNotFound names the first
// unknown ID.
func (s *Store) ReplaceKeys(ctx context.Context, keys []store.Key) error {
	rows, err := encodeKeys(keys)
	if err != nil {
		return fmt.Errorf("sqlite: replace keys: %w", err)
	}
	err = s.writeBatch(ctx, len(keys), `UPDATE keys SET prefix = ?, team = ?, name = ?, models = ?, limits = ?,
			expires_at = ?, rev = ? WHERE id = ?`, func(stmt *sql.Stmt, i int, rev int64) error {
		k, r := &keys[i], &rows[i]
		res, err := stmt.ExecContext(ctx, k.Prefix, k.Team, k.Name, r.models, r.limits, r.expires, rev, k.ID)
		if err != nil {
			return fmt.Errorf("key %s: %w", k.ID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("key %s: %w", k.ID, err)
		}
		if n == 0 {
			return fmt.Errorf("key %s: %w", k.ID, store.ErrNotFound)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: replace keys: %w", err)
	}
	return nil
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
		var r keyRow
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
		rows[i] = r
	}
	return rows, nil
}

// writeBatch takes n revisions at once and runs query, prepared once, for
// each of n records through exec, in one write transaction with a page
// cache of up to 64 MiB: exec(stmt, i, rev) writes record i with revision
// rev. An error from exec rolls back every record and the revisions
// taken.
func (s *Store) writeBatch(ctx context.Context, n int, query string, exec func(stmt *sql.Stmt, i int, rev int64) error) error {
	if n == 0 {
		return nil
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		var first int64
		err := tx.QueryRowContext(ctx, `UPDATE revision SET rev = rev + ? WHERE id = 1 RETURNING rev`, n).Scan(&first)
		if err != nil {
			return fmt.Errorf("next revisions: %w", err)
		}
		first -= int64(n) - 1
		// A batch touches pages all over the keys' indexes (ids and
		// hashes are random): in the default 2 MB page cache they spill
		// to the WAL while the batch runs, which tripled its system time
		// on 100,000 keys. The connection's own size is put back after.
		var cache int64
		if err := tx.QueryRowContext(ctx, `PRAGMA cache_size`).Scan(&cache); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `PRAGMA cache_size = -65536`); err != nil {
			return err
		}
		stmt, err := tx.PrepareContext(ctx, query)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i := range n {
			if err := exec(stmt, i, first+int64(i)); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA cache_size = %d`, cache))
		return err
	})
}

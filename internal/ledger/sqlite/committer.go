package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sluicegw/sluice/internal/ledger"
)

// The committer's connection is set up for writing: a page cache of
// committerCacheKiB (SQLite's default is 2 MiB) and a WAL checkpoint once
// the WAL holds committerCheckpoint pages (SQLite's default is 1,000),
// both undone when the connection goes back to the pool. BenchmarkIngest,
// records spread over 1,000 keys, in a ledger of a million rows: a
// transaction of 1,024 records changes some 2,000 pages (the last page of
// every key's range in spend_key, and of every key's aggregate rows), so
// the default cache spilled dirty pages into the WAL before the commit
// (and wrote them again at the commit) and read back from the file what
// it had just dropped, and every commit was followed by a checkpoint that
// copied those same pages into the database file again. With 16 MiB the
// working set stays cached (92 → 60 µs a record, at 10,000 pages a
// checkpoint either way; 8 MiB gave 67), and a checkpoint every 10,000
// pages copies a page changed by five commits once (with 1,000: 82 →
// 65). Memory: the cache keeps the pages the connection used until it
// holds 16 MiB, so the process grows by up to 14 MiB more than with the
// default, and until it is full every page the ledger grows by costs a
// new buffer rather than a recycled one (about 2 µs a record on an empty
// ledger with one key, a cost paid once per committer). Disk: the WAL
// file grows to about 40 MiB before it is reused. Durability is untouched
// (synchronous=FULL syncs the WAL at every commit; a checkpoint only moves
// synced pages).
const (
	committerCacheKiB   = 16 << 10
	committerCheckpoint = 10_000
)

// insertRows is how many records one multi-row insert writes. 32 rows
// bind 864 parameters, under 999, the smallest limit (SQLITE_MAX_VARIABLE_NUMBER)
// any SQLite build has had. BenchmarkIngest measured 16, 32 and 64 rows
// within the noise of one another, each 25–30% less CPU per record than
// one statement per record.
const insertRows = 32

// driverConn is what the committer uses of the driver's connection
// (modernc.org/sqlite's has all of it).
type driverConn interface {
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
}

// committer is Run's connection and the statements prepared on it. It
// runs its own BEGIN IMMEDIATE and COMMIT on the connection instead of
// using sql.Tx, because sql.Tx would prepare the statements again for
// every transaction, and it runs each transaction on the driver's
// connection (sql.Conn.Raw) with the driver's statements: database/sql
// checks and converts every argument of every call (27 per record) and
// takes locks around each: skipping it measured 5–20% less CPU per
// record.
type committer struct {
	conn *sql.Conn
	// insert writes one record, insertN insertRows records; addAgg and
	// newAgg write an aggregate row, addLife and newLife a lifetime row.
	// Prepared on the driver's connection, used only within conn.Raw.
	// version reads the schema version (checkVersion).
	insert, insertN, addAgg, newAgg, addLife, newLife, version driver.Stmt
	// dc is the driver's connection while write runs, nil otherwise.
	dc driverConn
	// restore puts the connection's settings back as the pool had them.
	restore []string
	// rows are the current batch's sums per aggregate row, life per
	// lifetime row (bucket 0), and args the arguments of a statement, all
	// reused from batch to batch.
	rows, life map[aggKey]sums
	args       []driver.NamedValue
}

func newCommitter(ctx context.Context, db *sql.DB) (*committer, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	c := &committer{conn: conn, rows: map[aggKey]sums{}, life: map[aggKey]sums{}, args: make([]driver.NamedValue, 0, insertRows*numColumns)}
	for _, p := range []struct {
		name  string
		value int
	}{{"cache_size", -committerCacheKiB}, {"wal_autocheckpoint", committerCheckpoint}} {
		var was int
		if err := conn.QueryRowContext(ctx, "PRAGMA "+p.name).Scan(&was); err != nil {
			return nil, errors.Join(err, c.close())
		}
		// PRAGMA takes no bound parameters; the values are integers.
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA %s = %d", p.name, p.value)); err != nil {
			return nil, errors.Join(err, c.close())
		}
		c.restore = append(c.restore, fmt.Sprintf("PRAGMA %s = %d", p.name, was))
	}
	err = conn.Raw(func(dc any) error {
		d, ok := dc.(driverConn)
		if !ok {
			return fmt.Errorf("the SQLite driver's connection (%T) cannot prepare, execute and query with a context", dc)
		}
		for _, s := range []struct {
			stmt  *driver.Stmt
			query string
		}{{&c.insert, insert}, {&c.insertN, insertOf(insertRows)}, {&c.addAgg, addAgg}, {&c.newAgg, newAgg},
			{&c.addLife, addLife}, {&c.newLife, newLife}, {&c.version, "PRAGMA user_version"}} {
			stmt, err := d.PrepareContext(ctx, s.query)
			if err != nil {
				return err // stmt may be a nil of the driver's type: not kept
			}
			*s.stmt = stmt
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(err, c.close())
	}
	return c, nil
}

// close closes what newCommitter prepared, puts the connection's
// settings back, and gives the connection back to the pool.
func (c *committer) close() error {
	errs := []error{c.conn.Raw(func(any) error {
		var errs []error
		for _, s := range []driver.Stmt{c.insert, c.insertN, c.addAgg, c.newAgg, c.addLife, c.newLife, c.version} {
			if s != nil {
				errs = append(errs, s.Close())
			}
		}
		return errors.Join(errs...)
	})}
	for _, q := range c.restore {
		_, err := c.conn.ExecContext(context.Background(), q)
		errs = append(errs, err)
	}
	return errors.Join(append(errs, c.conn.Close())...)
}

// noRecord is write's bad when no one record is to blame.
const noRecord = -1

// errChunk is what writeTx returns, once it rolled back, when SQLite
// refused a multi-row insert for a constraint: one of its records is to
// blame, and the statement does not say which.
var errChunk = errors.New("a multi-row insert was refused")

// write inserts batch and adds it to the aggregates in one transaction,
// and commits it. The aggregates count only the records the inserts
// stored (a RequestID already in the ledger is skipped, and is not
// counted again), summed per aggregate row first, so a batch costs one
// update (or, for a new row, insert) per row it touches rather than three
// per record. If a record is refused (a constraint), or its sums would
// overflow the batch's, it rolls back and returns the index of that
// record with the error; if anything else fails (BEGIN, an insert, an
// aggregate, COMMIT), it returns noRecord (-1).
//
// The records are inserted insertRows to a statement, the rest one by
// one. When SQLite refuses a multi-row insert for a constraint, write
// rolls back and writes the batch again one record per statement, which
// names the record to blame (TestMultiRowInsertRefusal); that is rare
// (Validate refuses what the table's CHECKs would), so the work done
// twice does not matter.
//
// The records and their aggregates land together or not at all: every
// statement runs in the one transaction, and SQLite's rollback — on an
// error here, or in recovery after a crash before COMMIT's WAL sync —
// undoes them all. TestAggregateFailureWritesNothing and
// TestCrashLosesNothing check both ways.
func (c *committer) Write(ctx context.Context, preps []any) (bad int, err error) {
	batch := make([]*prepared, len(preps))
	for i, p := range preps {
		batch[i] = p.(*prepared)
	}
	bad = noRecord
	rawErr := c.conn.Raw(func(dc any) error {
		c.dc = dc.(driverConn) // newCommitter checked it
		defer func() { c.dc = nil }()
		bad, err = c.writeTx(ctx, batch, insertRows)
		if errors.Is(err, errChunk) {
			bad, err = c.writeTx(ctx, batch, 1)
		}
		return nil
	})
	if rawErr != nil {
		return noRecord, rawErr
	}
	return bad, err
}

// writeTx is write, with up to rows records per insert.
func (c *committer) writeTx(ctx context.Context, batch []*prepared, rows int) (int, error) {
	if _, err := c.dc.ExecContext(ctx, "BEGIN IMMEDIATE", nil); err != nil {
		return noRecord, errors.Join(fmt.Errorf("begin: %w", err), c.rollback(ctx))
	}
	if err := c.checkVersion(ctx); err != nil {
		return noRecord, errors.Join(err, c.rollback(ctx))
	}
	clear(c.rows)
	clear(c.life)
	for i := 0; i < len(batch); {
		stmt, n := c.insert, 1
		if rows > 1 && len(batch)-i >= rows {
			stmt, n = c.insertN, rows
		}
		chunk := batch[i : i+n]
		args := c.args[:0]
		for _, p := range chunk {
			for _, v := range p.args {
				args = append(args, driver.NamedValue{Ordinal: len(args) + 1, Value: v})
			}
		}
		res, err := c.exec(ctx, stmt, args)
		if err != nil {
			err = fmt.Errorf("insert: %w", err)
			switch {
			case n == 1:
				return i, errors.Join(err, c.rollback(ctx))
			case !recordFault(err):
				return noRecord, errors.Join(err, c.rollback(ctx))
			}
			if rerr := c.rollback(ctx); rerr != nil {
				return noRecord, errors.Join(err, rerr)
			}
			return noRecord, errChunk
		}
		stored, err := c.stored(ctx, chunk, res)
		if err != nil {
			return noRecord, errors.Join(fmt.Errorf("insert: %w", err), c.rollback(ctx))
		}
		for j, p := range chunk {
			if stored != nil && !stored[j] {
				continue // a duplicate RequestID: not stored, not counted
			}
			if err := c.count(p.agg); err != nil {
				return i + j, errors.Join(err, c.rollback(ctx))
			}
		}
		i += n
	}
	for k, s := range c.rows {
		if err := c.add(ctx, c.addAgg, c.newAgg, k, true, s); err != nil {
			return noRecord, errors.Join(fmt.Errorf("aggregate %s %q model %q bucket %d: %w", k.scope, k.id, k.model, k.bucket, err),
				c.rollback(ctx))
		}
	}
	for k, s := range c.life {
		if err := c.add(ctx, c.addLife, c.newLife, k, false, s); err != nil {
			return noRecord, errors.Join(fmt.Errorf("lifetime aggregate %s %q model %q: %w", k.scope, k.id, k.model, err),
				c.rollback(ctx))
		}
	}
	if _, err := c.dc.ExecContext(ctx, "COMMIT", nil); err != nil {
		return noRecord, errors.Join(fmt.Errorf("commit: %w", err), c.rollback(ctx))
	}
	return noRecord, nil
}

// checkVersion refuses to write to a schema other than the one this code
// migrated the file to: a newer sluice that opened the file meanwhile
// upgraded it, and what this one would write could miss what that schema
// adds (a table the newer code reads). The records stay where they are
// (in the spool, or with their Appends) for the newer sluice. Read under
// the write lock, so no upgrade can come between it and COMMIT.
func (c *committer) checkVersion(ctx context.Context) error {
	rows, err := c.version.(driver.StmtQueryContext).QueryContext(ctx, nil)
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	dest := make([]driver.Value, 1)
	err = rows.Next(dest)
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if v, ok := dest[0].(int64); !ok || v != int64(len(migrations)) {
		return fmt.Errorf("the ledger's schema is now version %v, and this sluice writes version %d: a newer sluice upgraded the file; stop this one and let the newer one write", dest[0], len(migrations))
	}
	return nil
}

// exec runs stmt with args, then clears args (they hold the records'
// strings).
func (c *committer) exec(ctx context.Context, stmt driver.Stmt, args []driver.NamedValue) (driver.Result, error) {
	defer clear(args)
	return stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

// stored tells which records of chunk the insert whose result is res
// stored: nil if all were (nearly always), else stored[j] for chunk[j].
// An insert skips a record whose RequestID is already there, in the
// ledger or earlier in the same statement (ON CONFLICT DO NOTHING, row by
// row), so the first of records sharing a RequestID is the one stored.
// The rows one statement stores get consecutive rowids after every row
// already there (SQLite gives a new row the largest rowid plus one), the
// last one res.LastInsertId: when some were skipped, the last n rowids
// name the stored ones. That a record is told apart by its RequestID
// alone is checked: a mismatch fails the transaction rather than count a
// record wrong.
func (c *committer) stored(ctx context.Context, chunk []*prepared, res driver.Result) ([]bool, error) {
	n, err := res.RowsAffected()
	if err != nil || n == int64(len(chunk)) {
		return nil, err
	}
	stored := make([]bool, len(chunk))
	if n == 0 {
		return stored, nil
	}
	last, err := res.LastInsertId()
	if err != nil {
		return nil, err
	}
	rows, err := c.dc.QueryContext(ctx, `SELECT request_id FROM spend WHERE rowid > ?1 AND rowid <= ?2`,
		[]driver.NamedValue{{Ordinal: 1, Value: last - n}, {Ordinal: 2, Value: last}})
	if err != nil {
		return nil, err
	}
	ids := make(map[string]bool, n)
	dest := make([]driver.Value, 1)
	for {
		if err = rows.Next(dest); err != nil {
			break
		}
		id, ok := dest[0].(string)
		if !ok {
			err = fmt.Errorf("request_id is %T", dest[0])
			break
		}
		ids[id] = true
	}
	if err = errors.Join(ignoreEOF(err), rows.Close()); err != nil {
		return nil, err
	}
	found := 0
	for j, p := range chunk {
		if id := p.args[0].(string); ids[id] {
			stored[j] = true
			delete(ids, id)
			found++
		}
	}
	if int64(found) != n || len(ids) != 0 {
		return nil, fmt.Errorf("%d of %d records stored, but %d found among the last rows", n, len(chunk), found)
	}
	return stored, nil
}

func ignoreEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// add adds s to the row k with update, or creates it with insert if
// there is none: an aggregate row (addAgg, newAgg) with its bucket, or a
// lifetime row (addLife, newLife) without.
func (c *committer) add(ctx context.Context, update, insert driver.Stmt, k aggKey, bucket bool, s sums) error {
	args := append(c.args[:0], driver.NamedValue{Value: string(k.scope)}, driver.NamedValue{Value: k.id},
		driver.NamedValue{Value: k.model})
	if bucket {
		args = append(args, driver.NamedValue{Value: k.bucket})
	}
	args = append(args, driver.NamedValue{Value: s.cost.Micros()}, driver.NamedValue{Value: s.cost.Remainder()},
		driver.NamedValue{Value: s.input}, driver.NamedValue{Value: s.cachedInput}, driver.NamedValue{Value: s.output},
		driver.NamedValue{Value: s.requests})
	for i := range args {
		args[i].Ordinal = i + 1
	}
	res, err := update.(driver.StmtExecContext).ExecContext(ctx, args)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	_, err = c.exec(ctx, insert, args)
	return err
}

// count adds a stored record's sums to the rows of its scopes.
func (c *committer) count(a aggInput) error {
	for _, s := range [...]struct {
		scope ledger.Scope
		id    string
	}{{ledger.ScopeKey, a.key}, {ledger.ScopeTeam, a.team}, {ledger.ScopeOrg, a.org}} {
		if s.id == "" {
			continue
		}
		k := aggKey{scope: s.scope, id: s.id, model: a.model, bucket: a.bucket}
		sum, ok := c.rows[k].plus(a.sums)
		if !ok {
			return fmt.Errorf("aggregate %s %q model %q bucket %d: %w", k.scope, k.id, k.model, k.bucket, errOverflow)
		}
		lk := aggKey{scope: s.scope, id: s.id, model: a.model}
		life, ok := c.life[lk].plus(a.sums)
		if !ok {
			return fmt.Errorf("lifetime aggregate %s %q model %q: %w", k.scope, k.id, k.model, errOverflow)
		}
		c.rows[k], c.life[lk] = sum, life
	}
	return nil
}

// rollback ends the transaction. SQLite may have rolled it back already
// (some errors do), and then there is nothing to roll back: that is not
// an error.
func (c *committer) rollback(ctx context.Context) error {
	_, err := c.dc.ExecContext(ctx, "ROLLBACK", nil)
	if err != nil && sqliteCode(err)&0xff == sqlite3.SQLITE_ERROR {
		return nil // "cannot rollback - no transaction is active"
	}
	return err
}

// checkpoint copies what the WAL holds into the database file, as far as
// no reader needs it (PASSIVE: it waits for no one). It reports the WAL's
// frames and how many of them the database file now holds.
func (c *committer) checkpoint(ctx context.Context) (frames, done int, err error) {
	var busy int
	err = c.conn.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &frames, &done)
	return frames, done, err
}

// Idle checkpoints the WAL once the committer has had nothing to do for
// a while (spool.Options.IdleAfter): its commits checkpoint only every
// committerCheckpoint pages, so that a page changed by several commits is
// copied once, and when the load stops what is left is copied then rather
// than stay in the WAL until more commits come.
func (c *committer) Idle(ctx context.Context) error {
	_, _, err := c.checkpoint(ctx)
	return err
}

// Close is close, for the spool.
func (c *committer) Close() error { return c.close() }

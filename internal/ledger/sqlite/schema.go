package sqlite

// migrations[i] brings the schema from version i to version i+1; the
// version is kept in PRAGMA user_version. Append only: never edit a
// migration that has shipped.
//
// Times are integer Unix nanoseconds UTC, 0 meaning unset; ttft is
// nanoseconds; booleans are 0 or 1. request_id is UNIQUE rather than the
// primary key so that rows stay in a rowid table (appends go to the end of
// the b-tree). The indexes serve ledger.Filter: every filtered column leads
// an index that goes on with started_at, so a filter plus a time range is
// one index range scan.
var migrations = []string{
	// 1: the spend table.
	`
CREATE TABLE spend (
	request_id            TEXT    NOT NULL UNIQUE CHECK (request_id <> ''),
	key_id                TEXT    NOT NULL,
	team                  TEXT    NOT NULL,
	org                   TEXT    NOT NULL,
	endpoint              TEXT    NOT NULL,
	model                 TEXT    NOT NULL,
	provider              TEXT    NOT NULL,
	upstream_model        TEXT    NOT NULL,
	input_tokens          INTEGER NOT NULL CHECK (input_tokens >= 0),
	cached_input_tokens   INTEGER NOT NULL CHECK (cached_input_tokens >= 0),
	cache_creation_tokens INTEGER NOT NULL CHECK (cache_creation_tokens >= 0),
	output_tokens         INTEGER NOT NULL CHECK (output_tokens >= 0),
	reasoning_tokens      INTEGER NOT NULL CHECK (reasoning_tokens >= 0),
	cost_micros           INTEGER NOT NULL CHECK (cost_micros >= 0),
	priced                INTEGER NOT NULL CHECK (priced IN (0, 1)),
	status                INTEGER NOT NULL,
	outcome               TEXT    NOT NULL,
	estimated             INTEGER NOT NULL CHECK (estimated IN (0, 1)),
	stream                INTEGER NOT NULL CHECK (stream IN (0, 1)),
	started_at            INTEGER NOT NULL,
	finished_at           INTEGER NOT NULL,
	ttft                  INTEGER NOT NULL CHECK (ttft >= 0)
) STRICT;
CREATE INDEX spend_started ON spend (started_at);
CREATE INDEX spend_key     ON spend (key_id, started_at);
CREATE INDEX spend_team    ON spend (team, started_at);
CREATE INDEX spend_org     ON spend (org, started_at);
CREATE INDEX spend_model   ON spend (model, started_at);
`,
	// 2: the aggregates, backfilled from the records already there: the
	// bucket is bucketExpr, written out (a migration never changes).
	`
CREATE TABLE spend_agg (
	scope               TEXT    NOT NULL CHECK (scope IN ('key', 'team', 'org')),
	id                  TEXT    NOT NULL CHECK (id <> ''),
	model               TEXT    NOT NULL,
	bucket              INTEGER NOT NULL CHECK (bucket % 900 = 0),
	cost_micros         INTEGER NOT NULL CHECK (cost_micros >= 0),
	input_tokens        INTEGER NOT NULL CHECK (input_tokens >= 0),
	cached_input_tokens INTEGER NOT NULL CHECK (cached_input_tokens >= 0),
	output_tokens       INTEGER NOT NULL CHECK (output_tokens >= 0),
	requests            INTEGER NOT NULL CHECK (requests > 0),
	PRIMARY KEY (scope, id, model, bucket)
) STRICT, WITHOUT ROWID;
CREATE INDEX spend_agg_bucket ON spend_agg (bucket);
INSERT INTO spend_agg (scope, id, model, bucket, cost_micros, input_tokens, cached_input_tokens, output_tokens, requests)
	WITH b AS (
		SELECT key_id, team, org, model, cost_micros, input_tokens, cached_input_tokens, output_tokens,
			(started_at - ((started_at % 900000000000) + 900000000000) % 900000000000) / 1000000000 AS bucket
		FROM spend
	)
	SELECT 'key', key_id, model, bucket,
		sum(cost_micros), sum(input_tokens), sum(cached_input_tokens), sum(output_tokens), count(*)
		FROM b WHERE key_id <> '' GROUP BY key_id, model, bucket
	UNION ALL
	SELECT 'team', team, model, bucket,
		sum(cost_micros), sum(input_tokens), sum(cached_input_tokens), sum(output_tokens), count(*)
		FROM b WHERE team <> '' GROUP BY team, model, bucket
	UNION ALL
	SELECT 'org', org, model, bucket,
		sum(cost_micros), sum(input_tokens), sum(cached_input_tokens), sum(output_tokens), count(*)
		FROM b WHERE org <> '' GROUP BY org, model, bucket;
`,
}

// The aggregates table, spend_agg, holds per (scope, id, model, bucket)
// the sums of the records whose key (scope 'key'), team ('team') or org
// ('org') is id, whose model is model, and whose started_at falls in the
// 15-minute bucket that starts at bucket (Unix seconds, UTC; see
// ledger.BucketOf). A record with an empty key id, team or org is not
// counted under that scope. WITHOUT ROWID: rows are found and updated by
// their key, and Lifetime reads them in key order. spend_agg_bucket
// serves Buckets(since).
//
// The committer adds to it in the transaction that inserts the records
// (commit.go), once per (scope, id, model, bucket) per batch, so a record
// is counted exactly when it is stored: SQLite's transaction makes the
// inserts and the additions land together or not at all.

// aggColumns are spend_agg's columns in the order of addAgg's and
// newAgg's arguments.
const aggColumns = `scope, id, model, bucket, cost_micros, input_tokens, cached_input_tokens, output_tokens, requests`

// bucketExpr is started_at's bucket in Unix seconds: floored to a
// multiple of 900 s (the % is adjusted so that times before 1970 floor
// too). Keep it equal to ledger.BucketOf.
const bucketExpr = `(started_at - ((started_at % 900000000000) + 900000000000) % 900000000000) / 1000000000`

// addAgg adds one batch's sums to an aggregate row; newAgg creates the
// row when addAgg found none (the committer holds the write lock, so no
// one else can create it in between). Update first, because in steady
// state nearly every row exists: an UPSERT (INSERT … ON CONFLICT DO
// UPDATE) finds the row twice, and measured 10% fewer records/s. An
// addition that overflows int64 makes SQLite compute a REAL, which the
// STRICT INTEGER column refuses (SQLITE_CONSTRAINT_DATATYPE): the
// transaction fails rather than store a wrong sum.
const (
	addAgg = `UPDATE spend_agg SET
		cost_micros         = cost_micros         + ?5,
		input_tokens        = input_tokens        + ?6,
		cached_input_tokens = cached_input_tokens + ?7,
		output_tokens       = output_tokens       + ?8,
		requests            = requests            + ?9
	WHERE scope = ?1 AND id = ?2 AND model = ?3 AND bucket = ?4`
	newAgg = `INSERT INTO spend_agg (` + aggColumns + `) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)`
)

// columns are the spend table's columns in the order of ledger.Record's
// fields, as insert binds them and reads scan them.
const columns = `request_id, key_id, team, org, endpoint, model, provider, upstream_model,
	input_tokens, cached_input_tokens, cache_creation_tokens, output_tokens, reasoning_tokens,
	cost_micros, priced, status, outcome, estimated, stream, started_at, finished_at, ttft`

// insert writes one record; a record whose request_id is taken is skipped
// (the first wins). ON CONFLICT names the column so that only that
// uniqueness conflict is ignored: a CHECK failure is still an error, where
// INSERT OR IGNORE would drop the row silently.
const insert = `INSERT INTO spend (` + columns + `)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (request_id) DO NOTHING`

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
}

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

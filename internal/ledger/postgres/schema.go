package postgres

import (
	"strings"

	"github.com/sluicegw/sluice/internal/pgmigrate"
	"github.com/sluicegw/sluice/internal/tokens"
)

// component names the ledger's schema in sluice_schema and its migration
// lock.
const component = "ledger"

// migrations is the ledger's schema history. Append only and expand only:
// never edit a migration that has shipped, never drop or rename.
//
// Times are bigint Unix nanoseconds UTC (0 meaning unset; a record never
// starts at the epoch itself), ttft is nanoseconds, costs are pico-dollars:
// ledger.Record to the nanosecond, where timestamptz keeps microseconds.
// Text that is compared or sorted uses the "C" collation, so that records
// and totals come in Go's string order whatever the database's locale.
//
// ledger_records is range-partitioned on started_at, a partition per UTC
// month (partition.go makes them); its indexes are partitioned with it,
// each led by the column a report filters on. ledger_ids holds each
// request_id once, over every partition: the records table can only be
// unique on (request_id, started_at), since a partitioned table's unique
// keys must hold its partition key. ledger_buckets and ledger_life are the
// aggregates, unpartitioned and small: per scope, id and model, per
// 15-minute bucket (Unix seconds) and over all buckets, the cost as an
// exact numeric of pico-dollars. ledger_dropped holds the ranges of
// started_at whose partitions retention dropped, so that a record from
// one of them is never stored (nor counted) again.
//
// ledger_spools (version 2) is each replica's report of its spool: how
// many acknowledged records it holds that the database does not have yet,
// since when, and when it last said so; readers of the database use it to
// say how stale they may be (Behind).
var migrations = []pgmigrate.Migration{
	{Version: 1, Name: "partitioned records, request ids, aggregates", SQL: `
CREATE TABLE ledger_records (
	request_id               text COLLATE "C" NOT NULL CHECK (request_id <> ''),
	client_request_id        text    NOT NULL,
	key_id                   text COLLATE "C" NOT NULL,
	team                     text COLLATE "C" NOT NULL,
	org                      text COLLATE "C" NOT NULL,
	endpoint                 text    NOT NULL,
	model                    text COLLATE "C" NOT NULL,
	provider                 text    NOT NULL,
	upstream_model           text    NOT NULL,
	priced                   boolean NOT NULL,
	status                   bigint  NOT NULL,
	outcome                  text    NOT NULL,
	error_type               text    NOT NULL,
	estimated                boolean NOT NULL,
	stream                   boolean NOT NULL,
	started_at               bigint  NOT NULL CHECK (started_at <> 0),
	finished_at              bigint  NOT NULL,
	ttft                     bigint  NOT NULL CHECK (ttft >= 0),
	cost_pico                bigint  NOT NULL CHECK (cost_pico >= 0),
	input_tokens             bigint  NOT NULL CHECK (input_tokens >= 0),
	cached_input_tokens      bigint  NOT NULL CHECK (cached_input_tokens >= 0),
	cache_creation_tokens    bigint  NOT NULL CHECK (cache_creation_tokens >= 0),
	output_tokens            bigint  NOT NULL CHECK (output_tokens >= 0),
	reasoning_tokens         bigint  NOT NULL CHECK (reasoning_tokens >= 0),
	cache_creation_1h_tokens bigint  NOT NULL CHECK (cache_creation_1h_tokens >= 0),
	audio_input_tokens       bigint  NOT NULL CHECK (audio_input_tokens >= 0),
	audio_output_tokens      bigint  NOT NULL CHECK (audio_output_tokens >= 0),
	CONSTRAINT ledger_records_pkey PRIMARY KEY (request_id, started_at)
) PARTITION BY RANGE (started_at);
CREATE INDEX ledger_records_key     ON ledger_records (key_id, started_at);
CREATE INDEX ledger_records_team    ON ledger_records (team, started_at);
CREATE INDEX ledger_records_org     ON ledger_records (org, started_at);
CREATE INDEX ledger_records_model   ON ledger_records (model, started_at);
CREATE INDEX ledger_records_started ON ledger_records (started_at);

CREATE TABLE ledger_ids (
	request_id text COLLATE "C" PRIMARY KEY,
	started_at bigint NOT NULL
);

CREATE TABLE ledger_buckets (
	bucket              bigint  NOT NULL CHECK (bucket % 900 = 0),
	scope               text COLLATE "C" NOT NULL CHECK (scope IN ('key', 'team', 'org')),
	id                  text COLLATE "C" NOT NULL CHECK (id <> ''),
	model               text COLLATE "C" NOT NULL,
	cost_pico           numeric NOT NULL CHECK (cost_pico >= 0),
	input_tokens        bigint  NOT NULL CHECK (input_tokens >= 0),
	cached_input_tokens bigint  NOT NULL CHECK (cached_input_tokens >= 0),
	output_tokens       bigint  NOT NULL CHECK (output_tokens >= 0),
	requests            bigint  NOT NULL CHECK (requests > 0),
	PRIMARY KEY (bucket, scope, id, model)
);

CREATE TABLE ledger_life (
	scope               text COLLATE "C" NOT NULL CHECK (scope IN ('key', 'team', 'org')),
	id                  text COLLATE "C" NOT NULL CHECK (id <> ''),
	model               text COLLATE "C" NOT NULL,
	cost_pico           numeric NOT NULL CHECK (cost_pico >= 0),
	input_tokens        bigint  NOT NULL CHECK (input_tokens >= 0),
	cached_input_tokens bigint  NOT NULL CHECK (cached_input_tokens >= 0),
	output_tokens       bigint  NOT NULL CHECK (output_tokens >= 0),
	requests            bigint  NOT NULL CHECK (requests > 0),
	PRIMARY KEY (scope, id, model)
);

CREATE TABLE ledger_dropped (
	lo   bigint PRIMARY KEY,
	last bigint NOT NULL CHECK (last >= lo),
	name text   NOT NULL
);
`},
	{Version: 2, Name: "spools' reports", SQL: `
CREATE TABLE ledger_spools (
	spool      text   NOT NULL PRIMARY KEY,
	backlog    bigint NOT NULL,
	oldest_at  bigint NOT NULL,
	updated_at bigint NOT NULL
);
`},
	{Version: 3, Name: "a scope's buckets", Concurrently: []string{
		`CREATE INDEX CONCURRENTLY IF NOT EXISTS ledger_buckets_scope ON ledger_buckets (scope, id, bucket)`,
	}},
}

// recordColumns are ledger_records' columns in the order Insert binds
// them (one array each) and Records scans them: the record's other fields,
// then a column per kind of token, in tokens.Kind's order.
var recordColumns = append([]string{
	"request_id", "client_request_id", "key_id", "team", "org", "endpoint", "model", "provider", "upstream_model",
	"priced", "status", "outcome", "error_type", "estimated", "stream", "started_at", "finished_at", "ttft", "cost_pico",
}, tokenColumns()...)

// numColumns is how many columns a record has; the token columns are the
// last tokens.NumKinds.
const numColumns = 19 + tokens.NumKinds

// tokenColumns are the token columns, in tokens.Kind's order.
func tokenColumns() []string {
	cols := make([]string, 0, tokens.NumKinds)
	for _, k := range tokens.All() {
		cols = append(cols, k.Names().Column)
	}
	return cols
}

// columnList is recordColumns as SQL, with a prefix on each ("u." or "").
func columnList(prefix string) string {
	cols := make([]string, len(recordColumns))
	for i, c := range recordColumns {
		cols[i] = prefix + c
	}
	return strings.Join(cols, ", ")
}

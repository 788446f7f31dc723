package postgres

import "github.com/sluicegw/sluice/internal/pgmigrate"

// component names the store's schema in sluice_schema and its migration
// lock.
const component = "store"

// migrations is the store's schema history. Append only and expand only:
// never edit a migration that has shipped, never drop or rename.
//
// Times are bigint Unix nanoseconds UTC, 0 meaning unset. Models are JSON
// arrays of patterns, limits are JSON policies.Limits. Identifiers use the
// "C" collation, so that keys list in the same order whatever the
// database's locale. Every row carries the store-wide revision of its last
// change (rev), indexed so that a Changes poll is an index probe per
// table.
var migrations = []pgmigrate.Migration{
	{Version: 1, Name: "keys, teams, orgs and the revision counter", SQL: `
CREATE TABLE store_keys (
	id         text COLLATE "C" NOT NULL,
	prefix     text   NOT NULL,
	hash       bytea  NOT NULL CHECK (length(hash) = 32),
	team       text   NOT NULL,
	name       text   NOT NULL,
	models     jsonb  NOT NULL,
	limits     jsonb  NOT NULL,
	created_at bigint NOT NULL,
	expires_at bigint NOT NULL,
	revoked_at bigint NOT NULL,
	rev        bigint NOT NULL,
	CONSTRAINT store_keys_pkey PRIMARY KEY (id),
	CONSTRAINT store_keys_hash_key UNIQUE (hash)
);
CREATE INDEX store_keys_rev ON store_keys (rev);
CREATE INDEX store_keys_created ON store_keys (created_at, id);

CREATE TABLE store_teams (
	name   text COLLATE "C" PRIMARY KEY,
	org    text   NOT NULL,
	models jsonb  NOT NULL,
	limits jsonb  NOT NULL,
	rev    bigint NOT NULL
);
CREATE INDEX store_teams_rev ON store_teams (rev);

CREATE TABLE store_orgs (
	name   text COLLATE "C" PRIMARY KEY,
	limits jsonb  NOT NULL,
	rev    bigint NOT NULL
);
CREATE INDEX store_orgs_rev ON store_orgs (rev);

CREATE TABLE store_revision (
	id  int    PRIMARY KEY CHECK (id = 1),
	rev bigint NOT NULL
);
INSERT INTO store_revision (id, rev) VALUES (1, 0);
`},
}

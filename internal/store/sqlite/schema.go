package sqlite

// migrations[i] brings the schema from version i to version i+1; the
// version is kept in PRAGMA user_version. Append only: never edit a
// migration that has shipped.
//
// Times are integer Unix nanoseconds UTC, 0 meaning unset. Models are JSON
// arrays of patterns, limits are JSON policies.Limits. Every row carries the
// store-wide revision of its last change (rev), indexed so that a Changes
// poll with nothing new is one index probe per table.
var migrations = []string{
	// 1: keys, teams, orgs and the revision counter.
	`
CREATE TABLE keys (
	id         TEXT    NOT NULL PRIMARY KEY,
	prefix     TEXT    NOT NULL,
	hash       BLOB    NOT NULL UNIQUE CHECK (length(hash) = 32),
	team       TEXT    NOT NULL,
	name       TEXT    NOT NULL,
	models     TEXT    NOT NULL CHECK (json_valid(models)),
	limits     TEXT    NOT NULL CHECK (json_valid(limits)),
	created_at INTEGER NOT NULL,
	expires_at INTEGER NOT NULL,
	revoked_at INTEGER NOT NULL,
	rev        INTEGER NOT NULL
) STRICT;
CREATE INDEX keys_rev ON keys (rev);
CREATE INDEX keys_created ON keys (created_at, id);

CREATE TABLE teams (
	name   TEXT    NOT NULL PRIMARY KEY,
	org    TEXT    NOT NULL,
	models TEXT    NOT NULL CHECK (json_valid(models)),
	limits TEXT    NOT NULL CHECK (json_valid(limits)),
	rev    INTEGER NOT NULL
) STRICT;
CREATE INDEX teams_rev ON teams (rev);

CREATE TABLE orgs (
	name TEXT    NOT NULL PRIMARY KEY,
	rev  INTEGER NOT NULL
) STRICT;
CREATE INDEX orgs_rev ON orgs (rev);

CREATE TABLE revision (
	id  INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
	rev INTEGER NOT NULL
) STRICT;
INSERT INTO revision (id, rev) VALUES (1, 0);
`,
	// 2: org limits (the admin API sets them). Existing orgs get none.
	`
ALTER TABLE orgs ADD COLUMN limits TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(limits));
`,
}

// Package sqlite is the embedded store.Store backend: one SQLite file
// (modernc.org/sqlite, no cgo) holding keys, teams, orgs and the store-wide
// revision counter that Changes follows.
//
// The file runs in WAL mode so that a polling server never blocks a writer
// in another process, with synchronous=FULL because a revocation that was
// acknowledged must survive a crash. Writes begin IMMEDIATE, so two
// processes writing at once never take the same revision. The schema is
// versioned with PRAGMA user_version.
//
// Reads of many keys (Changes, EachKey, ListKeys) scan each row into
// buffers reused from row to row and share the teams, allow-lists and
// limits that repeat; EachKey hands each key on as it is read.
//
// It owns the file's schema and nothing else: no policy decisions, no
// caching of records (keyring does that), no logging, and it never sees a
// secret, only its SHA-256 hash and public prefix.
package sqlite

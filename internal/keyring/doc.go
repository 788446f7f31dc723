// Package keyring owns the in-memory replica of every API key, team and org
// Sluice knows — those declared in sluice.yaml and those managed in the
// store — and the resolution of a presented key's hash into a Principal.
//
// The replica is read lock-free on the hot path, so resolving a key never
// waits on a database and a flood of unknown keys costs only a hash and a
// table probe. Each key is one fixed-size row in an open-addressing table
// indexed by hash and by id; the rows hold no pointers (their strings are
// ranges of one array of names, what keys share — the team and org part,
// an allow-list, simple limits — is held once and numbered), so the
// garbage collector never scans them, however many keys there are. A
// key's Principal is made on its first lookup and kept, and its ext_authz
// metadata is built per call from values shared per team, so a key that is
// never used costs only its row, names and index slots (about 185 bytes).
//
// The first load from a store that is a store.KeyStreamer takes the keys
// one at a time as the store reads them, each made into its record at
// once, apart from the ring until the read succeeds: no batch of every key
// is held beside the table, and a failed read leaves the ring as it was.
// The declared keys' records are copied from the table the policy made,
// not made again, and only once a stored key comes: from a store without
// keys the ring keeps the policy's table as it is, with the store's
// teams.
//
// Writes are copy-on-write: the first load and a policy change build a new
// table; stored-key changes after that go to a small overlay beside the
// table (rebuilt once it outgrows an eighth of it); a team or org change
// rebuilds only the teams. Follow polls the store's change feed, which is
// how a key revoked by another process stops working within a second.
//
// It must not touch HTTP, gRPC or the decision itself (authz decides what a
// revoked key or an exhausted limit means for the caller).
package keyring

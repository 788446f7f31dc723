// Package policies owns Sluice's policy model and its lifecycle: the
// sluice.yaml types (Config), loading them with ${ENV} expansion (Load,
// Parse), validation that reports every problem with its path and position
// (Validate, Problems), compilation into the immutable Snapshot that the
// hot path reads (Compile), and reloading on file change (Watcher).
//
// What a provider kind means — its fields' validation and defaults, its
// dialect, its endpoints, its rewrite — belongs to internal/provider:
// Validate asks the kind to check its own fields, and Compile resolves each
// provider's kind once into Provider.Impl, so an unknown kind never reaches
// the request path.
//
// A file is parsed by yaml.v3 into one node tree and decoded from it. A
// config declares up to about 10,000 keys; more belong in the key store
// (sluice keys import). A Snapshot keeps the declared keys apart from its
// Config (whose Keys it drops), as rows that hold no pointers
// (declared.go); DeclaredKeys and EachDeclaredKey make their policies
// from the rows. The Watcher
// hashes a file in pieces as it reads it, and reads it whole only when
// its content changed.
//
// It must not touch stores, databases or the network, and never reads the
// environment itself: the caller passes a LookupEnv. Keys, teams and orgs
// managed at runtime live in the stores; only the ones declared in the file
// appear here.
package policies

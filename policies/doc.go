// Package policies owns Sluice's policy model and its lifecycle: the
// sluice.yaml types (Config), loading them with ${ENV} expansion (Load,
// Parse), validation that reports every problem with its path and position
// (Validate, Problems), compilation into the immutable Snapshot that the
// hot path reads (Compile), and reloading on file change (Watcher).
//
// What a provider kind means to configuration — its fields' validation
// and defaults, its dialect — belongs to internal/providerkind: Validate
// asks the kind to check its own fields and admits only known kinds, so
// an unknown kind never reaches the request path, where its users map a
// kind to its adapter (internal/provider).
//
// It sits below its users: it imports only leaf value packages (such as
// money, sat, llmapi, providerkind), never the request path (provider adapters,
// payload, apikey, apierr) nor runtime state. The signing keys of
// security.principal_keys are made by their user from PrincipalSecrets
// (deps_test.go pins this direction).
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

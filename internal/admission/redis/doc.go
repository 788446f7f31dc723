// Package redis is the admission backend a fleet of replicas shares: an
// admission.Backend whose counters live in Redis, so a limit holds across
// every replica. Each call — CountRequest, Admit, Settle, Budgets — is one
// Lua script (admit.lua) run by EVALSHA, one round trip, all-or-nothing
// across every counter that covers the request, with the semantics of
// admission.Local to the nanosecond and the pico-dollar (it passes
// admissiontest unchanged). It uses only what Redis 7.0 has.
//
// Keys (Prefix, then a hash tag, then the rest): every key a call touches
// carries the hash tag of the principal's org (its team's or its key's
// where it has none), so all of them are in one slot of a Redis Cluster.
// Prefix changes with the layout, so releases of two layouts run side by
// side.
//
//	sluice:v2:{tag}:w:<counter key>       a sliding window: h (the newest
//	                                      bucket index seen), t (the sum
//	                                      of its buckets in the window,
//	                                      saturating), c (when Redis made
//	                                      it), and bucket index → amount
//	sluice:v2:{tag}:b:<kind>:<len>:<id>:<len>:<model>:<period>
//	                                      a calendar or lifetime budget's
//	                                      period: s, e (start and end, Unix
//	                                      seconds; e "" for lifetime), sp,
//	                                      rs (spent, reserved: pico-dollars),
//	                                      c (when Redis made it)
//	sluice:v2:{tag}:holds                 the org's reservations, a sorted
//	                                      set scored by when each is due
//	sluice:v2:{tag}:holds:<id>            one reservation: what it holds,
//	                                      where
//	sluice:v2:{tag}:holds:states          the budget states in use, for a
//	                                      settle to find in one call
//	sluice:v2:{tag}:holds:applied:<id>    a reconciled request, kept two
//	                                      days: counted once
//
// Amounts are decimal strings; the script counts them in pairs of doubles
// (10¹² and the rest), exact past a money.Sum's range, since Lua 5.1's
// numbers are exact only to 2⁵³. Windows have limits.DefaultBuckets
// buckets of whole seconds. docs/architecture.md ("The fleet: counters in
// Redis") gives the design.
package redis

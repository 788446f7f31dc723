// Package limits owns the in-process counters behind rate limits: today the
// request-rate limits (N requests per minute, hour or day), later the token
// and budget limits, which add larger amounts to the same kind of counter.
// A [Counters] admits a set of [Demand] values atomically: either every
// demand fits its sliding window and all are counted, or none is.
//
// Each counter is a ring of B buckets of width P/B (B+1 slots, so the oldest,
// partly expired bucket is still held). Admission counts the whole of the
// oldest bucket, so the counted span always contains the true window
// (now−P, now]. The guarantee: in any interval of length P, the amounts
// admitted never add up to more than the limit. The cost: a denial may last up
// to one bucket width (P/B) longer than a perfect sliding log would allow;
// [Decision.RetryAfter] says exactly when room frees up, and
// [Decision.Resets] (from [Counters.AdmitWithResets]) when each window has
// let go of everything it counts.
//
// The package knows nothing about who is calling or which limits apply: the
// caller names the counters (Demand.Key) and passes the limits from policy. It
// reads no clock except in [Counters.Run], starts no goroutines, and never
// logs.
package limits

// Package pricingimport owns turning a price list in LiteLLM's public
// model_prices_and_context_window.json format — a file the user supplies;
// nothing is downloaded — into the pricing: section of sluice.yaml, for
// `sluice pricing import`.
//
// The file is one JSON object from model name to an entry of dollars-per-
// unit decimals. Read maps an entry's per-token keys onto Sluice's price
// fields (integer micro-dollars per 1M tokens, which is pico-dollars per
// token; per_request in micro-dollars):
//
//	input_cost_per_token                      input
//	cache_read_input_token_cost               cached_input
//	cache_creation_input_token_cost           cache_write (5-minute TTL)
//	cache_creation_input_token_cost_above_1hr cache_write_1h
//	output_cost_per_token                     output
//	output_cost_per_reasoning_token           reasoning
//	input_cost_per_audio_token                audio_input
//	output_cost_per_audio_token               audio_output
//	input_cost_per_request (+ output_…)       per_request
//	<any of the five token keys above>_above_<N>k_tokens
//	                                          long_context, above N×1000 input tokens
//
// Each value is converted from its decimal text, never through a float:
// 2.5e-06 dollars per token is exactly 2500000. A value that is negative,
// finer than the unit (1 pico-dollar per token, 1 micro-dollar per
// request), above $1 per token or $1000 per request, or not a number
// makes the whole entry skipped and reported, never rounded or dropped
// silently. A long-context band lacking one of the base prices takes the
// base price (as LiteLLM reads it); an entry with bands at several
// thresholds keeps the lowest and is reported. Keys with no Sluice field
// (images, seconds, characters, service tiers such as _priority and
// _flex, batch prices) are ignored.
//
// Without a selection Read imports every entry whose mode is chat,
// completion, responses or embedding and that has a per-token input price
// (and, but for embeddings, an output price); "sample_spec" (the format's
// own documentation), entries that are not objects and the rest are
// skipped with their reason. With a selection (the models a sluice.yaml
// declares) it imports exactly those, each under its configured name,
// looked up by name and then by upstream names, and says which were not
// found. Input is bounded (Options.MaxBytes) and decoded as a stream.
//
// It must not know sluice.yaml's Go types (the caller passes plain names)
// nor price anything: it converts and writes text.
package pricingimport

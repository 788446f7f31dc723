// Package usage owns reading token usage out of LLM API response bodies as
// Envoy streams them to Sluice's ext_proc: a Meter is fed each body chunk
// exactly as it arrived (arbitrary boundaries, possibly gzip or deflate
// compressed) and, when the body ends or is cut, returns the provider's
// usage or, where the provider reported none, Sluice's own estimate.
//
// It reads OpenAI's chat/completions, completions, embeddings and
// Responses usage and Anthropic's messages usage, in JSON bodies and in
// SSE streams (the last usage event wins; Anthropic's message_delta
// completes message_start), error bodies and mid-stream error events
// included. What the body is, JSON or SSE, is sniffed from its first
// bytes, not taken from the request or the content-type, so a provider
// that answers in the other form is still metered. A count that is not a
// whole number in [0, 2^30] discredits the provider's whole report, so
// that the caller charges an estimate rather than a silent zero.
//
// Input and output are tracked apart: for each side the provider did not
// report, Close estimates it (the caller's request-phase estimate for
// input, a tiktoken count of the generated text seen for output) and says
// so (Reported, Estimated, Unparsed, Err). Events are decoded by an
// in-place lexer rather than encoding/json, because decoding was most of
// a stream's cost; generated text is kept untokenized until Close, and
// the tokenizers built on first use, because tokenizing is costly and
// needed only when the provider reports no output.
//
// README.md beside this file has every rule: what is read from each
// schema, the bounds and normalisation of counts, format sniffing, the SSE
// and JSON details, compression, and the tokenizer fallback's cuts.
// bench/README.md ("Metering a response") has the figures.
//
// It must not touch pricing, the ledger, limits or policy: it turns bytes
// into token counts and says how they were obtained; whether and what to
// charge is decided by its caller. A Meter is not safe for concurrent use.
// Close must always be called.
package usage

// Package usage owns reading token usage out of LLM API response bodies as
// Envoy streams them to Sluice's ext_proc: a Meter is fed each body chunk
// exactly as it arrived (arbitrary boundaries, possibly gzip or deflate
// compressed) and, when the body ends or is cut, returns the provider's
// usage or, where the provider reported none, Sluice's own estimate.
//
// It must not touch pricing, the ledger, limits or policy: it turns bytes
// into token counts and says how they were obtained (Reported, Estimated,
// Unparsed, Err); whether and what to charge is decided by its caller.
//
// # What is read
//
//   - OpenAI chat/completions and completions: the JSON body's "usage"; in a
//     stream, the SSE `data:` events up to `data: [DONE]`, where the last
//     event carrying a non-null "usage" wins (the usage-only chunk OpenAI
//     sends when stream_options.include_usage is set; vLLM-style per-chunk
//     cumulative usage works too).
//   - OpenAI Responses: the JSON body's "usage"; in a stream, the
//     "response.usage" of response.completed, response.incomplete or
//     response.failed.
//   - OpenAI embeddings: "usage.prompt_tokens" (total_tokens if it is
//     absent); output is 0.
//   - In every OpenAI-shaped usage, prompt_tokens_details (or
//     input_tokens_details) gives cached_tokens, audio_tokens and the
//     cache_write_tokens of OpenAI-compatible providers (OpenRouter
//     style: cache writes, inside prompt_tokens) — CachedInputTokens,
//     AudioInputTokens, CacheCreationTokens; completion_tokens_details (or
//     output_tokens_details) gives reasoning_tokens and audio_tokens.
//     Both spellings are read, the larger winning; a details object
//     counts only with the count it details (prompt_tokens for the input
//     side, completion_tokens for the output side).
//   - total_tokens above input + output (prompt + completion, or
//     input_tokens + output_tokens) is handled by the provider's rule,
//     Options.TotalExcess. ExcessAsOutput (the default) adds the excess to
//     OutputTokens and makes ReasoningTokens at least the excess: Gemini's
//     OpenAI-compatible endpoint leaves its thinking tokens out of
//     completion_tokens, bills them as output, and counts them only in the
//     total (a larger reported reasoning_tokens is kept, as a server that
//     reports reasoning outside completion_tokens has then reported exactly
//     the excess). ExcessIgnored charges the counts as reported. A total at
//     or below the sum, or without both counts beside it, changes nothing;
//     embeddings have no output, so their total is never an excess.
//   - Anthropic messages: the JSON body's "usage"; in a stream,
//     message_start's message.usage (input, cache read, cache creation and a
//     provisional output count) and message_delta's usage (the final,
//     cumulative output_tokens; input counts it carries replace the start's,
//     field by field). Anthropic's input_tokens excludes cached tokens, so
//     InputTokens = input_tokens + cache_read + cache creation.
//   - Anthropic's cache_creation breakdown, {ephemeral_5m_input_tokens,
//     ephemeral_1h_input_tokens}, in bodies, message_start and
//     message_delta (each of its two fields replaces the earlier one, like
//     the other input counts). CacheCreation1hTokens is the 1-hour count.
//     The breakdown should add up to cache_creation_input_tokens; when it
//     does not, or comes alone, CacheCreationTokens is the larger of the
//     two (the breakdown's sum capped at 2^30), so that a cache write is
//     never charged below a count the provider reported: a breakdown of
//     zeros under a total of 1 is one 5-minute write, a breakdown alone is
//     its sum. The 1-hour part is as reported; the rest has the 5-minute
//     TTL. Other schemas' breakdowns and Anthropic bodies' OpenAI-style
//     fields (total_tokens, *_tokens_details) are not read.
//   - Error bodies (any status) and SSE error events, mid-stream too
//     (Anthropic's `event: error`, an OpenAI `data: {"error":{…}}`): their
//     error type or code becomes Result.ProviderError; the body still
//     counts as parsed, and what was reported and streamed before the
//     error is kept.
//
// A count the provider reports must be a whole number in [0, 2^30] (a
// billion tokens). One that is not — negative, fractional, larger,
// overflowing int64 — discredits the provider's usage for the whole
// response: every count it reported, before or after, is ignored, both
// sides are estimated (see below; an output count already reported is a
// floor for the output estimate) and the result is Unparsed with Err
// "bad_usage", so that the caller charges an estimate and counts it, never
// a silent zero. That holds for every count read, the details and the
// breakdown included; a key that occurs twice counts with its last value
// (a details or breakdown object that occurs twice: the last one, whole).
// Counts are normalised: Sluice's own estimates are clamped to [0, 2^30];
// parts never exceed their wholes: CachedInputTokens+CacheCreationTokens ≤
// InputTokens, CacheCreation1hTokens ≤ CacheCreationTokens,
// AudioInputTokens ≤ InputTokens, ReasoningTokens ≤ OutputTokens and
// AudioOutputTokens ≤ OutputTokens (a larger part is cut to its whole).
// Estimated sides carry no parts.
//
// # Reported and Estimated
//
// The Meter tracks two facts separately: whether the provider reported the
// input side (prompt_tokens / input_tokens / cache counts) and whether it
// reported the final output count (completion_tokens / output_tokens;
// Anthropic's message_start output_tokens is provisional and does not
// count). Reported is true when either was reported. For each side the
// provider did not report, Close fills in an estimate and sets Estimated:
// InputTokens = the caller's fallbackInput (its request-phase estimate);
// OutputTokens = the tiktoken count of the generated text seen, or the
// provisional provider count if larger (and OutputEstimated is set);
// ReasoningTokens stays 0. So
// Reported && Estimated means "partly from the provider" (for instance an
// Anthropic stream cut after message_start), and at least one of Reported
// and Estimated is always true.
//
// # Format sniffing
//
// The body's first bytes decide how it is parsed, whatever the request
// asked for and whatever the content-type says: after leading whitespace
// and a UTF-8 BOM, `{` or `[` is JSON and a line starting with an SSE field
// (`data`, `event`, `id`, `retry` followed by `:` or a line end, or a `:`
// comment) is SSE. So a provider that streams although stream was false,
// or answers a stream request with a JSON error, is still metered.
// Anything else (an HTML error page with status 200, plain text) is
// Unparsed with Err "not_json" or "not_sse", chosen by what was expected
// (the content-type if it names JSON or event-stream, else Options.Stream).
// An empty body is Unparsed with Err "empty_body".
//
// # SSE
//
// Parsed incrementally per the WHATWG rules that matter: lines end in \n,
// \r\n or \r (also when \r and \n arrive in different chunks), an event
// ends at a blank line, data lines join with \n, one space after the colon
// is stripped, comments and id/retry are ignored, a leading BOM is
// dropped. Only the partial line and the current event are carried
// between Writes. Only events that can carry usage or generated text are
// buffered and decoded; an event whose name is known to be irrelevant
// (ping, response.created, response.output_text.done, …) is counted but
// its data is dropped unread, however long. A kept event whose data
// exceeds Options.MaxJSONBytes stops parsing with Err "event_too_large"
// (what was seen is kept). Deliberate deviation from WHATWG: at Close an
// unterminated last line and event are processed rather than discarded,
// so a usage event missing its final blank line is not lost (a truncated
// one fails to decode and is ignored).
//
// # JSON
//
// Event data and the parts of bodies that are read are decoded by a small
// in-place JSON lexer (lex.go) rather than encoding/json: it accepts
// exactly what encoding/json accepts and decodes strings the same way
// (FuzzLexer checks both against encoding/json), allocates nothing, and
// cut the cost of a 20-chunk OpenAI stream from ~113 µs to ~30 µs. Its
// tokens (whitespace, strings, literals, numbers) and integer parsing come
// from package jsonlex, shared with payload; the object/array structure,
// the 10,000-level depth limit, tolerating invalid UTF-8 in strings (as
// encoding/json does; payload refuses it) and judging counts (see
// above) are this package's. An
// event counts as understood (see Unparsed) when its data is a JSON
// object, or [DONE], or its name is one the schema defines.
//
// A JSON body is followed byte by byte by a scanner (jsonscan.go) that
// captures the values of the top-level "usage" and "error" keys; only
// those are decoded when usage is present, so a large body (an embeddings
// batch) costs one pass. The body is buffered up to Options.MaxJSONBytes
// for the fallback (its text is read only if it carried no usage) and is
// finished as soon as its top-level value ends (bytes after it are
// ignored). A larger body sets Err "body_too_large" but its captured usage
// still counts; it is Unparsed only if no usage or error was found. A body
// cut before its value ends has Err "truncated_json"; one that ends but is
// not a valid JSON object, "bad_json" (both Unparsed unless usage or an
// error was found).
//
// # Compression
//
// Content-Encoding gzip (x-gzip) and deflate (zlib, or raw deflate when the
// zlib header is absent) are decoded by a goroutine that the first Write
// starts and Close always ends (compress/flate cannot resume once its
// reader runs dry, so it cannot be fed synchronously). Each Write copies
// its bytes into a queue of at most 4 chunks and returns without waiting
// for them to be decoded, so compression adds no wait to a chunk's reply;
// it blocks only while the queue is full. A body declared gzip that does
// not start with the gzip magic is read as plain (a decompressor ran
// before ext_proc but the header stayed). Other encodings are Unparsed with
// Err "unsupported_encoding". Decoder failures set Err "gzip: <kind>" or
// "deflate: <kind>" (bad_header, corrupt, checksum, truncated); truncation
// is not an error when Close is told the body was cut.
//
// # Tokenizer fallback
//
// Generated text (chat delta content, refusal, reasoning_content, tool-call
// arguments; completions text; Responses output_text, refusal, reasoning
// and function-call argument deltas; Anthropic text, input_json and
// thinking deltas; the same fields of JSON bodies, and an Anthropic
// tool_use block's input as its JSON text) is collected per output channel
// (choice, tool call, content block) and counted with tiktoken:
// o200k_base for gpt-4o, gpt-4.1, gpt-5 and o-series models, cl100k_base
// for gpt-4, gpt-3.5, babbage-002, davinci-002 and the text-embedding
// models, and o200k_base as a documented approximation for every other
// model (Claude, open models). Tokenizing costs about a microsecond per
// token, so text is kept untokenized (at most 16 KiB per Meter) and counted
// only at Close when the provider did not report output (once it has
// reported final usage, text is no longer kept); beyond that budget,
// completed segments are tokenized as they arrive. Segments are cut only
// before a space that follows a printable ASCII character, where
// tiktoken's pre-tokenizer always splits, so the count equals tokenizing
// the whole text; only when a channel holds 1 KiB without such a point (or
// more than 8 channels are open) is it cut elsewhere, which can shift the
// count by a token per cut. The tokenizers are built on first use (~45 ms
// and ~7 MiB each, once per process); Warm builds one ahead. Reasoning that the provider does not stream
// (OpenAI's hidden reasoning tokens) cannot be seen and is not counted.
//
// A Meter is not safe for concurrent use. Close must always be called.
package usage

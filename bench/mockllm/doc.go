// Package mockllm is a mock LLM provider: an HTTP server that speaks the
// OpenAI and Anthropic APIs with made-up, deterministic replies. It is a
// test double for end-to-end tests, demos and benchmarks — not a model,
// and never part of Sluice's data path. It owns only itself: it imports
// nothing from the rest of Sluice, so it cannot hide a gateway bug by
// sharing the gateway's code. That is why it has its own small types for
// what Sluice also names (its dialect, its endpoints) rather than
// llmapi's.
//
// Use it as a library (New, then Serve on a 127.0.0.1:0 listener, or
// Handler with httptest) or as the command `sluice-dev llm` (see Run).
//
// # Endpoints
//
// All are POST with a JSON body; "stream": true answers text/event-stream.
//
//   - /v1/chat/completions — OpenAI chat. Streams are "data: {chunk}"
//     events: a role chunk, the content chunks, a chunk with
//     finish_reason, then "data: [DONE]". With
//     stream_options.include_usage true every chunk carries
//     "usage":null and a usage-only chunk ("choices":[]) comes just
//     before [DONE]; without it no usage is streamed. JSON replies carry
//     usage {prompt_tokens, completion_tokens, total_tokens,
//     prompt_tokens_details.cached_tokens,
//     completion_tokens_details.reasoning_tokens}.
//   - /v1/completions — OpenAI legacy completions; same stream framing
//     (no role chunk; finish_reason on a final chunk of its own).
//   - /v1/embeddings — one embedding per input item (a string, an array
//     of strings, a token array, or an array of token arrays), as floats
//     or, with encoding_format "base64", little-endian float32 in
//     base64; usage {prompt_tokens, total_tokens}. Never streams.
//   - /v1/responses — OpenAI Responses API: a response object with usage
//     {input_tokens, input_tokens_details.cached_tokens, output_tokens,
//     output_tokens_details.reasoning_tokens, total_tokens}; streams are
//     named events response.created, response.in_progress,
//     response.output_item.added, response.content_part.added,
//     response.output_text.delta…, response.output_text.done,
//     response.content_part.done, response.output_item.done and
//     response.completed (response.incomplete when max_output_tokens cut
//     the reply), whose response.usage holds the usage.
//   - /openai/deployments/{deployment}/chat/completions, …/completions,
//     …/embeddings — Azure OpenAI: the api-version query parameter is
//     required and the reply's model is the deployment.
//   - /v1/messages — Anthropic Messages; max_tokens is required, as in the
//     real API. Streams: message_start (message.usage with input_tokens,
//     cache_creation_input_tokens, cache_read_input_tokens and
//     output_tokens 1), content_block_start, ping, content_block_delta
//     (text_delta)…, content_block_stop, message_delta (usage.output_tokens
//     is the final cumulative count), message_stop.
//   - /v1/messages/count_tokens — Anthropic's token count:
//     {"input_tokens": N}, N the prompt tokens /v1/messages would charge
//     for the same messages and system; the Anthropic credential is
//     checked and the request recorded like any other.
//   - GET /healthz — "ok", for readiness polling; not counted or recorded.
//
// Every reply echoes the requested model. Errors use the endpoint's
// dialect: OpenAI {"error":{"message","type","param","code"}}, Anthropic
// {"type":"error","error":{"type","message"}}. Requests the real API
// would refuse get 400 (no model, no messages, max tokens below 1,
// stream_options without stream, a body that is not JSON); unknown
// paths 404; other methods 405; bodies over Options.MaxBodyBytes 413.
//
// # Replies and token counting
//
// A reply of n words is Text(n): words cycled from a fixed vocabulary
// that includes multi-byte UTF-8 ("Héllo 🙂 from Sluice's mock provider —
// a test double, not a model. Café naïve 日本語 …"), joined by spaces.
// A stream spreads the same words over its content chunks (ChunkTexts).
// All counts are exact and deterministic:
//
//   - Prompt tokens P: TextTokens(s) = ⌈runes(s)/4⌉ for every text piece
//     of the prompt, summed; each token id in a token array counts 1.
//     Text pieces are JSON strings where prompt text goes, and the "text"
//     of content parts; objects without "text" count their "content".
//     The prompt is: chat — messages; Anthropic — system + messages;
//     completions — prompt; responses — instructions + input;
//     embeddings — input (per item, summed).
//   - Output words W: x-mock-words (else Options.Words, else 13),
//     capped by the request's max_completion_tokens / max_tokens /
//     max_output_tokens; a capped reply ends with finish_reason
//     "length", stop_reason "max_tokens" or status "incomplete".
//   - Content chunks C = min(x-mock-chunks (else Options.Chunks, else
//     W), W). A chunk count given without a word count at the same
//     level (header, or Options) means one word per chunk.
//   - Cached tokens K = min(x-mock-cached-tokens, P); cache writes
//     (Anthropic) X = min(x-mock-cache-write-tokens, P−K); reasoning
//     tokens R = x-mock-reasoning-tokens.
//   - OpenAI: prompt_tokens = input_tokens = P (cached_tokens = K inside
//     it); completion_tokens = output_tokens = W + R (reasoning_tokens =
//     R inside it); total = P + W + R. Embeddings: prompt_tokens =
//     total_tokens = P.
//   - Anthropic: input_tokens = P − K − X, cache_read_input_tokens = K,
//     cache_creation_input_tokens = X, output_tokens = W + R.
//
// # Controls
//
// Options sets server-wide defaults; a request header overrides one for
// that request (headers are case-insensitive). An unknown or malformed
// x-mock-* header gets 400 (code "mock_control"), so a typo cannot pass
// unnoticed. They are safe only because this is a mock: anyone who can
// reach it can make it slow.
//
//	x-mock-latency: 250ms      delay before the response headers (Go duration)
//	x-mock-first-byte: 2s      send and flush the headers, then wait before the first body byte
//	x-mock-interval: 20ms      pause before every stream event after the first
//	x-mock-words: N            reply size in words (= output tokens); 0 allowed
//	x-mock-chunks: N           content chunks per stream (≥ 1; capped at the words)
//	x-mock-usage: omit         never send usage, even when asked ("default" undoes Options.OmitUsage);
//	                           JSON replies drop it (the Responses API sends "usage": null)
//	x-mock-split: N            write the body in pieces ending at every multiple of N bytes
//	                           (counted over the whole body) and at every event end, each
//	                           written and flushed on its own; a small odd N (3, 7) cuts mid-event,
//	                           mid-CRLF and mid-rune. 0 turns it off. JSON and replayed bodies split too.
//	x-mock-crlf: 1             end synthesised SSE lines with "\r\n" (replays keep their bytes)
//	x-mock-gzip: 1|0|auto      gzip the body (content-encoding: gzip; streams flush the
//	                           compressor per piece so they stay incremental). accept-encoding is
//	                           ignored unless the value is "auto", which gzips iff it lists gzip.
//	x-mock-status: 429         answer with this error status (400–599) in the endpoint's
//	                           dialect; 429 carries retry-after: 1
//	x-mock-retry-after: S      retry-after: S (seconds) on any error reply, whatever its status
//	x-mock-abort-after: N      streams: reset the connection after N content chunks (after the
//	                           last one if there are no more); JSON: after N body bytes (at most
//	                           all but one). The reset is net/http's http.ErrAbortHandler: HTTP/1.1
//	                           closes without the final chunk, HTTP/2 resets the stream, so the
//	                           client sees an error, never a clean end.
//	x-mock-error-after: N      streams: after N content chunks send an in-stream error event
//	                           (OpenAI "data: {"error":…}", Anthropic "event: error" with
//	                           overloaded_error, Responses "event: error") and end cleanly
//	x-mock-cached-tokens: K    prompt tokens reported as cache reads
//	x-mock-cache-write-tokens: X  prompt tokens reported as cache writes (Anthropic)
//	x-mock-reasoning-tokens: R reasoning tokens, added to the output tokens; a negative R (down
//	                           to -2^40) reports a negative reasoning count, and a negative
//	                           output when -R exceeds the words, as a broken provider might
//	x-mock-input-tokens: P     prompt tokens reported, instead of the request's count (1 to 2^40)
//	x-mock-dimensions: D       embedding length (over the request's "dimensions" and Options)
//	x-mock-trailer: name=value end the response with this trailer field, announced in a
//	                           Trailer header (JSON and streams; set on a clean end only, not
//	                           after an abort): HTTP/1.1 sends the body chunked with a trailer
//	                           section, HTTP/2 a trailing HEADERS frame.
//	                           The name is a token, not a framing, routing or x-mock- field.
//
// Order of handling: record and count the request; path, method and
// controls; latency; credentials; x-mock-status; cassette replay;
// synthesised reply.
//
// # Credentials and counters
//
// With Options.APIKey set the OpenAI paths require "authorization: Bearer
// <key>"; with Options.AzureAPIKey the Azure paths require "api-key:
// <key>"; with Options.AnthropicAPIKey /v1/messages requires "x-api-key:
// <key>" and an anthropic-version header. A missing or different
// credential gets 401 in the dialect (a missing anthropic-version, 400)
// and counts in Rejected. Requests counts every request that reached the
// handler; Received returns each one (method, path, query, host, headers,
// body) in arrival order, so a test can check which credential and which
// body a gateway forwarded. Reset clears them.
//
// # Cassettes
//
// LoadCassette reads go-vcr v2 YAML recordings; with Options.Cassettes the
// server replays the matching interaction (see Cassette) with its
// recorded status, headers and body byte for byte. Delivery controls
// apply to replays; content controls do not.
//
// # Transport
//
// Serve speaks HTTP/1.1 and cleartext HTTP/2 with prior knowledge (h2c,
// as Envoy's upstream HTTP/2 does), through net/http's own Protocols. The
// command listens on 127.0.0.1:8081 unless told otherwise.
package mockllm

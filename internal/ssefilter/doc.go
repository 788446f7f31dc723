// Package ssefilter owns taking the usage-only chunk out of an OpenAI
// text/event-stream on its way to the client. When a client streams chat
// completions or legacy completions without stream_options.include_usage,
// Sluice forces the flag on upstream so it can meter exactly; the
// provider then ends the stream with a chunk whose "choices" is empty,
// which the client never asked for and which code written against the
// unforced stream (chunk.choices[0].delta) fails on. A Filter removes
// exactly those events from the bytes, chunk by chunk, as Envoy's
// ext_proc hands them over in STREAMED mode.
//
// An event is removed only when it is nothing but data lines holding one
// JSON object whose every "choices" is an empty array and every "usage"
// an object; anything else — [DONE], comments, error events, events with
// other fields, invalid JSON, keys that only a case-folding decoder would
// read as choices — is kept, and so is "usage":null, because removing it
// would rewrite every chunk to change nothing a client can observe.
// Chunks may split anywhere; the only bytes held back are those of an
// incomplete event at a chunk's end while it can still be a usage chunk,
// up to a bound (DefaultMaxEvent) past which it is passed, so the output
// never depends on the chunking. No byte is lost or reordered (but a held
// tail when the response ends in trailers: see Held), and a chunk passed
// unchanged costs no allocation.
//
// README.md beside this file has the exact rule, the holding and its
// bound, and the allocation and aliasing guarantees; docs/architecture.md
// ("The usage chunk Sluice asked for") says how extproc uses it.
//
// It must not touch metering, Envoy's protos or policy: bytes in, bytes
// out. The caller meters the original bytes and decides which responses
// are filtered (only those whose flag Sluice forced, unencoded).
package ssefilter

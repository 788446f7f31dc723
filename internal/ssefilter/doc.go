// Package ssefilter owns taking the usage-only chunk out of an OpenAI
// text/event-stream on its way to the client. When a client streams chat
// completions or legacy completions without stream_options.include_usage,
// Sluice forces the flag on upstream so it can meter exactly; the
// provider then ends the stream with a chunk whose "choices" is empty
// ("data: {…,"choices":[],"usage":{…}}"), which the client never asked
// for and which code written against the unforced stream
// (chunk.choices[0].delta) fails on. A Filter removes exactly those
// events from the bytes, chunk by chunk, as Envoy's ext_proc hands them
// over in STREAMED mode.
//
// It must not touch metering, Envoy's protos or policy: bytes in, bytes
// out. The caller meters the original bytes and decides which responses
// are filtered (only those whose flag Sluice forced, unencoded).
//
// # What is removed
//
// An event — its lines and the blank line that ends it, terminators
// included ("\n", "\r\n" or "\r", as the SSE grammar allows) — is removed
// when every line of it is a "data" field and its data (the lines'
// values joined by "\n") is one valid JSON object (encoding/json.Valid)
// whose top-level members include "choices" and "usage", every "choices"
// being an empty array and every "usage" an object (not null), in any
// order, with any whitespace, escapes in keys decoded. Nothing else is
// ever removed: events with choices, [DONE], comments and keepalives,
// error events, events with an event, id or retry line, invalid JSON. A
// top-level key that is not ASCII, or that equals "choices" or "usage"
// only ignoring case, keeps the event (some JSON decoders match keys case-
// and Unicode-fold insensitively, and would see choices there). An event
// longer than the Filter's bound (DefaultMaxEvent unless New is told
// otherwise; counted up to the first byte of its blank line) is never
// removed, whether or not it arrives in one chunk, so the output never
// depends on the chunking; Counts.Oversized counts the ones that looked
// like a usage chunk when they crossed it.
//
// "usage":null, which OpenAI adds to every other chunk when include_usage
// is set, is left as it is: usage is a documented, nullable member of
// every chunk, so a client reads null as no usage, and removing it would
// rewrite every chunk of every stream (a body mutation per chunk, the
// whole stream copied back to Envoy) to change nothing a client can
// observe.
//
// # Chunk boundaries and holding
//
// Write takes each chunk as it arrived — split anywhere: inside "data:",
// inside "\r\n", inside the JSON or a UTF-8 rune — and returns what the
// client gets for it. The only bytes ever held back are those of the
// incomplete event at the end of a chunk, and only while it can still be
// a usage chunk: its lines and JSON are scanned as they arrive, and the
// first byte that rules it out (a non-data line, a value that is not an
// object, a non-empty "choices", a null "usage") releases it. A usage
// chunk split over many chunks is held whole, then removed or released
// when its blank line arrives. At end of stream whatever is held is sent
// as it is. No byte is ever lost or reordered; the one exception is a
// response that ends in trailers, which gives no later body reply to
// carry a held tail (see Held).
//
// Write allocates nothing for a chunk it passes unchanged, and a chunk
// whose output is one run of its bytes (a usage chunk at its end or
// start, a held tail) is returned as a subslice; only a chunk that
// releases held bytes or loses a middle part gets a new slice. The
// output never aliases the Filter's own buffers, so it may be handed to
// gRPC while the next chunk is filtered.
package ssefilter

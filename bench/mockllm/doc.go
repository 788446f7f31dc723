// Package mockllm is a mock LLM provider: an HTTP server that speaks the
// OpenAI and Anthropic APIs with made-up, deterministic replies. It is a
// test double for end-to-end tests, demos and benchmarks — not a model,
// and never part of Sluice's data path.
//
// It serves OpenAI's chat/completions, completions, embeddings and
// Responses (and Azure OpenAI's deployment paths), Anthropic's messages
// and count_tokens, as JSON or as event streams, with exact token counts
// computed from the request (Text, TextTokens, ChunkTexts), errors in the
// endpoint's dialect, and GET /healthz. Per request, x-mock-* headers
// (over the server-wide Options) set latency, reply size, chunking, odd
// byte splits, gzip, error statuses, aborts, in-stream errors, reported
// token counts and trailers; an unknown or malformed one is a 400, so a
// typo cannot pass unnoticed. It checks the provider credentials it was
// given, counts and records every request (Requests, Rejected, Received),
// so that a test can prove what reached the provider and what did not,
// and replays go-vcr cassettes byte for byte (LoadCassette). It serves
// HTTP/1.1 and h2c.
//
// Use it as a library (New, then Serve on a 127.0.0.1:0 listener, or
// Handler with httptest) or as the command `sluice-dev llm` (see Run).
// README.md beside this file is its reference: every endpoint's shape,
// the token-count formulas, each control's syntax, the order of handling,
// credentials, cassettes and transport.
//
// It owns only itself: it must not import the rest of Sluice, so it
// cannot hide a gateway bug by sharing the gateway's code. That is why it
// has its own small types for what Sluice also names (its dialect, its
// endpoints) rather than llmapi's.
package mockllm

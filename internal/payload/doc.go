// Package payload owns LLM API request bodies on Sluice's ext_proc hot path
// (design.md, "The request path", step 2): reading the few fields Sluice
// needs (Parse), estimating the prompt's size for admission, and making the
// minimal rewrites routing needs (Apply) without re-encoding the document.
//
// Parse is one pass of a hand-written scanner, because the body is on the
// hot path and only a few small values are needed: it validates the whole
// body as RFC 8259 JSON (strings valid UTF-8, nesting bounded), decodes
// only model, stream, the output caps, n and stream_options.include_usage,
// and for the prompt only measures string content; it allocates the model
// string and nothing that grows with the body. JSON's tokens come from
// package jsonlex, shared with usage. A field Parse reads may occur only
// once, and a key that differs from one only in case is refused, because
// parsers disagree on which occurrence wins and a provider could otherwise
// run a model, or a stream, Sluice did not meter.
//
// Request.InputTokens is an estimate for admission computed from lengths,
// never by tokenizing; media strings are costed by what they are. The
// estimate bounds how far a budget can be overshot before settlement
// replaces it with the provider's usage, never what is charged. Apply
// changes only the bytes a Rewrite asks for; every other byte is kept.
//
// README.md beside this file has the rules: the refusals and their codes,
// parsing, the estimate's formula per endpoint, media, the estimate's
// measured error, and rewriting.
//
// It must not decide policy (allow-lists, aliases, limits) or know about
// providers: callers decide what to change, this package only reads and
// edits bytes. It never logs, and no error message quotes more than 64
// bytes of a body. A body it refuses is an *apierr.Error with status 400.
package payload

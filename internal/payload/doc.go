// Package payload owns LLM API request bodies on Sluice's ext_proc hot path
// (design.md, "The request path", step 2): reading the few fields Sluice
// needs (Parse), estimating the prompt's size for admission, and making the
// minimal rewrites routing needs (Apply) without re-encoding the document.
//
// It must not decide policy (allow-lists, aliases, limits) or know about
// providers: callers decide what to change, this package only reads and
// edits bytes. It never logs, and no error message quotes more than 64
// bytes of a body. A body it refuses is an *apierr.Error with status 400
// and one of apierr's body codes (empty_body, invalid_json, not_an_object,
// missing_model, invalid_model, invalid_field, invalid_utf8).
//
// # Parsing
//
// Parse is one pass of a hand-written scanner over the bytes. It validates
// the whole body as RFC 8259 JSON, with strings required to be valid UTF-8
// and nesting limited to 128 levels (a syntax error names its byte offset,
// counted from 0). The tokens — whitespace, literals, numbers, escapes,
// UTF-8 runs, integer values — are read by package jsonlex, shared with
// usage; what is stricter here stays here: refusing invalid UTF-8 (jsonlex,
// like encoding/json, accepts it), the depth limit, the wording of syntax
// errors, and refusing an integer field that overflows int64. It decodes only the small values it needs (model,
// stream, max output tokens, n, stream_options.include_usage) and, for the
// prompt, only measures string content. It allocates the model string and
// nothing that grows with the body.
//
// Keys are compared after decoding their escapes, exactly ("Model" is not
// "model"). When a top-level key occurs more than once, the last occurrence
// wins, as with encoding/json and Python's json; every occurrence of a field
// Parse reads must still have a valid type. A top-level key that differs
// from a field Parse reads only in case (or by Unicode case folding, "ſtream")
// is rejected: decoders such as encoding/json into a struct would read it as
// that field, so accepting it would let a client check one model and run
// another.
//
// # The input-token estimate
//
// Request.InputTokens is an estimate for admission, computed from lengths,
// never by tokenizing. Only prompt-carrying top-level fields count:
//
//	chat/completions  messages; tools, functions, response_format by size
//	completions       prompt, suffix
//	embeddings        input
//	responses         input, instructions; tools, text by size
//	messages          messages, system; tools by size
//	unknown endpoint  all of the above
//
// Inside them:
//
//   - each string value costs ceil(u/4) tokens, where u counts the decoded
//     string's runes with weight 1 for runes below U+0800 (ASCII, Latin,
//     Greek, Cyrillic, Hebrew, Arabic) and weight 4 for the rest (CJK,
//     Indic scripts, emoji): about four English characters, or one CJK
//     character, per token;
//   - each number costs 1 token (token-id prompts: one per id);
//   - object keys, booleans and null cost nothing, and neither do the
//     values of the metadata keys type, role, id, call_id, tool_call_id,
//     tool_use_id, status, detail, signature, media_type and mime_type;
//   - a string under a media key (url, image_url, data, file_data,
//     file_url, file_id) costs a flat 1600 tokens whatever its length
//     (counting base64 as text would overestimate an image a hundredfold):
//     about a full-size image for Anthropic, more than GPT-4o's high-detail
//     maximum, less than OpenAI's patch-based nano models charge for a
//     large image (up to ~3,800);
//   - each object directly inside messages, or inside a responses input
//     array, adds 4 tokens (role and delimiters), and chat/completions,
//     messages and responses add 3 tokens per request (reply priming);
//   - a field counted by size costs ceil(bytes/4) of its raw JSON,
//     whitespace included.
//
// Its error, measured on the recorded OpenAI requests (TestFixtureEstimates):
// ×1.00–1.12 of the provider's prompt_tokens for chat messages, tools and
// embeddings, ×1.52 for a tiny request whose pretty-printed response_format
// dominates, ×0.71 for indented Python (code runs ~3 characters per token).
// It runs low for Cyrillic and other two-byte scripts (~2–3 characters per
// token), for numbers and code, and for media costlier than one image (PDF
// pages, long audio); high for short metadata-heavy requests. Admission
// reserves the estimate and settlement replaces it with the provider's
// reported usage, so the error bounds how far a budget can be overshot
// between the two, never what is charged.
//
// # Rewriting
//
// Apply changes only the bytes a Rewrite asks for: the top-level "model"
// value (every occurrence, so a duplicate cannot keep the old model whichever
// occurrence the provider reads), stream_options.include_usage, or the
// removal of "model". Every other byte, whitespace included, is kept.
package payload

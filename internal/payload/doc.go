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
// missing_model, invalid_model, invalid_field, integer_below_min_value,
// integer_above_max_value, duplicate_field, invalid_utf8); a refusal that
// concerns one field names it in Param (OpenAI's "param": "n",
// "stream_options.include_usage"). An integer out of its range gets
// OpenAI's codes for that, integer_below_min_value and
// integer_above_max_value: n must be 1–128 (OpenAI's bounds), the output
// caps 0–2^32−1 (0 is passed on: the provider answers it); anything that
// is not an integer is invalid_field.
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
// "model"). A top-level field Parse reads on the endpoint — model, stream,
// the output caps, n, stream_options (and include_usage inside it), and
// the prompt fields the estimate measures — may occur only once: a body
// with two is refused (duplicate_field, naming it), since JSON parsers
// disagree on which occurrence wins (the last for encoding/json and
// Python, the first for others) and a provider could run a model, or a
// stream, Sluice did not meter. Other keys may repeat. A top-level key that differs
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
//     file_url, file_id) is costed by what it is (Media, below);
//   - each object directly inside messages, or inside a responses input
//     array, adds 4 tokens (role and delimiters), and chat/completions,
//     messages and responses add 3 tokens per request (reply priming);
//   - a field counted by size costs ceil(bytes/4) of its raw JSON,
//     whitespace included.
//
// # Media
//
// A media string costs by the bytes that can become tokens, decided in the
// same pass from its own first bytes (escapes decoded) and, for a string
// that does not say, from its object's media_type, mime_type or format:
//
//   - a URL (http://, https://) or a file_id: 1600 tokens, the flat
//     per-image estimate — what it points at cannot be seen;
//   - an inline image (a data:image/… URL, or beside a media_type
//     image/…): 1600 tokens whatever its size. Its pixels, which set the
//     provider's price, cannot be bounded from its byte length (a
//     compressed 8000×8000 PNG fits in a kilobyte), but providers scale
//     images down: 1600 is about Anthropic's maximum ((1568²)/750), above
//     GPT-4o's high-detail maximum (1,105), below the ~3,800 of OpenAI's
//     patch-based models with their multiplier;
//   - inline audio (a string beside a "format" of wav, mp3, flac, opus,
//     ogg, aac, m4a, webm or pcm16: OpenAI's input_audio): ceil(u/64)
//     tokens, base64 at 8 kbit/s being ~1,333 characters a second and
//     providers charging at most ~20 tokens a second;
//   - any other inline data — text documents (Anthropic's source type
//     "text"), PDFs, data: URLs of other types, strings nothing marks —
//     costs its length as text, ceil(u/4), and at least 1600: a text
//     document costs what its text does; base64 costs about one token per
//     3 decoded bytes.
//
// An unrecognised or escaped-beyond-ASCII prefix falls to the last, the
// largest class, so no spelling lowers the estimate.
//
// # Error
//
// Measured on the recorded OpenAI requests (TestFixtureEstimates) against
// the provider's prompt_tokens: ×1.00–1.12 for chat messages, tools and
// embeddings, ×1.52 for a tiny request whose pretty-printed
// response_format dominates, ×0.71 for a completions prompt of indented
// Python. On crafted text against the o200k_base tokenizer
// (TestEstimateErrorOnCraftedText): English prose ×1.28, Chinese ×1.44,
// Cyrillic ×0.92, emoji ×0.67, Python ×0.59, digit runs ×0.55. So text is
// estimated at no less than about half its tokens (digits and dense code
// are the worst), at most about 1.6× for ordinary text. Media: images are
// bounded by the provider's per-image maximum (Anthropic, GPT-4o) or low
// by up to ×2.4 (OpenAI's patch-based models); inline documents cost at
// least their length as text (a PDF page's rendered image, which Anthropic
// adds per page, is not seen); a URL or file_id is unbounded (a linked PDF
// may have any number of pages). Admission reserves the estimate and
// settlement replaces it with the provider's reported usage, so the error
// bounds how far a budget can be overshot between the two, never what is
// charged.
//
// # Rewriting
//
// Apply changes only the bytes a Rewrite asks for: the top-level "model"
// value (every occurrence, so a duplicate cannot keep the old model whichever
// occurrence the provider reads), stream_options.include_usage, or the
// removal of "model". Every other byte, whitespace included, is kept.
package payload

// Package jsonlex owns the byte-level grammar of JSON (RFC 8259) that
// Sluice's hand-written scanners share: whitespace, strings (escapes,
// \uXXXX with surrogate pairs, UTF-8), literals, numbers, and reading an
// integer literal with overflow detection. It is one place to fuzz and
// keep right (FuzzLex checks it against encoding/json).
//
// It reads one token at a time from a []byte at an offset and never
// recurses, keeps state or allocates (Unescape only appends to the
// caller's buffer): the structure of a document
// (objects, arrays, depth limits, what to do with a value) belongs to its
// callers — payload's mode-driven request scanner and usage's callback
// lexer. So do error messages: a scan that fails returns the offset of the
// offending byte (len(b) when the input ends first, with Problem EOF) and
// a Problem saying what was wrong there, and the caller words it.
//
// Where its callers differ, the choice is theirs:
//
//   - UTF-8: String accepts invalid UTF-8 inside strings, as
//     encoding/json does (usage: providers' bytes are decoded, never
//     refused). Payload must refuse it and measures each string for its
//     input-token estimate, so it runs its own loop over the pieces
//     String is built from — PlainRun, Escape, UTF8Run and Units — and
//     words invalid UTF-8 itself. Unescape decodes for both, replacing invalid
//     UTF-8 and unpaired surrogates by U+FFFD as encoding/json does.
//   - Integers: ParseInt reports overflow; payload refuses an out-of-range
//     value, usage clamps it.
//   - Nesting limits (payload 128, usage 10,000) stay with the callers.
//
// It must not know about requests, responses, providers or errors of its
// callers' kinds.
package jsonlex

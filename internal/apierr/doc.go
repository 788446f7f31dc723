// Package apierr owns what a client sees when Sluice refuses a request:
// the one error type every layer returns for a client-facing failure
// (Error: status, stable code, message and each dialect's own message,
// param, retry-after), every code in one table (codes.go) — the codes
// double as the `reason` label of metrics — with the type and code
// OpenAI's API gives the same refusal (openAIWire), and the JSON error
// body in the dialect of the API the client called, in the provider's
// exact shape (Body: OpenAI's or Anthropic's, llmapi.Dialect; OpenAI's
// `param` is the Error's Param and its `code` OpenAI's, each null where
// OpenAI sends null), so an SDK raises its own typed error.
//
// It must not decide anything: callers pick the status, code and words;
// this package only carries and renders them.
package apierr

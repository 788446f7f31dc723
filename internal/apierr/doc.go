// Package apierr owns what a client sees when Sluice refuses a request:
// the one error type every layer returns for a client-facing failure
// (Error: status, stable code, message, param, retry-after), every code in
// one table (codes.go) — the codes double as the `reason` label of
// metrics — and the JSON error body in the dialect of the API the client
// called (Body: OpenAI or Anthropic, llmapi.Dialect; OpenAI's `param` is
// the Error's Param, null when it names no field).
//
// It must not decide anything: callers pick the status and code; this
// package only carries and renders them.
package apierr

// Package apierr owns what a client sees when Sluice refuses a request: the
// JSON error body in the dialect of the API it called (OpenAI or Anthropic),
// chosen by request path, and the stable error codes that double as the
// `reason` label of metrics.
//
// It must not decide anything: callers pick the status and code; this
// package only renders them.
package apierr

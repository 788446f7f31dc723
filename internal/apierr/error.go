package apierr

import (
	"errors"
	"fmt"
	"time"
)

// Error is a refusal: what a client is told when Sluice answers in the
// provider's place. It is the one error type every layer returns for a
// client-facing failure (credentials, bodies, allow-lists, limits); each
// server turns it into its own Envoy reply in one place (authz: a
// DeniedHttpResponse; extproc: an ImmediateResponse).
//
// Message is shown to the client as is. It never holds prompt text, and of
// key material at most what OpenAI itself echoes of a key it does not know
// (its first 8 and last 4 characters), so it is not logged: log Code.
// Code is Sluice's own; the body's type and code are the provider's for
// the same refusal (Body, and the table in codes.go).
type Error struct {
	// Status is the HTTP status of the reply.
	Status int
	// Code is one of the Code* constants (codes.go): stable, the `code` of
	// an OpenAI-shaped body and the `reason` label of metrics.
	Code string
	// Message says what was wrong, where, and what to do, in Sluice's
	// words: a body's message unless the dialect's own is set below.
	Message string
	// OpenAIMessage and AnthropicMessage, when set, are the provider's
	// own words for the same refusal ("The model `x` does not exist or
	// you do not have access to it.", "invalid x-api-key"), which that
	// dialect's body carries instead of Message; Sluice's details (which
	// limit, which key) stay inside them where they help.
	OpenAIMessage, AnthropicMessage string
	// Param names the request field at fault ("max_tokens"), or "".
	Param string
	// RetryAfter, when positive, is when a retry can succeed; it becomes
	// the reply's retry-after header in whole seconds, rounded up.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Message }

// New returns an Error with a formatted message.
func New(status int, code, format string, args ...any) *Error {
	if len(args) > 0 {
		format = fmt.Sprintf(format, args...)
	}
	return &Error{Status: status, Code: code, Message: format}
}

// As returns the *Error in err's chain, or ok false.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// RetryAfterSeconds is e.RetryAfter in whole seconds, rounded up and at
// least 1, or 0 when no retry time is set.
func (e *Error) RetryAfterSeconds() int64 {
	if e.RetryAfter <= 0 {
		return 0
	}
	return max(int64((e.RetryAfter+time.Second-1)/time.Second), 1)
}

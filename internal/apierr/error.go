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
// Message is shown to the client as is and may be logged: it never holds
// key material or prompt text.
type Error struct {
	// Status is the HTTP status of the reply.
	Status int
	// Code is one of the Code* constants (codes.go): stable, the `code` of
	// an OpenAI-shaped body and the `reason` label of metrics.
	Code string
	// Message says what was wrong, where, and what to do.
	Message string
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

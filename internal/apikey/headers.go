package apikey

import (
	"net/http"
	"strings"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// Every credential error is an *apierr.Error with status 401 and one of
// apierr.CodeMissingCredential, CodeMalformedCredential or
// CodeConflictingCredentials. Its Message is safe to show the client and
// to log: it never contains any part of the secret.

func malformed(format string, args ...any) error {
	return apierr.New(http.StatusUnauthorized, apierr.CodeMalformedCredential, format, args...)
}

// ErrMissing is returned when the request carries no credential at all:
// in OpenAI's words and Anthropic's for the same refusal, each saying
// where Sluice also looks. It is shared: never modify it.
var ErrMissing = &apierr.Error{Status: http.StatusUnauthorized, Code: apierr.CodeMissingCredential,
	Message: `no API key: send "Authorization: Bearer sk-sluice-…" or "x-api-key: sk-sluice-…"`,
	OpenAIMessage: "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY). " +
		"This gateway also reads it from the x-api-key header; its keys start with sk-sluice-.",
	AnthropicMessage: "x-api-key header is required",
}

// Credential headers, lower-case as Envoy presents them. `api-key` is what
// Azure OpenAI clients send. llmapi names them, with the APIs they belong
// to.
const (
	HeaderAuthorization = llmapi.HeaderAuthorization
	HeaderXAPIKey       = llmapi.HeaderXAPIKey
	HeaderAPIKey        = llmapi.HeaderAPIKey
)

// CredentialHeaders lists every header a caller's key may arrive in; all of
// them are removed before a request goes upstream.
var CredentialHeaders = llmapi.CredentialHeaders

// maxHeaderLen bounds how much of a header value is examined; anything
// longer is refused without scanning it.
const maxHeaderLen = len("Bearer ") + len(Prefix) + MaxSecretLen + 64

// FromHeaders extracts the caller's key from request headers. get returns a
// header's value by lower-case name, with duplicates already comma-joined
// (as Envoy builds a CheckRequest). It accepts `authorization: Bearer <key>`
// (the scheme case-insensitive, then any run of spaces and tabs),
// `x-api-key: <key>` and `api-key: <key>`; if several are present they must
// carry the same key. The returned secret has a valid format (see Validate);
// errors are *apierr.Error (401, a credential code).
func FromHeaders(get func(name string) (string, bool)) (Secret, error) {
	var found Secret
	var foundIn string
	for _, h := range CredentialHeaders {
		v, ok := get(h)
		if !ok {
			continue
		}
		s, err := parse(h, v)
		if err != nil {
			return "", err
		}
		if foundIn != "" && s != found {
			return "", apierr.New(http.StatusUnauthorized, apierr.CodeConflictingCredentials, "the %s and %s headers carry different API keys; send one", foundIn, h)
		}
		found, foundIn = s, h
	}
	if foundIn == "" {
		return "", ErrMissing
	}
	return found, nil
}

func parse(header, v string) (Secret, error) {
	if len(v) > maxHeaderLen {
		return "", malformed("the %s header is too long (%d bytes)", header, len(v))
	}
	v = strings.Trim(v, " \t")
	if strings.IndexByte(v, ',') >= 0 {
		return "", malformed("more than one %s header (or a comma in it); send exactly one API key", header)
	}
	if header == HeaderAuthorization {
		// The scheme ends at the first space or tab (RFC 7235 writes one
		// or more spaces; a tab is HTTP whitespace too, and a key holds
		// neither, so both are taken as the separator).
		scheme, rest := v, ""
		if i := strings.IndexAny(v, " \t"); i >= 0 {
			scheme, rest = v[:i], v[i:]
		}
		if !strings.EqualFold(scheme, "Bearer") {
			if scheme == "" {
				return "", malformed(`the authorization header is empty; send "Bearer sk-sluice-…"`)
			}
			return "", malformed(`the authorization header must use the Bearer scheme: "Bearer sk-sluice-…"`)
		}
		v = strings.TrimLeft(rest, " \t")
		if v == "" {
			return "", malformed(`the authorization header says "Bearer" but carries no API key`)
		}
	}
	if v == "" {
		return "", malformed("the %s header is empty", header)
	}
	if err := Validate(v); err != nil {
		if e, ok := apierr.As(err); ok {
			return "", &apierr.Error{Status: e.Status, Code: e.Code, Message: e.Message + " (in the " + header + " header)"}
		}
		return "", err
	}
	return Secret(v), nil
}

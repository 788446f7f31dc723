package authz

import (
	"fmt"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// Decision codes (stable; the `reason` label of sluice_authz_checks_total
// and the `code` of OpenAI-shaped error bodies). The credential codes come
// from apikey.
const (
	CodeOK          = "ok"
	CodeUnknownKey  = "unknown_key"
	CodeRevokedKey  = "revoked_key"
	CodeExpiredKey  = "expired_key"
	CodeUnknownTeam = "unknown_team"
	CodeRateLimited = "rate_limited"
)

// Decision is the outcome of a check.
type Decision struct {
	// Status is the HTTP status: 200 admits, anything else is the status
	// of the local reply Envoy sends instead.
	Status  int
	Code    string
	Message string
	// RetryAfter is set on 429: when the limit that refused will admit.
	RetryAfter time.Duration
	// Principal is the resolved caller, when the key was found.
	Principal *keyring.Principal
	// Dialect is the error-body dialect of the path called.
	Dialect llmapi.Dialect
}

// Allowed reports whether the request may proceed.
func (d *Decision) Allowed() bool { return d.Status == 200 }

// Checker decides ext_authz checks. It is safe for concurrent use.
type Checker struct {
	ring     *keyring.Ring
	counters *limits.Counters
	now      func() time.Time
}

// NewChecker returns a Checker resolving keys through ring and counting
// request rates in counters. now is the clock (time.Now if nil).
func NewChecker(ring *keyring.Ring, counters *limits.Counters, now func() time.Time) *Checker {
	if now == nil {
		now = time.Now
	}
	return &Checker{ring: ring, counters: counters, now: now}
}

// Check decides a CheckRequest as Envoy builds it: the header map holds
// every header, pseudo-headers included, with lower-case keys and
// duplicates comma-joined.
func (c *Checker) Check(req *authv3.CheckRequest) Decision {
	h := req.GetAttributes().GetRequest().GetHttp()
	headers := h.GetHeaders()
	d := c.Authenticate(func(k string) (string, bool) { v, ok := headers[k]; return v, ok })
	d.Dialect = llmapi.DialectFor(h.GetPath())
	if d.Allowed() {
		c.admit(&d)
	}
	return d
}

// Authenticate resolves the caller's key from request headers (get returns
// a lower-case header's value) without counting anything. ext_proc uses it
// when ext_authz is not in the filter chain. The returned Decision's
// Dialect is left for the caller to set.
func (c *Checker) Authenticate(get func(string) (string, bool)) Decision {
	secret, err := apikey.FromHeaders(get)
	if err != nil {
		if e, ok := apierr.As(err); ok {
			return Decision{Status: 401, Code: e.Code, Message: e.Message}
		}
		return Decision{Status: 401, Code: apierr.CodeMalformedCredential, Message: "malformed API key"}
	}
	prefix := apikey.PublicPrefix(secret.Reveal())
	p := c.ring.Resolve(apikey.Hash(secret.Reveal()))
	if p == nil {
		return Decision{Status: 401, Code: CodeUnknownKey, Message: fmt.Sprintf("unknown API key %s…; check the key or create one with `sluice keys create`", prefix)}
	}
	now := c.now()
	switch {
	case p.Revoked():
		return Decision{Status: 403, Code: CodeRevokedKey, Principal: p,
			Message: fmt.Sprintf("API key %s (%s…) was revoked at %s", p.KeyID, prefix, p.RevokedAt.UTC().Format(time.RFC3339))}
	case p.Expired(now):
		return Decision{Status: 403, Code: CodeExpiredKey, Principal: p,
			Message: fmt.Sprintf("API key %s (%s…) expired at %s", p.KeyID, prefix, p.ExpiresAt.UTC().Format(time.RFC3339))}
	case p.TeamMissing:
		return Decision{Status: 403, Code: CodeUnknownTeam, Principal: p,
			Message: fmt.Sprintf("API key %s belongs to team %q, which no longer exists", p.KeyID, p.Team)}
	}
	return Decision{Status: 200, Code: CodeOK, Principal: p}
}

// Admit counts one request against the principal's request-rate limits,
// turning d into a 429 if any covering window is full. ext_proc calls it
// when it authenticated the caller itself.
func (c *Checker) Admit(d *Decision) { c.admit(d) }

func (c *Checker) admit(d *Decision) {
	ds := d.Principal.Requests
	if len(ds) == 0 {
		return
	}
	var buf [8]int64
	res := c.counters.AdmitInto(c.now(), ds, buf[:0])
	if res.Admitted {
		return
	}
	denied := ds[res.Denied]
	d.Status, d.Code = 429, CodeRateLimited
	d.RetryAfter = res.RetryAfter
	d.Message = fmt.Sprintf("rate limit reached: %s allows %d requests per %s; retry in %s",
		limits.Describe(denied.Key), denied.Limit, limits.PeriodName(denied.Period), retrySeconds(res.RetryAfter))
}

// retrySeconds rounds up to whole seconds, at least 1: the unit of the
// retry-after header.
func retrySeconds(d time.Duration) string {
	return fmt.Sprintf("%ds", ceilSeconds(d))
}

func ceilSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

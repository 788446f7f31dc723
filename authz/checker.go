package authz

import (
	"context"
	"net/http"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/principal"
)

// Decision is the outcome of a check: who is calling, and whether they
// may proceed.
type Decision struct {
	// Principal is the resolved caller, when the key was found (also on a
	// refusal of a revoked or expired key, for logging).
	Principal *keyring.Principal
	// Err is the refusal — 401 for a credential, 403 for a key that may
	// not call, 429 with RetryAfter for a full request-rate window — or
	// nil when the request may proceed.
	Err *apierr.Error
	// Dialect is the error-body dialect of the path called.
	Dialect llmapi.Dialect
	// Signature signs Principal for this request (principal.ForPrincipal
	// over PrincipalFields and the request's x-request-id); set when the
	// request may proceed. It travels beside the principal in the dynamic
	// metadata, and is never logged.
	Signature string
}

// PrincipalFields are the fields of p a principal's signature covers, in
// order: key id, team, org.
func PrincipalFields(p *keyring.Principal) [3]string { return [3]string{p.KeyID, p.Team, p.Org} }

// Allowed reports whether the request may proceed.
func (d *Decision) Allowed() bool { return d.Err == nil }

// Reason is the `reason` label of sluice_authz_checks_total: apierr.CodeOK
// or the refusal's code.
func (d *Decision) Reason() string {
	if d.Err == nil {
		return apierr.CodeOK
	}
	return d.Err.Code
}

// Checker decides ext_authz checks. It is safe for concurrent use.
type Checker struct {
	ring      *keyring.Ring
	admission admission.Backend
	keys      func() *principal.Keys
	now       func() time.Time
}

// NewChecker returns a Checker resolving keys through ring, counting
// request rates in the admission backend adm (CountRequest) and signing the principal of an allowed
// request with keys() (nil, or keys returning nil, refuses every check
// that would be allowed: ext_proc would refuse it anyway). now is the
// clock (time.Now if nil).
func NewChecker(ring *keyring.Ring, adm admission.Backend, keys func() *principal.Keys, now func() time.Time) *Checker {
	if now == nil {
		now = time.Now
	}
	return &Checker{ring: ring, admission: adm, keys: keys, now: now}
}

// Check decides a CheckRequest as Envoy builds it: the header map holds
// every header, pseudo-headers included, with lower-case keys and
// duplicates comma-joined. ctx bounds the admission backend's work.
func (c *Checker) Check(ctx context.Context, req *authv3.CheckRequest) Decision {
	h := req.GetAttributes().GetRequest().GetHttp()
	headers := h.GetHeaders()
	get := func(k string) (string, bool) { v, ok := headers[k]; return v, ok }
	d := c.Authenticate(get)
	// The dialect ext_proc answers the same request in (a model list
	// asked with anthropic-version is Anthropic's).
	d.Dialect = llmapi.RequestDialect(h.GetPath(), get)
	if d.Allowed() {
		c.sign(&d, headers["x-request-id"])
	}
	if d.Allowed() {
		c.admit(ctx, &d)
	}
	return d
}

// sign signs d's principal for the request whose x-request-id is rid,
// which Envoy's connection manager sets before any filter runs (a request
// Envoy keeps a client's empty id for is bound to the empty id, which
// ext_proc then sees too), or refuses the request when there is nothing
// to sign with.
func (c *Checker) sign(d *Decision, rid string) {
	var keys *principal.Keys
	if c.keys != nil {
		keys = c.keys()
	}
	if keys == nil {
		d.Err = apierr.New(http.StatusServiceUnavailable, apierr.CodeGatewayUnavailable, "the gateway has no key to sign the request's authorization with")
		return
	}
	f := PrincipalFields(d.Principal)
	d.Signature = keys.Sign(principal.ForPrincipal, rid, c.now(), f[:]...)
}

// Authenticate resolves the caller's key from request headers (get returns
// a lower-case header's value) without counting anything. ext_proc uses it
// when ext_authz is not in the filter chain. The returned Decision's
// Dialect is left for the caller to set.
func (c *Checker) Authenticate(get func(string) (string, bool)) Decision {
	secret, err := apikey.FromHeaders(get)
	if err != nil {
		if e, ok := apierr.As(err); ok {
			return Decision{Err: e}
		}
		return Decision{Err: apierr.New(http.StatusUnauthorized, apierr.CodeMalformedCredential, "malformed API key")}
	}
	prefix := apikey.PublicPrefix(secret.Reveal())
	p := c.ring.Resolve(apikey.Hash(secret.Reveal()))
	if p == nil {
		e := apierr.New(http.StatusUnauthorized, apierr.CodeUnknownKey,
			"unknown API key %s…; check the key or create one with `sluice keys create`", prefix)
		// OpenAI's and Anthropic's words for a key they do not know;
		// OpenAI's echoes the key's first 8 and last 4 characters, and
		// so does this one, no more.
		e.OpenAIMessage = "Incorrect API key provided: " + apikey.Redacted(secret.Reveal()) +
			". You can get an API key from this gateway's operator (`sluice keys create`)."
		e.AnthropicMessage = "invalid x-api-key"
		return Decision{Err: e}
	}
	return Decision{Principal: p, Err: Usable(p, c.now())}
}

// Usable is nil when the key of p may call at now, else the refusal: a
// revoked key, an expired one, one whose team is gone. ext_proc asks it
// again of the key a signed principal names.
func Usable(p *keyring.Principal, now time.Time) *apierr.Error {
	switch {
	case p.Revoked():
		return apierr.New(http.StatusForbidden, apierr.CodeRevokedKey,
			"API key %s (%s…) was revoked at %s", p.KeyID, p.KeyPrefix, p.RevokedAt.UTC().Format(time.RFC3339))
	case p.Expired(now):
		return apierr.New(http.StatusForbidden, apierr.CodeExpiredKey,
			"API key %s (%s…) expired at %s", p.KeyID, p.KeyPrefix, p.ExpiresAt.UTC().Format(time.RFC3339))
	case p.TeamMissing:
		return apierr.New(http.StatusForbidden, apierr.CodeUnknownTeam,
			"API key %s belongs to team %q, which no longer exists", p.KeyID, p.Team)
	}
	return nil
}

// Admit counts one request against the principal's request-rate limits,
// setting d.Err to a 429 rate_limited refusal if any covering window is
// full. ext_proc calls it
// when it authenticated the caller itself.
func (c *Checker) Admit(ctx context.Context, d *Decision) { c.admit(ctx, d) }

func (c *Checker) admit(ctx context.Context, d *Decision) {
	err := c.admission.CountRequest(ctx, d.Principal, c.now())
	if err == nil {
		return
	}
	if e, ok := apierr.As(err); ok {
		d.Err = e
		return
	}
	// The backend could not count: the request is refused, as ext_proc
	// refuses one whose admission fails.
	d.Err = apierr.New(http.StatusServiceUnavailable, apierr.CodeAdmissionUnavailable, "limits cannot be checked right now; retry")
}

package extproc

import (
	"context"
	"net/http"
	"sync"
	"time"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/principal"
	"github.com/sluicegw/sluice/internal/tlsserve"
)

// A stream is served a provider credential only with proof that Envoy
// sends it on behalf of a valid key:
//   - the downstream processor takes its caller from ext_authz's dynamic
//     metadata only when the metadata's signature (chain.
//     PrincipalSignatureKey) verifies for the key id, team and org it names
//     and for the request's own x-request-id, within the principal's
//     maximum age; then it resolves the key again and refuses it if it was
//     revoked, expired or lost its team since. Without any principal it
//     authenticates the caller's own key from the headers (ext_proc
//     without ext_authz), which ext_authz removes: a stream that carries
//     neither a signed principal nor a key gets no credential;
//   - the upstream processor serves an attempt only when the handoff the
//     downstream processor left carries a signature (chain.
//     FallbackSignatureKey) over its fields and the request's
//     x-request-id, issued no longer ago than the reservation it rode on
//     lives (gateway.reservation_ttl).
// Every refusal is counted in sluice_principal_refused_total{reason} and
// logged with the peer that opened the stream; no signature is ever
// logged.

// Reasons of sluice_principal_refused_total besides principal.Reason's.
const (
	reasonNoKeys principal.Reason = "no_keys" // this process has nothing to verify with
)

// principalFrom resolves the caller of a request whose ext_authz metadata
// names key id and carries sig: nil and the refusal when the signature
// does not verify or the key may no longer call.
func (p *Processor) principalFrom(ctx context.Context, m *extprocsvc.ProcessingRequest, id, sig string) (*keyring.Principal, *apierr.Error) {
	f := m.GetMetadataContext().GetFilterMetadata()[chain.AuthzNamespace].GetFields()
	team, org := f["team"].GetStringValue(), f["org"].GetStringValue()
	reason := reasonNoKeys
	switch keys := p.d.principalKeys(); {
	case id == "":
		reason = principal.Missing
	case keys != nil:
		reason = keys.Verify(sig, principal.ForPrincipal, p.requestID, p.d.Now(), p.snap.PrincipalMaxAge(), id, team, org)
	}
	if reason != principal.OK {
		p.d.refusedPrincipal(ctx, reason, "principal", "key_id", id, "request_id", clip(p.requestID, maxClientRequestID), "path", pathOnly(p.path))
		return nil, principalRefusal(reason)
	}
	pr := p.d.Ring.ByID(id)
	if pr == nil {
		return nil, apierr.New(401, apierr.CodeUnknownKey, "the API key ext_authz accepted is no longer known")
	}
	if e := authz.Usable(pr, p.d.Now()); e != nil {
		return nil, e
	}
	return pr, nil
}

// principalRefusal is the client's answer to a principal that did not
// verify: 403, or 503 when only its time was wrong (a clock that drifted
// between replicas, a request that waited: worth a retry).
func principalRefusal(r principal.Reason) *apierr.Error {
	status := http.StatusForbidden
	if r == principal.Expired || r == principal.Future || r == reasonNoKeys {
		status = http.StatusServiceUnavailable
	}
	return apierr.New(status, apierr.CodePrincipalRefused,
		"the gateway could not verify this request's authorization (%s); only Envoy, after Sluice's ext_authz accepted the key, may call this service", r)
}

// handoffRefusal is the answer to an attempt whose handoff did not verify.
func handoffRefusal(r principal.Reason) *apierr.Error {
	return apierr.New(http.StatusForbidden, apierr.CodeHandoffRefused,
		"the fallback attempt carries no valid handoff from the gateway (%s); no provider credential was sent", r)
}

// principalKeys are the keys in force, or nil.
func (d *Deps) principalKeys() *principal.Keys {
	if d.Principals == nil {
		return nil
	}
	return d.Principals()
}

// refusedPrincipal counts and logs a refused principal or handoff (what
// names it), with the peer that sent it. The attributes are clipped
// (refusalAttr), and at most refusalLinesPerSecond lines a second are
// written — whoever reaches the port chooses how many refusals there are
// — the next line saying how many were left out; the counter counts
// every one.
func (d *Deps) refusedPrincipal(ctx context.Context, r principal.Reason, what string, attrs ...any) {
	d.Metrics.principalRefused.WithLabelValues(string(r)).Inc()
	ok, left := d.refusalLog.allow(d.Now())
	if !ok {
		return
	}
	for i := 1; i < len(attrs); i += 2 {
		if v, isString := attrs[i].(string); isString {
			attrs[i] = clip(v, refusalAttrBytes)
		}
	}
	line := append([]any{"reason", string(r), "peer", tlsserve.PeerIdentity(ctx)}, attrs...)
	if left > 0 {
		line = append(line, "refusals_not_logged", left)
	}
	d.Log.WarnContext(ctx, what+" refused: no provider credential sent", line...)
}

// refusalLinesPerSecond bounds the log lines of refused streams;
// refusalAttrBytes, each value they log (a key id, a path).
const (
	refusalLinesPerSecond = 10
	refusalAttrBytes      = 256
)

// lineLimit lets through at most refusalLinesPerSecond lines in each
// second, and counts the lines it held back. The zero value is ready.
type lineLimit struct {
	mu     sync.Mutex
	second int64 // the second counted, Unix
	lines  int
	held   int // lines held back since the last one written
}

// allow reports whether a line may be written at now and, when it may,
// how many were held back before it.
func (l *lineLimit) allow(now time.Time) (ok bool, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := now.Unix(); s != l.second {
		l.second, l.lines = s, 0
	}
	if l.lines >= refusalLinesPerSecond {
		l.held++
		return false, 0
	}
	l.lines++
	held, l.held = l.held, 0
	return true, held
}

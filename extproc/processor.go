package extproc

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/payload"
	"github.com/sluicegw/sluice/internal/principal"
	"github.com/sluicegw/sluice/internal/providerkind"
	"github.com/sluicegw/sluice/internal/sat"
	"github.com/sluicegw/sluice/internal/ssefilter"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/internal/usage"
	"github.com/sluicegw/sluice/policies"
)

// Admitter admits requests and settles them (admission.Local).
type Admitter interface {
	// Admit reserves what the claim may use against every covering limit,
	// in one step; a refusal is an *apierr.Error.
	Admit(ctx context.Context, c admission.Claim) (admission.Grant, error)
	// Settle replaces the reservation by what was used.
	Settle(ctx context.Context, g admission.Grant, a admission.Actual)
}

// Ledger stores spend records; Append returns once the record is durable.
type Ledger interface {
	Append(ctx context.Context, r ledger.Record) error
}

// Authenticator resolves a caller from request headers when ext_authz is
// not in the chain (authz.Checker).
type Authenticator interface {
	Authenticate(get func(string) (string, bool)) authz.Decision
}

// Deps are a processor's collaborators.
type Deps struct {
	Policy   func() *policies.Snapshot
	Ring     *keyring.Ring
	Auth     Authenticator
	Admitter Admitter
	Ledger   Ledger
	Metrics  *Metrics
	Log      *slog.Logger
	Now      func() time.Time
	// Rand returns a uniformly random number in [0, 2^63) choosing the
	// provider of a weighted model. Nil means math/rand/v2, whose
	// top-level source is per-thread in the runtime: fast and lock-free.
	Rand func() uint64
	// Principals returns the keys that verify the principal ext_authz
	// signed and that sign and verify the fallback handoff
	// (principal.go). Nil, or nil keys, refuses every signed principal
	// and every fallback.
	Principals func() *principal.Keys

	refusalLog lineLimit // the log lines of refused principals and handoffs
	// NewID returns the identity of a new spend record, unique and never
	// empty. Nil means a UUIDv7 (unique, ordered by time).
	NewID func() (string, error)
}

func (d *Deps) newID() (string, error) {
	if d.NewID != nil {
		return d.NewID()
	}
	id, err := uuid.NewV7()
	if err != nil {
		return "", err
	}
	return id.String(), nil
}

// maxClientRequestID bounds the client's x-request-id kept in the spend
// record: a correlation field, so a client cannot grow every record by
// the size of a header (Envoy's own ids are 36 bytes).
const maxClientRequestID = 128

func (d *Deps) random() uint64 {
	if d.Rand != nil {
		return d.Rand()
	}
	return rand.Uint64() >> 1
}

// state is where a processor is in its request's life.
type state uint8

const (
	awaitRequestHeaders state = iota
	awaitRequestBody
	awaitResponseHeaders
	streamingResponse
	// forwarded: an unmetered request (count_tokens, or an unknown path
	// under unknown_paths: pass) sent to its provider; its body and
	// response pass, only the served-by headers removed.
	forwarded
	finished
)

// Processor handles the ext_proc messages of one HTTP request. It is not
// safe for concurrent use; Server gives each stream its own.
type Processor struct {
	d     *Deps
	state state
	start time.Time

	snap *policies.Snapshot
	clientRequest
	principal *keyring.Principal
	counted   bool // ext_authz counted the request
	// context1M: the client asked for Anthropic's 1M-token window
	// (asksContext1M), which a by-reference prompt then reserves.
	context1M bool

	req   payload.Request
	route *policies.ModelRoute
	// noFallback: the Envoy running this stream was served no fallback
	// cluster, being too old for it (chain.FallbackMetadataKey), so a
	// fallback model goes to its first provider, as a single-provider
	// model does (fallback).
	noFallback bool
	// provider and upstream are who the request is metered and recorded
	// against: the chosen target, or for a fallback model the first one
	// until the response's served-by headers name the one that answered.
	provider, upstream string
	grant              admission.Grant
	meter              *usage.Meter
	status             int
	ttft               time.Duration
	ended              bool // settled

	// strip takes the usage chunk Sluice forced out of the client's
	// stream (usagechunk.go); nil when there is none to take.
	strip *ssefilter.Filter

	// recordID is the spend record's identity, generated when the request
	// is admitted, before the reservation: every Append of the record
	// (a retry included) carries the same one, and no client header
	// chooses it.
	recordID string

	// await waits for the settle's Append, given its outcome's channel,
	// on the stream's goroutine (server.go's waiter); nil: Append is
	// called directly.
	await func(done <-chan error) error
}

// fallback reports whether a request for route goes to the model's
// fallback cluster, each attempt rewritten by the upstream processor: a
// fallback model, on an Envoy that was served its fallback cluster.
func (p *Processor) fallback(route *policies.ModelRoute) bool {
	return route.Fallback() && !p.noFallback
}

// NewProcessor returns a processor for one request.
func NewProcessor(d *Deps) *Processor {
	return &Processor{d: d, start: d.Now(), snap: d.Policy()}
}

// Handle answers one message. Every message gets exactly one reply of the
// matching type (or an ImmediateResponse). A message out of its place in
// the request's life — request headers once they were handled, a body
// before the headers or after the request was admitted — is answered
// with continue and changes nothing: it can neither admit a request
// twice (the first reservation would never be settled) nor reach the
// body's steps without a caller.
func (p *Processor) Handle(ctx context.Context, m *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingResponse {
	switch r := m.GetRequest().(type) {
	case *extprocsvc.ProcessingRequest_RequestHeaders:
		if p.state == awaitRequestHeaders {
			return p.requestHeaders(ctx, m, r.RequestHeaders)
		}
	case *extprocsvc.ProcessingRequest_RequestBody:
		if p.state == awaitRequestBody || p.state == forwarded {
			return p.requestBody(ctx, r.RequestBody)
		}
	case *extprocsvc.ProcessingRequest_ResponseHeaders:
		return p.responseHeaders(ctx, r.ResponseHeaders)
	case *extprocsvc.ProcessingRequest_ResponseBody:
		return p.responseBody(ctx, r.ResponseBody)
	case *extprocsvc.ProcessingRequest_ResponseTrailers:
		return p.responseTrailers(ctx)
	}
	return continueReply(m)
}

// Cancel settles a request whose stream ended without the final response
// chunk (client gone, upstream reset, Envoy gave up): charged for what was
// delivered.
func (p *Processor) Cancel(ctx context.Context) {
	if p.state == awaitResponseHeaders || p.state == streamingResponse {
		p.settle(context.WithoutCancel(ctx), false)
	}
	p.state = finished
}

func headerGetter(h *corev3.HeaderMap) func(string) (string, bool) {
	return func(k string) (string, bool) {
		var vals []string
		for _, hv := range h.GetHeaders() {
			if hv.GetKey() == k {
				vals = append(vals, string(hv.GetRawValue()))
			}
		}
		if len(vals) == 0 {
			return "", false
		}
		return strings.Join(vals, ","), true
	}
}

func (p *Processor) requestHeaders(ctx context.Context, m *extprocsvc.ProcessingRequest, h *extprocsvc.HttpHeaders) *extprocsvc.ProcessingResponse {
	get := headerGetter(h.GetHeaders())
	p.note(get)
	p.context1M = asksContext1M(get)

	// The principal: from ext_authz's signed metadata, else authenticate
	// here (principal.go).
	f := m.GetMetadataContext().GetFilterMetadata()[chain.AuthzNamespace].GetFields()
	if id, sig := f["key_id"].GetStringValue(), f[chain.PrincipalSignatureKey].GetStringValue(); id != "" || sig != "" {
		pr, e := p.principalFrom(ctx, m, id, sig)
		if e != nil {
			return p.refuse(e)
		}
		p.principal, p.counted = pr, true
	} else {
		d := p.d.Auth.Authenticate(get)
		if !d.Allowed() {
			return p.refuse(d.Err)
		}
		p.principal = d.Principal
	}

	if p.ep == llmapi.Unknown {
		return p.unknown(get) // paths.go: by its canonical path
	}
	if want := p.ep.Method(); p.method != want {
		return p.refuse(methodNotAllowed(p.method, pathOnly(p.path), want))
	}
	if p.ep == llmapi.ModelList || p.ep == llmapi.ModelGet {
		return p.answerModels()
	}
	if h.GetEndOfStream() {
		return p.refuse(apierr.New(400, apierr.CodeEmptyBody, "the request has no body; send the JSON request"))
	}
	if e := declaredTooLarge(get, p.snap.Gateway().MaxRequestBodyBytes); e != nil {
		return p.refuse(e)
	}
	p.state = awaitRequestBody
	return headersContinue(nil)
}

// declaredTooLarge refuses, at the request headers, a body whose
// content-length is over limit, so that neither Envoy buffers nor Sluice
// receives one it would refuse. Only a single run of decimal digits
// counts (Envoy's codecs reject any other content-length); a value past
// int64 is over any limit. Anything else — no content-length, as for a
// chunked body, or one this does not read — leaves the check to the
// body's own size.
func declaredTooLarge(get func(string) (string, bool), limit int64) *apierr.Error {
	v, ok := get("content-length")
	if !ok || v == "" {
		return nil
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return nil
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	switch {
	case err != nil: // digits only, so past int64
		return bodyTooLarge("more than "+strconv.FormatInt(math.MaxInt64, 10), limit)
	case n > limit:
		return bodyTooLarge(strconv.FormatInt(n, 10), limit)
	}
	return nil
}

// pass sends a request for a path Sluice does not serve to pr, the
// provider gateway.pass_to names for its API: with pr's credential and
// path prefix, the caller's credential headers removed, unmetered,
// reserving nothing and writing no spend record. ext_authz has counted it
// against the caller's request-rate limits like any other request. The
// routing header Sluice sets replaces any a client sent (a set
// overwrites), and clear_route_cache chooses the route again on it.
//
// path is the path to send: the canonical one (paths.go), set as :path
// when it differs from the client's and the rewrite sets none.
func (p *Processor) pass(pr *policies.Provider, path string) *extprocsvc.ProcessingResponse {
	c := p.clientRequest
	c.path = path
	hm, _ := c.targetRewrite(p.snap, policies.Target{Provider: pr}, "")
	if path != p.path && !hasSet(hm, ":path") {
		hm.SetHeaders = append(hm.SetHeaders, rawHeader(":path", path))
	}
	hm.SetHeaders = append(hm.SetHeaders, rawHeader(chain.RoutingHeader, pr.Name))
	p.provider = pr.Name
	p.state = forwarded
	p.d.Metrics.requests.WithLabelValues(p.ep.String(), outcomeForwarded).Inc()
	return requestHeadersReply(hm, true)
}

// requestBody runs the request-body steps in order — resolve, authorize,
// rewrite, reserve — and answers with the first refusal, or with the
// rewrite once the request is admitted.
func (p *Processor) requestBody(ctx context.Context, b *extprocsvc.HttpBody) *extprocsvc.ProcessingResponse {
	if p.state == forwarded {
		return bodyContinue(nil) // the body passes as sent
	}
	body := b.GetBody()
	r, err := p.resolve(body)
	if err != nil {
		return p.refuse(err)
	}
	dst, err := p.authorize(r)
	if err != nil {
		return p.refuse(err)
	}
	resp, err := p.rewrite(body, r, dst)
	if err != nil {
		return p.refuse(err)
	}
	if p.ep == llmapi.CountTokens {
		// Counting tokens costs nothing: nothing is reserved, metered or
		// recorded; the response passes (forwarded).
		p.route, p.provider, p.upstream = r.route, dst.target.Provider.Name, dst.target.Upstream
		p.state = forwarded
		p.d.Metrics.requests.WithLabelValues(p.ep.String(), outcomeForwarded).Inc()
		return resp
	}
	id, idErr := p.d.newID()
	if idErr != nil || id == "" {
		p.d.Log.Error("no spend record id", "err", idErr)
		return p.refuse(apierr.New(503, apierr.CodeAdmissionUnavailable, "the request cannot be accounted for right now; retry"))
	}
	grant, err := p.reserve(ctx, r)
	if err != nil {
		return p.refuse(err)
	}
	p.req, p.route, p.grant, p.recordID = r.req, r.route, grant, id
	// Usage the provider does not report is charged the input reserved
	// (the context window for input by reference), not the estimate.
	p.req.InputTokens = grant.Claim.InputTokens
	p.provider, p.upstream = dst.target.Provider.Name, dst.target.Upstream
	p.state = awaitResponseHeaders
	return resp
}

// resolved is a request body as the gateway reads it: the parsed request
// and the model it names.
type resolved struct {
	req   payload.Request
	route *policies.ModelRoute
	// cacheControl: the body names "cache_control" (as a key, or as a
	// string no JSON text can hold otherwise unescaped), so the provider
	// may write the prompt to its cache: the reservation prices the
	// prompt at the cache-write rates too. A false positive only reserves
	// more.
	cacheControl bool
}

// destination is where an authorized request goes: the target it is
// rewritten for and metered and recorded with (for a fallback model the
// first provider, until the response names the one that answered), and
// the routing header's value.
type destination struct {
	target  policies.Target
	routing string
}

// resolve checks the body's size, parses it and finds its model.
func (p *Processor) resolve(body []byte) (resolved, *apierr.Error) {
	if limit := p.snap.Gateway().MaxRequestBodyBytes; int64(len(body)) > limit {
		return resolved{}, bodyTooLarge(strconv.Itoa(len(body)), limit)
	}
	r, err := parseModel(p.snap, p.ep, body)
	if err == nil {
		// Only the reservation reads it, so only the downstream
		// processor looks (not every fallback attempt's).
		r.cacheControl = namesCacheControl(body)
	}
	return r, err
}

// parseModel parses body as a request to ep and finds the model it names
// in snap (both processors: the upstream one reads the body an attempt
// carries).
func parseModel(snap *policies.Snapshot, ep llmapi.Endpoint, body []byte) (resolved, *apierr.Error) {
	shape := ep
	if ep == llmapi.CountTokens {
		shape = llmapi.Messages // a count_tokens body is a Messages request's
	}
	req, err := payload.Parse(shape, body)
	if err != nil {
		return resolved{}, parseRefusal(err)
	}
	route, ok := snap.Model(req.Model)
	if !ok {
		return resolved{}, modelNotFound(req.Model)
	}
	return resolved{req: req, route: route}, nil
}

// authorize decides whether the caller may send r, and where it goes: the
// key's and the team's allow-lists, the draw of a weighted model's
// provider, the endpoint against the providers that may serve it
// (compatibleRoute), and the gateway's policy for unpriced models.
func (p *Processor) authorize(r resolved) (destination, *apierr.Error) {
	route := r.route
	if !mayUse(p.principal, route) {
		return destination{}, modelNotAllowed(p.principal, r.req.Model)
	}
	var dst destination
	dst.target, dst.routing = route.Route(p.d.random())
	if route.Fallback() && !p.fallback(route) {
		dst.routing = dst.target.Provider.Name // Route's target is the first provider
	}
	if msg := p.compatibleRoute(route); msg != "" {
		return destination{}, unsupportedEndpoint(r.req.Model, msg)
	}
	if !route.Priced && p.snap.Gateway().UnpricedModels == "deny" {
		return destination{}, apierr.New(403, apierr.CodeModelUnpriced, "model %q has no price on this gateway, and unpriced models are refused (gateway.unpriced_models: deny)", route.Name)
	}
	return dst, nil
}

// rewrite is the request-body reply that sends r to dst: the provider
// rewrite (targetRewrite) — for a fallback model only what every provider
// needs, since the upstream processor rewrites each attempt for its
// provider (upstream.go) from the request as the client sent it — the
// routing header, include_usage forced on a streaming chat or completions
// request (so the provider reports usage in the stream; the response is
// then asked for unencoded, so that the usage chunk can be kept from the
// client: usagechunk.go), clear_route_cache, and for a fallback model the
// handoff to the attempts in dynamic metadata.
func (p *Processor) rewrite(body []byte, r resolved, dst destination) (*extprocsvc.ProcessingResponse, *apierr.Error) {
	var hm *extprocsvc.HeaderMutation
	var rw payload.Rewrite
	if p.fallback(r.route) {
		hm = clientCredentialsRemoved()
	} else {
		hm, rw = p.targetRewrite(p.snap, dst.target, r.req.Model)
	}
	hm.SetHeaders = append(hm.SetHeaders, rawHeader(chain.RoutingHeader, dst.routing))
	if forcesUsage(p.ep, r.req) {
		rw.ForceIncludeUsage = true
		hm.SetHeaders = append(hm.SetHeaders, identityEncoding())
	}
	resp, err := reply(body, hm, rw, true)
	if err != nil {
		return nil, err
	}
	if p.fallback(r.route) {
		keys := p.d.principalKeys()
		if keys == nil {
			p.d.refusedPrincipal(context.Background(), reasonNoKeys, "handoff", "model", r.route.Name)
			return nil, handoffRefusal(reasonNoKeys)
		}
		resp.DynamicMetadata = handoffFrom(&p.clientRequest, r.route.Name).Encode(keys, p.d.Now())
	}
	return resp, nil
}

// reply is bodyReply, its failure as the client's refusal; it cannot fail
// on a body payload.Parse accepted.
func reply(body []byte, hm *extprocsvc.HeaderMutation, rw payload.Rewrite, clearRouteCache bool) (*extprocsvc.ProcessingResponse, *apierr.Error) {
	resp, err := bodyReply(body, hm, rw, clearRouteCache)
	if err != nil {
		return nil, apierr.New(400, apierr.CodeInvalidJSON, err.Error())
	}
	return resp, nil
}

// reserve admits r against every limit and budget covering the caller,
// reserving the worst case: the prompt estimate plus the most the reply
// can hold, at the model's price.
func (p *Processor) reserve(ctx context.Context, r resolved) (admission.Grant, *apierr.Error) {
	req, route := r.req, r.route
	maxOut := req.MaxOutputTokens
	switch {
	case p.ep == llmapi.Embeddings:
		maxOut = 0
	case maxOut < 0:
		maxOut = route.MaxOutputTokens
	}
	if req.N > 1 && p.ep != llmapi.Embeddings {
		maxOut = sat.Mul(maxOut, req.N) // every choice may be that long
	}
	// Saturating (internal/sat): a worst case too large for an int64 is
	// math.MaxInt64, more than any limit or budget allows at all, which
	// admission refuses as such.
	maxOut = max(maxOut, 0)
	// The estimate, or the context window for input by reference; work
	// no reservation bounds is refused here (unmetered.go).
	in, refused := p.claimInput(r)
	if refused != nil {
		return admission.Grant{}, refused
	}
	var worst int64 // pico-dollars
	if route.Priced {
		worst = route.Price.WorstCost(in, maxOut, r.cacheControl)
	}
	grant, err := p.d.Admitter.Admit(ctx, admission.Claim{
		Principal: p.principal, Model: route.Name, CountRequest: !p.counted,
		InputTokens: in, MaxOutputTokens: maxOut, CostPico: worst, At: p.d.Now(),
	})
	if err != nil {
		if e, ok := apierr.As(err); ok {
			return admission.Grant{}, e
		}
		return admission.Grant{}, apierr.New(503, apierr.CodeAdmissionUnavailable, "limits cannot be checked right now; retry")
	}
	return grant, nil
}

// compatibleRoute says why the endpoint cannot go to the model's
// providers, or "". A weighted model must be able to send the request to
// any of its providers, so that the answer does not depend on the draw; a
// fallback model is checked against its first provider only, and a later
// one that cannot serve the endpoint refuses the attempt in the upstream
// processor.
func (p *Processor) compatibleRoute(route *policies.ModelRoute) string {
	check := route.Targets[:1]
	if route.Routing == policies.RoutingWeighted {
		check = route.Targets
	}
	for _, t := range check {
		if msg := compatible(p.ep, t.Provider); msg != "" {
			return msg
		}
	}
	return ""
}

// compatible says why an endpoint cannot go to a provider, or "": the
// provider's kind decides (provider.Provider.Unsupported).
func compatible(ep llmapi.Endpoint, pr *policies.Provider) string {
	return adapter(pr).Unsupported(ep, pr.Name)
}

func (p *Processor) responseHeaders(ctx context.Context, h *extprocsvc.HttpHeaders) *extprocsvc.ProcessingResponse {
	if p.state == forwarded {
		p.state = finished
		return headersResponse(p.toClient(p.servedBy(headerGetter(h.GetHeaders()))))
	}
	if p.state != awaitResponseHeaders {
		if p.state == awaitRequestHeaders || p.state == awaitRequestBody {
			p.localReply(h)
			if p.requestID != "" {
				return headersResponse(&extprocsvc.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{rawHeader(chain.RequestIDHeader, p.requestID)}})
			}
		}
		return headersResponse(nil)
	}
	get := headerGetter(h.GetHeaders())
	st, _ := get(":status")
	p.status, _ = strconv.Atoi(st)
	ct, _ := get("content-type")
	ce, _ := get("content-encoding")
	hm := p.toClient(p.servedBy(get))
	// What the covering limits have left: one complete set per kind Sluice
	// limits, the provider's of those kinds renamed (ratelimit.go).
	hm = rateLimitHeaders(hm, p.grant.Remaining.Headers(), h.GetHeaders().GetHeaders())
	// The provider that answered (servedBy above) reads its usage by its
	// own total_tokens rule.
	excess := usage.ExcessAsOutput
	if pr, ok := p.snap.Provider(p.provider); ok && pr.Usage.TotalExcess == policies.TotalExcessIgnore {
		excess = usage.ExcessIgnored
	}
	p.meter = usage.NewMeter(usage.Options{Endpoint: p.ep, Stream: p.req.Stream, ContentType: ct, ContentEncoding: ce, Model: p.upstream,
		TotalExcess: excess})
	p.strip = p.usageFilter(ct, ce)
	p.state = streamingResponse
	resp := headersResponse(hm)
	if h.GetEndOfStream() {
		resp.DynamicMetadata = p.settle(ctx, true)
	}
	return resp
}

// localReply answers the response headers of a request Sluice never
// admitted: another filter's local reply, or Envoy's, which Envoy encodes
// through every encoder filter, ext_proc's included, whether or not
// ext_proc saw the request (FilterManager::sendLocalReplyViaFilterChain) —
// an ext_authz denial (no request headers ever came), the buffer limit's
// 413 (the request headers came, the body never). Nothing was reserved,
// so nothing is metered, recorded or released: the reply passes
// unchanged, its status and body intact (continue, and continue to every
// body chunk), and it is counted.
func (p *Processor) localReply(h *extprocsvc.HttpHeaders) {
	st, _ := headerGetter(h.GetHeaders())(":status")
	if n, err := strconv.Atoi(st); err != nil || n < 100 || n > 599 {
		st = "other"
	}
	p.d.Metrics.localReplies.WithLabelValues(st).Inc()
	p.state = finished
}

// accountHeaders are the account headers of every kind
// (providerkind.AccountHeaders), each once, in the order of
// providerkind.Kinds.
var accountHeaders = sync.OnceValue(func() []string {
	var hs []string
	for _, k := range providerkind.Kinds() {
		for _, h := range providerkind.AccountHeaders(k) {
			if !slices.Contains(hs, h) {
				hs = append(hs, h)
			}
		}
	}
	return hs
})

// toClient adds to hm what every response of an admitted or forwarded
// request gets on its way to the client: the gateway's id of the request
// (chain.RequestIDHeader, the x-request-id seen at request headers; the
// response's own x-request-id is the provider's and passes unchanged), and
// the removal of the response headers that name the provider account the
// gateway's credential belongs to — the account headers of every kind
// (openai-organization, openai-project, anthropic-organization-id, …),
// whatever the answering provider's kind, since an openai-compatible
// server may front any — but those the answering provider's
// forward_client_headers lists. hm may be nil.
func (p *Processor) toClient(hm *extprocsvc.HeaderMutation) *extprocsvc.HeaderMutation {
	if hm == nil {
		hm = &extprocsvc.HeaderMutation{}
	}
	if p.requestID != "" {
		hm.SetHeaders = append(hm.SetHeaders, rawHeader(chain.RequestIDHeader, p.requestID))
	}
	var keep []string
	if pr, ok := p.snap.Provider(p.provider); ok {
		keep = pr.ForwardClientHeaders
	}
	for _, h := range accountHeaders() {
		if !slices.Contains(keep, h) {
			hm.RemoveHeaders = append(hm.RemoveHeaders, h)
		}
	}
	return hm
}

// servedBy reads who answered a fallback request from the served-by
// headers the upstream processor added (the provider, and the model sent
// to it), and returns the mutation that removes them before the response
// reaches the client (nil when there are none). Without them — the request
// failed before any attempt reached Sluice's upstream filter — the first
// provider stays. Only a fallback model's response is believed: for any
// other, the headers can only come from the provider itself, and are just
// removed.
func (p *Processor) servedBy(get func(string) (string, bool)) *extprocsvc.HeaderMutation {
	s, ok := decodeServedBy(get)
	if !ok {
		return nil
	}
	// A passed request has no route: it was sent to its provider as is,
	// and a served-by header on its response is the provider's, removed.
	if p.route != nil && p.fallback(p.route) && s.Provider != "" {
		// No model when the upstream processor refused the attempt:
		// nothing was sent.
		p.provider, p.upstream = s.Provider, s.Model
	}
	return &extprocsvc.HeaderMutation{RemoveHeaders: servedByHeaders()}
}

// responseBody meters a response chunk as it came and, when Sluice forced
// the stream's usage chunk, answers with the chunk the client gets
// instead (filterBody).
func (p *Processor) responseBody(ctx context.Context, b *extprocsvc.HttpBody) *extprocsvc.ProcessingResponse {
	resp, br := responseBodyReply()
	if p.state != streamingResponse {
		return resp
	}
	if len(b.GetBody()) > 0 {
		if p.ttft == 0 {
			p.ttft = p.d.Now().Sub(p.start)
		}
		p.meter.Write(b.GetBody())
	}
	if p.strip != nil {
		br.Response = p.filterBody(b)
	}
	if b.GetEndOfStream() {
		resp.DynamicMetadata = p.settle(ctx, true)
	}
	return resp
}

// responseTrailers ends a response that ended in trailers: Envoy then
// sends no body chunk with end_of_stream (envoy-protocol.md §4), and the
// trailers come after every chunk was answered, so the request is settled
// here, complete, and this reply — the last — carries the usage metadata.
func (p *Processor) responseTrailers(ctx context.Context) *extprocsvc.ProcessingResponse {
	resp := &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocsvc.TrailersResponse{}}}
	if p.state == streamingResponse {
		p.endUsageFilter()
		resp.DynamicMetadata = p.settle(ctx, true)
	}
	return resp
}

// settle closes the meter, charges the request (charge), prices the
// charge, makes the spend record durable and releases the admission; it
// returns the dynamic metadata for the final reply.
func (p *Processor) settle(ctx context.Context, complete bool) *structpb.Struct {
	if p.ended {
		return nil
	}
	p.ended = true
	p.state = finished
	var res usage.Result
	if p.meter != nil {
		res = p.meter.Close(complete, p.req.InputTokens)
	} else {
		res = unmetered(p.req.InputTokens) // cut before response headers
	}
	c := charge(p.status, complete, res, p.req.InputTokens, p.grant.Claim.MaxOutputTokens)
	if c.Outcome == outcomeUnparsed {
		p.d.Metrics.unparsed.WithLabelValues(p.ep.String()).Inc()
	}
	cost := p.price(c.Usage)
	c, cost = p.reservationCharge(c, cost) // background work: its whole reservation (unmetered.go)
	now := p.d.Now()
	rec := p.record(c, cost, now)
	if err := p.appendRecord(context.WithoutCancel(ctx), rec); err != nil {
		p.d.Metrics.ledgerErrors.Inc()
		p.d.Log.Error("spend record not written", "record_id", rec.RequestID, "client_request_id", rec.ClientRequestID, "key_id", p.principal.KeyID, "err", err)
	}
	p.d.Admitter.Settle(ctx, p.grant, admission.Actual{InputTokens: c.Usage[tokens.Input], OutputTokens: c.Usage[tokens.Output], CostPico: cost, At: now})
	p.d.Metrics.observe(rec)
	return usageMetadata(rec)
}

// appendRecord makes rec durable (the ledger's Append) and times it
// (sluice_ledger_commit_seconds). On a stream, the Append runs beside the
// stream's goroutine, which waits for it through await (server.go) and
// asks Envoy for more time if it is slow; without one (Cancel, or a
// processor driven directly) it runs here.
func (p *Processor) appendRecord(ctx context.Context, rec ledger.Record) error {
	start := time.Now()
	defer func() { p.d.Metrics.commit.Observe(time.Since(start).Seconds()) }()
	if p.await == nil {
		return p.d.Ledger.Append(ctx, rec)
	}
	done := make(chan error, 1)
	go func() { done <- p.d.Ledger.Append(ctx, rec) }()
	return p.await(done)
}

// price is what u costs at the model's price in pico-dollars, exactly;
// an unpriced model's request costs 0 and is counted.
func (p *Processor) price(u usage.Usage) int64 {
	if !p.route.Priced {
		p.d.Metrics.unpriced.WithLabelValues(p.route.Name).Inc()
		return 0
	}
	return p.route.Price.Cost(u) // a usage is the tokens the price counts
}

// record is the spend record of the request charged c, costing cost
// pico-dollars, finished at now.
func (p *Processor) record(c charged, cost int64, now time.Time) ledger.Record {
	return ledger.Record{
		RequestID: p.recordID, ClientRequestID: clip(p.requestID, maxClientRequestID),
		KeyID: p.principal.KeyID, Team: p.principal.Team, Org: p.principal.Org,
		Endpoint: p.ep.String(), Model: p.route.Name, Provider: p.provider, UpstreamModel: p.upstream,
		Tokens: c.Usage, CostPico: cost, Priced: p.route.Priced, Status: p.status, Outcome: c.Outcome, ErrorType: c.ErrorType,
		Estimated: c.Estimated, Stream: p.req.Stream, StartedAt: p.start, FinishedAt: now, TTFT: p.ttft,
	}
}

// refuse ends the request with e, in the dialect of the API called.
func (p *Processor) refuse(e *apierr.Error) *extprocsvc.ProcessingResponse {
	p.state = finished
	if p.requestID != "" {
		return denial(p.d.Metrics, p.dialect, e, rawHeader(chain.RequestIDHeader, p.requestID))
	}
	return denial(p.d.Metrics, p.dialect, e)
}

// clip is s cut to at most n bytes, on a UTF-8 character's boundary;
// bytes that are not UTF-8 there are cut as bytes.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for i := 0; i < utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]); i++ {
		cut--
	}
	if !utf8.RuneStart(s[cut]) {
		cut = n
	}
	return s[:cut]
}

func pathOnly(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

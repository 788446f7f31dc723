package extproc

import (
	"strings"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/payload"
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/internal/usage"
	"github.com/sluicegw/sluice/policies"
)

// Input Sluice cannot see and work it cannot meter (docs/limits.md,
// "Input by reference and background work"): the reservation must bound
// what the provider can bill (design.md, "Consistency promises").
//
//   - A prompt that points at content the provider holds or fetches — a
//     file id, a document URL, a stored response, conversation or prompt
//     (payload.Refs) — is reserved at the model's context window, the most
//     input the provider can bill for it, and refused (400
//     input_by_reference) when no window is known. When the reply reports
//     no usage it is charged that input, not the estimate (claimedInput).
//   - A responses request with "background": true is answered at once
//     ("usage": null) and generated later, where Sluice cannot meter it:
//     refused (400 background_not_metered) unless gateway.background is
//     charge_reservation, and then charged its whole reservation
//     (reservationCharge).

// claimInput is the input a claim for r reserves: the prompt estimate, or
// for input by reference the model's context window (at least the
// estimate); or the refusal of a request whose cost no reservation
// bounds.
func (p *Processor) claimInput(r resolved) (int64, *apierr.Error) {
	req := r.req
	if req.Background && p.snap.Gateway().Background != policies.BackgroundChargeReservation {
		e := apierr.New(400, apierr.CodeBackgroundNotMetered,
			`"background": true is not allowed on this gateway: the provider would generate the response after replying, where its usage cannot be metered or limited; send the request without "background" (gateway.background: deny)`)
		e.Param = "background"
		return 0, e
	}
	if !req.ByReference.Any() {
		return req.InputTokens, nil
	}
	w := r.route.ContextWindow
	if w <= 0 {
		return 0, inputByReference(r.route.Name, req.ByReference)
	}
	if p.context1M {
		// The client asked Anthropic for the 1M-token window
		// (anthropic-beta: context-1m-…), which Sluice forwards: the
		// provider may then bill that much.
		w = max(w, context1MTokens)
	}
	return max(w, req.InputTokens), nil
}

// context1MTokens is the window Anthropic's context-1m beta opens.
const context1MTokens = 1_000_000

// asksContext1M reports whether the anthropic-beta header (get) asks for
// the 1M-token context window.
func asksContext1M(get func(string) (string, bool)) bool {
	v, ok := get("anthropic-beta")
	return ok && strings.Contains(strings.ToLower(v), "context-1m")
}

// inputByReference refuses a prompt by reference for a model whose
// context window is unknown, naming the field.
func inputByReference(model string, refs payload.Refs) *apierr.Error {
	e := apierr.New(400, apierr.CodeInputByReference,
		"the request's input includes %s, content this gateway cannot see, and no context window is known for model %q to bound what it may cost; send the content inline, or ask the operator to set models[].context_window",
		refs.String(), model)
	e.Param = refs.First()
	return e
}

// reservationCharge is what a background request is charged: its whole
// reservation — the claim's input and output at its worst-case cost —
// unless the provider refused it (a status other than 2xx; 0, cut before
// the response headers, may have been accepted and is charged). Any other
// request keeps c and cost.
func (p *Processor) reservationCharge(c charged, cost int64) (charged, int64) {
	if !p.req.Background || (p.status != 0 && p.status/100 != 2) {
		return c, cost
	}
	cl := p.grant.Claim
	c.Usage = usage.Usage{tokens.Input: cl.InputTokens, tokens.Output: cl.MaxOutputTokens}
	c.Estimated = true
	if !p.route.Priced {
		return c, cost
	}
	return c, cl.CostPico
}

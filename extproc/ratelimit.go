package extproc

import (
	"slices"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/sluicegw/sluice/internal/admission"
)

// The rate-limit headers of a response (docs/limits.md). For each kind of
// limit Sluice applied to the request — requests, tokens, budget — the
// response carries Sluice's own complete set (admission.Remaining.Headers:
// limit, remaining and reset for requests and tokens, in OpenAI's format)
// and the provider's headers of that kind are renamed with the prefix
// x-upstream- ("x-ratelimit-reset-tokens" becomes
// "x-upstream-ratelimit-reset-tokens", "anthropic-ratelimit-tokens-reset"
// becomes "x-upstream-anthropic-ratelimit-tokens-reset"), so no client
// reads a mix of Sluice's numbers and the provider's as one set, and none
// of the provider's is lost. A kind Sluice did not limit keeps the
// provider's headers as they came.

// Rate-limit kinds, as header names spell them.
const (
	kindRequests = "requests"
	kindTokens   = "tokens"
	kindBudget   = "budget"
)

// kindSet is a set of rate-limit kinds, without a map per response.
type kindSet struct{ requests, tokens, budget bool }

func (s *kindSet) add(kind string) {
	switch kind {
	case kindRequests:
		s.requests = true
	case kindTokens:
		s.tokens = true
	case kindBudget:
		s.budget = true
	}
}

func (s kindSet) has(kind string) bool {
	switch kind {
	case kindRequests:
		return s.requests
	case kindTokens:
		return s.tokens
	case kindBudget:
		return s.budget
	}
	return false
}

// upstreamPrefix starts the name a provider's rate-limit header is renamed
// to when Sluice sends its own of the same kind.
const upstreamPrefix = "x-upstream-"

// rateLimitKind is the kind of limit a response header describes, or "":
// OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens…} (also
// sent by Azure OpenAI and OpenAI-compatible servers, and Sluice's own
// -budget-micro-usd pair), Anthropic's
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,
// remaining,reset}. Every token header is of the one kind tokens, since
// Sluice's x-ratelimit-*-tokens are the tightest of its token windows of
// any kind.
func rateLimitKind(name string) string {
	if rest, ok := strings.CutPrefix(name, "x-ratelimit-"); ok {
		field, unit, _ := strings.Cut(rest, "-")
		if field != "limit" && field != "remaining" && field != "reset" {
			return ""
		}
		switch {
		case strings.HasPrefix(unit, kindRequests):
			return kindRequests
		case strings.Contains(unit, kindTokens):
			return kindTokens
		case strings.HasPrefix(unit, kindBudget):
			return kindBudget
		}
		return ""
	}
	if rest, ok := strings.CutPrefix(name, "anthropic-ratelimit-"); ok {
		switch {
		case strings.HasPrefix(rest, "requests-"):
			return kindRequests
		case strings.HasPrefix(rest, "tokens-"), strings.HasPrefix(rest, "input-tokens-"), strings.HasPrefix(rest, "output-tokens-"):
			return kindTokens
		}
	}
	return ""
}

// upstreamName is what a provider's rate-limit header is renamed to.
func upstreamName(name string) string {
	return upstreamPrefix + strings.TrimPrefix(name, "x-")
}

// rateLimitHeaders adds to hm (nil: a new mutation, when there is
// anything to do) Sluice's rate-limit headers sluice, and renames each of
// the provider's response headers of a kind they cover. Envoy applies a
// mutation's removals before its sets (MutationUtils::applyHeaderMutations
// in source/extensions/filters/http/ext_proc/mutation_utils.cc), and a set
// without append replaces every value of the header, so Sluice's headers
// are the only ones of their names.
func rateLimitHeaders(hm *extprocsvc.HeaderMutation, sluice []admission.Header, provider []*corev3.HeaderValue) *extprocsvc.HeaderMutation {
	if len(sluice) == 0 {
		return hm
	}
	var covered kindSet
	for _, h := range sluice {
		covered.add(rateLimitKind(h.Name))
	}
	if hm == nil {
		hm = &extprocsvc.HeaderMutation{}
	}
	// The provider's, in the order they came, a repeated header's values
	// joined with ',' as one.
	var names []string
	var values map[string][]string // made for the first provider header renamed
	for _, h := range provider {
		k := h.GetKey()
		if !covered.has(rateLimitKind(k)) {
			continue
		}
		if values == nil {
			values = map[string][]string{}
		}
		if _, seen := values[k]; !seen {
			names = append(names, k)
		}
		values[k] = append(values[k], string(h.GetRawValue()))
	}
	for _, k := range names {
		hm.RemoveHeaders = append(hm.RemoveHeaders, k)
		hm.SetHeaders = append(hm.SetHeaders, rawHeader(upstreamName(k), strings.Join(values[k], ",")))
	}
	cells := make([]headerCell, len(sluice)) // Sluice's headers in one allocation
	hm.SetHeaders = slices.Grow(hm.SetHeaders, len(sluice))
	for i, h := range sluice {
		c := &cells[i]
		c.hv.Key, c.hv.RawValue = h.Name, h.Value
		c.opt.Header = &c.hv
		hm.SetHeaders = append(hm.SetHeaders, &c.opt)
	}
	return hm
}

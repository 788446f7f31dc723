package provider

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// The parts of a rewrite more than one kind shares.

// base starts a rewrite: the model renamed to t.Upstream where it differs
// from the name in the request.
func base(t Target, r Request) Rewrite {
	var rw Rewrite
	if t.Upstream != r.Model {
		rw.Body.Model = t.Upstream
	}
	return rw
}

// prefixed puts the base URL's path prefix before the client's path.
func (rw *Rewrite) prefixed(t Target, r Request) {
	if t.PathPrefix != "" {
		rw.set(":path", t.PathPrefix+r.Path)
	}
}

func (rw *Rewrite) set(k, v string) { rw.Set = append(rw.Set, Header{k, v}) }

// credential sets the provider credential k: v and removes the client's
// account headers of kind, but those t forwards.
func (rw *Rewrite) credential(kind Kind, t Target, k, v string) {
	rw.set(k, v)
	for _, h := range AccountHeaders(kind) {
		if !slices.Contains(t.ForwardClientHeaders, h) {
			rw.Remove = append(rw.Remove, h)
		}
	}
}

// forwardable checks forward_client_headers for kind: each one of its
// AccountHeaders (case-insensitive), once; it returns them lower-cased.
func forwardable(kind Kind, s Settings) ([]string, []Problem) {
	var ps []Problem
	var out []string
	allowed := AccountHeaders(kind)
	for i, h := range s.ForwardClientHeaders {
		field := fmt.Sprintf("forward_client_headers[%d]", i)
		lh := strings.ToLower(strings.TrimSpace(h))
		switch {
		case slices.Contains(apikey.CredentialHeaders, lh):
			ps = append(ps, Problem{field, fmt.Sprintf("%q is a credential header: the caller's credential never reaches a provider", h)})
		case !slices.Contains(allowed, lh):
			ps = append(ps, Problem{field, fmt.Sprintf("%q is not an account header of kind %q (one of %s); other client headers are forwarded already", h, kind, strings.Join(allowed, ", "))})
		case slices.Contains(out, lh):
			ps = append(ps, Problem{field, fmt.Sprintf("%q is listed twice", h)})
		default:
			out = append(out, lh)
		}
	}
	return out, ps
}

// done removes the caller's credential headers, except the one the
// provider's credential is set in (a set overwrites it), and returns rw.
func (rw *Rewrite) done() Rewrite {
	for _, k := range apikey.CredentialHeaders {
		if !rw.Sets(k) {
			rw.Remove = append(rw.Remove, k)
		}
	}
	return *rw
}

// openAIFamily is the endpoint check of the kinds speaking the OpenAI API:
// the Anthropic Messages API's endpoints (messages, count_tokens) refused.
func openAIFamily(ep llmapi.Endpoint, name string) string {
	if ep.Dialect() == llmapi.Anthropic {
		return fmt.Sprintf("its provider %q speaks the OpenAI API; call /v1/chat/completions", name)
	}
	return ""
}

// onlyFor reports the version fields a kind does not take.
func onlyFor(k Kind, s Settings) []Problem {
	var ps []Problem
	if k != KindAzureOpenAI && s.APIVersion != "" {
		ps = append(ps, Problem{"api_version", fmt.Sprintf("only allowed for kind %q", KindAzureOpenAI)})
	}
	if k != KindAnthropic && s.AnthropicVersion != "" {
		ps = append(ps, Problem{"anthropic_version", fmt.Sprintf("only allowed for kind %q", KindAnthropic)})
	}
	return ps
}

// keyRequired reports a missing api_key for kind k.
func keyRequired(k Kind, s Settings) []Problem {
	if s.HasAPIKey {
		return nil
	}
	return []Problem{{"api_key", fmt.Sprintf("required for kind %q", k)}}
}

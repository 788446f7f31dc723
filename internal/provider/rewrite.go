package provider

import (
	"fmt"
	"slices"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/providerkind"
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
func (rw *Rewrite) credential(kind providerkind.Kind, t Target, k, v string) {
	rw.set(k, v)
	for _, h := range providerkind.AccountHeaders(kind) {
		if !slices.Contains(t.ForwardClientHeaders, h) {
			rw.Remove = append(rw.Remove, h)
		}
	}
}

// done removes the caller's credential headers, except the one the
// provider's credential is set in (a set overwrites it), and returns rw.
func (rw *Rewrite) done() Rewrite {
	for _, k := range llmapi.CredentialHeaders {
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

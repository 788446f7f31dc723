package extproc

import (
	"fmt"
	"strings"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// unknown answers a request whose path, as sent, is no endpoint Sluice
// knows (llmapi.EndpointFor compares the raw path), by what its canonical
// form is (llmapi.ClassifyPath), the same under unknown_paths pass and
// deny:
//
//   - an endpoint Sluice serves spelled otherwise (/v1/chat%2Fcompletions,
//     /v1//messages/, /V1/chat/completions;x, …), or Azure's path for one
//     (/openai/deployments/d/chat/completions), is refused: 400
//     non_canonical_path, naming the path to send. Refusing rather than
//     metering it as its endpoint is the one simple and safe rule: every
//     metered request then has exactly the path Sluice meters, with no
//     second spelling for a rewrite to get right, and no client sends
//     these paths (the SDKs write the canonical ones);
//   - a path with no one canonical form (a double encoding such as
//     %252F, a control character, a broken escape) is refused the same
//     way: what a provider would make of it cannot be known;
//   - any other path is unknown: under pass it goes to the pass_to
//     provider of its API with its CANONICAL path, never the raw one, so
//     that a provider which cleans paths itself cannot turn it into a
//     metered endpoint; under deny (or with no pass_to provider) 404
//     unknown_path.
func (p *Processor) unknown(get func(string) (string, bool)) *extprocsvc.ProcessingResponse {
	c := llmapi.ClassifyPath(p.path)
	p.dialect = c.Dialect(get)
	switch {
	case c.Reserved():
		return p.refuse(nonCanonicalPath(p.method, pathOnly(p.path), c))
	case c.Suspicious:
		return p.refuse(ambiguousPath(p.method, pathOnly(p.path)))
	}
	if e := notMetered(c.Canonical); e != nil {
		return p.refuse(e)
	}
	if pr := p.snap.PassTo(p.dialect); pr != nil {
		return p.pass(pr, c.Canonical)
	}
	return p.refuse(unknownPath(p.method, pathOnly(p.path)))
}

// unmeteredPrefixes are APIs that bill for model work Sluice does not
// meter, so never passed: the batch APIs of OpenAI and Anthropic (work
// billed later, asynchronously), Anthropic's legacy Text Completions, and
// OpenAI's Realtime API (its client secrets are keys a client then uses at
// the provider directly). Compared without case, as endpoints are.
var unmeteredPrefixes = []struct{ prefix, what string }{
	{"/v1/realtime", "OpenAI's Realtime API, whose sessions and client secrets this gateway cannot meter; it is refused"},
	{"/v1/batches", "a batch API: its work is billed later, where this gateway cannot meter it; send the requests one by one"},
	{"/v1/messages/batches", "a batch API: its work is billed later, where this gateway cannot meter it; send the requests one by one"},
	{"/v1/complete", "Anthropic's legacy Text Completions API, which this gateway does not meter; use /v1/messages"},
}

// notMetered is the refusal of a call to an API of unmeteredPrefixes
// (canon is the canonical path, query included), or nil for any other.
func notMetered(canon string) *apierr.Error {
	path := strings.ToLower(pathOnly(canon))
	for _, u := range unmeteredPrefixes {
		if path == u.prefix || strings.HasPrefix(path, u.prefix+"/") {
			return apierr.New(400, apierr.CodeNotMetered, "%s is %s", pathOnly(canon), u.what)
		}
	}
	return nil
}

// nonCanonicalPath refuses an endpoint Sluice serves, or Azure's path for
// one, called by another spelling of its path.
func nonCanonicalPath(method, path string, c llmapi.PathClass) *apierr.Error {
	if want := c.Want(); want != "" {
		what := "is not the canonical form of " + want
		if c.Azure {
			what = "is Azure OpenAI's path for " + want + "; this gateway writes it itself"
		}
		e := apierr.New(400, apierr.CodeNonCanonicalPath, "%s %s; send %s %s", path, what, c.Endpoint.Method(), want)
		e.OpenAIMessage = fmt.Sprintf("Invalid URL (%s %s): send %s %s.", method, path, c.Endpoint.Method(), want)
		return e
	}
	// An Azure path for an operation Sluice does not serve.
	return apierr.New(400, apierr.CodeNonCanonicalPath, "%s is an Azure OpenAI deployment path, which this gateway writes itself; call the OpenAI API's path (/v1/chat/completions, /v1/completions, /v1/embeddings)", path)
}

// ambiguousPath refuses a path with no one canonical form.
func ambiguousPath(method, path string) *apierr.Error {
	const why = "holds a double-encoded character (%25 followed by hex digits), a control character, a space or a broken escape; send the path encoded once"
	e := apierr.New(400, apierr.CodeNonCanonicalPath, "%s %s", path, why)
	e.OpenAIMessage = fmt.Sprintf("Invalid URL (%s %s): it %s.", method, path, why)
	return e
}

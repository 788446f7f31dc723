// Package providerkind owns the kinds of upstream LLM API a provider in
// sluice.yaml can be (providers[].kind) as configuration sees them: the
// YAML names (Kind, Kinds), the API dialect each speaks, the account
// headers its clients select an account with (AccountHeaders), and the
// validation and defaults of each kind's own fields (Kind.Configure).
// policies validates and compiles a config with it.
//
// What a kind does to a request — the endpoints it serves, its rewrite —
// is internal/provider's, which maps a Kind to its adapter (provider.For)
// where a request is served. Adding a kind is a case here and a file and
// a case in internal/provider.
//
// It is a leaf: it imports llmapi alone, and must not import policies,
// internal/provider or anything else on the request path, since policies
// sits below every package that serves requests.
package providerkind

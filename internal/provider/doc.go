// Package provider owns what differs between the kinds of upstream LLM API
// Sluice sends requests to: one file per kind (openai.go, azure.go,
// anthropic.go, compatible.go), each owning its API dialect, the endpoints
// it serves (and the message when it does not), how a request is rewritten
// for it — credential header, path (base-URL prefix; Azure's deployment
// path with api-version), anthropic-version, the model name in the body,
// the caller's credential headers removed, and, when Sluice injects the
// credential, the client's account headers (AccountHeaders) removed but
// those forward_client_headers keeps — and the validation and
// defaults of its configuration fields. Kind is the YAML name; For is the
// one switch from a Kind to its Provider, resolved once when the policy
// compiles (policies.Provider.Impl), so the request path never switches
// on a kind and an unknown kind never reaches it.
//
// Adding a kind is a file here and a case in For; the compiler then asks
// for everything the Provider interface needs.
//
// It takes plain values (Settings, Target, Request) and returns a
// description of the change (Rewrite: headers to set and remove, a
// payload.Rewrite for the body); extproc turns that into Envoy's protos,
// so this package stays free of them. It must not import policies (which
// imports it), Envoy protos, or anything that does I/O, and it never logs:
// a Target and a Rewrite carry the provider credential.
package provider

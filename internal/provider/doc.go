// Package provider owns what a kind of upstream LLM API does to a request
// Sluice sends it: one file per kind (openai.go, azure.go, anthropic.go,
// compatible.go), each owning the endpoints it serves (and the message
// when it does not) and how a request is rewritten for it — credential
// header, path (base-URL prefix; Azure's deployment path with
// api-version), anthropic-version, the model name in the body, the
// caller's credential headers removed, and, when Sluice injects the
// credential, the client's account headers (providerkind.AccountHeaders)
// removed but those forward_client_headers keeps. For is the one switch
// from a kind to its Provider, called where a request is served; the kind
// itself, its dialect and the checks and defaults of its configuration
// fields are internal/providerkind's, which policies validates with, so an
// unknown kind never reaches the request path.
//
// Adding a kind is a case in providerkind, a file here and a case in For;
// the compiler then asks for everything the Provider interface needs.
//
// It takes plain values (Target, Request) and returns a description of
// the change (Rewrite: headers to set and remove, a payload.Rewrite for
// the body); extproc turns that into Envoy's protos, so this package stays
// free of them. It must not import policies (which sits below the request
// path and must not reach it), Envoy protos, or anything that does I/O,
// and it never logs: a Target and a Rewrite carry the provider credential.
package provider

package extproc

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/policies"
)

// TestPathClassification: every spelling of a path Sluice serves other
// than its own is refused with 400 non_canonical_path under pass and deny
// alike, never forwarded; a path that is unknown once canonical is passed
// with its canonical path (the provider's prefix before it) or, under
// deny, 404; a path Sluice knows as sent goes on to its body.
func TestPathClassification(t *testing.T) {
	const (
		body     = "body"               // a known endpoint: on to the request body
		answered = "answered"           // answered by Sluice itself (models)
		refused  = "non_canonical_path" // 400
		batchAPI = "not_metered"        // 400
		unknown  = "unknown_path"       // 404
	)
	for _, tt := range []struct {
		path string
		// pass is the outcome under unknown_paths: pass: one of the
		// above, or the :path sent to the provider ("" when the
		// client's is sent unchanged).
		pass, deny string
	}{
		{"/v1/chat/completions", body, body},
		// Batch APIs: billed later, never passed.
		{"/v1/batches", batchAPI, batchAPI},
		{"/v1/batches/batch_1/cancel", batchAPI, batchAPI},
		{"/v1/messages/batches", batchAPI, batchAPI},
		{"/v1//messages/batches/", batchAPI, batchAPI},
		{"/v1/batchesx", "", unknown},
		{"/v1/complete", batchAPI, batchAPI},
		{"/v1/Batches", batchAPI, batchAPI},
		{"/V1/MESSAGES/BATCHES", batchAPI, batchAPI},
		{"/v1/Complete", batchAPI, batchAPI},
		{"/v1/messages/Batches/x/results", batchAPI, batchAPI},
		{"/v1/realtime/client_secrets", batchAPI, batchAPI},
		{"/v1/chat/completions%3Fx", refused, refused},
		{"/v1/chat/completions%23x", refused, refused},
		{"/v1/chat/completions.", refused, refused},
		{"/v1/chat/completions?x=%2F", body, body},
		{"/v1/models/org%2Fmodel", answered, answered},
		// An endpoint spelled otherwise.
		{"/v1/chat%2Fcompletions", refused, refused},
		{"/v1%2Fchat%2Fcompletions", refused, refused},
		{"/v1/chat/completion%73", refused, refused},
		{"/v1/chat%5Ccompletions", refused, refused},
		{`/v1\chat\completions`, refused, refused},
		{"/v1/chat/completions/", refused, refused},
		{"//v1/chat/completions", refused, refused},
		{"/v1//chat/completions", refused, refused},
		{"/v1/./chat/completions", refused, refused},
		{"/v1/x/../chat/completions", refused, refused},
		{"/../v1/chat/completions", refused, refused},
		{"/v1/x/%2E%2E/chat/completions", refused, refused},
		{"/v1/chat/completions;x", refused, refused},
		{"/v1/x/..;y/chat/completions", refused, refused},
		{"/V1/chat/completions", refused, refused},
		{"/v1/Chat/Completions", refused, refused},
		{"/v1/CHAT/COMPLETIONS?stream=true", refused, refused},
		{"/v1/messages/", refused, refused},
		{"/v1//messages", refused, refused},
		{"/v1/messages/count_tokens/", refused, refused},
		{"/v1/embeddings;", refused, refused},
		{"/v1/responses/.", refused, refused},
		{"/v1/completions%2F", refused, refused},
		{"/v1/models/", refused, refused},
		{"/v1//models/gpt-4o", refused, refused},
		// Azure's paths.
		{"/openai/deployments/gpt-4o/chat/completions", refused, refused},
		{"/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21", refused, refused},
		{"/openai/deployments/gpt-4o/embeddings", refused, refused},
		{"/openai/deployments/gpt-4o/audio/speech", refused, refused},
		{"/openai/v1/chat/completions", refused, refused},
		{"/OpenAI/Deployments/d/Completions", refused, refused},
		// No one canonical form.
		{"/v1/chat%252Fcompletions", refused, refused},
		{"/v1/chat%25%32Fcompletions", refused, refused},
		{"/v1/chat/completions%00", refused, refused},
		{"/v1/files/%zz", refused, refused},
		// Unknown once canonical: passed with the canonical path.
		{"/v1/files", "", unknown},
		{"/v1/files?purpose=batch", "", unknown},
		{"/v1/files/", "/v1/files", unknown},
		{"/v1//files/./x/../file-1;v=2?limit=%2F", "/v1/files/file-1?limit=%2F", unknown},
		{"/V1/batches", batchAPI, batchAPI},
		{"/v1/chat/completions/..", "/v1/chat", unknown},
		{"/v1/chat/completions%3Bx", refused, refused},
		{"/v1/messages/batches/x", batchAPI, batchAPI},
		{"/v1//messages/batches/x/", batchAPI, batchAPI},
		{"/v1//messages/other/", "/prefix/v1/messages/other", unknown},
		{"/v1/messages%2Fbatches", batchAPI, batchAPI},
		{"/openai/v1/files", "", unknown},
	} {
		for _, mode := range []string{"pass", "deny"} {
			want := tt.deny
			gateway := "gateway: {unknown_paths: deny}\nproviders:"
			if mode == "pass" {
				want = tt.pass
				gateway = "gateway: {unknown_paths: pass, pass_to: {openai: openai, anthropic: claude}}\nproviders:"
			}
			t.Run(mode+tt.path, func(t *testing.T) {
				d, led := newDeps(t)
				snap, ring, _ := compileTestPolicy(t, strings.Replace(testConfig, "providers:", gateway, 1))
				d.Policy, d.Ring = func() *policies.Snapshot { return snap }, ring
				p := NewProcessor(d)
				m := reqHeaders(tt.path, false, authzMeta("config:k"))
				if strings.HasPrefix(tt.path, "/v1/models") {
					for _, h := range m.GetRequestHeaders().GetHeaders().GetHeaders() {
						if h.GetKey() == ":method" {
							h.RawValue = []byte("GET")
						}
					}
				}
				r := p.Handle(testctx.Deadline(t), m)
				ir := r.GetImmediateResponse()
				switch want {
				case body:
					if r.GetRequestHeaders() == nil || p.state != awaitRequestBody {
						t.Fatalf("not on to the body: %s", prototext.Format(r))
					}
				case answered:
					if !strings.HasPrefix(ir.GetDetails(), "sluice_model") { // sluice_models, sluice_model, sluice_model_not_found
						t.Fatalf("not answered: %s", prototext.Format(r))
					}
				case refused, unknown, batchAPI:
					status := map[string]int32{refused: 400, unknown: 404, batchAPI: 400}[want]
					if int32(ir.GetStatus().GetCode()) != status || ir.GetDetails() != "sluice_"+want {
						t.Fatalf("want %d %s, got %s", status, want, prototext.Format(r))
					}
				default: // passed
					hr := r.GetRequestHeaders().GetResponse()
					if hr == nil || p.state != forwarded {
						t.Fatalf("not passed: %s", prototext.Format(r))
					}
					got, set := setHeaders(hr.GetHeaderMutation())[":path"]
					if want == "" && set || want != "" && got != want {
						t.Errorf(":path set %q (%v), want %q", got, set, want)
					}
				}
				if len(led.records) != 0 {
					t.Errorf("records %v", led.records)
				}
			})
		}
	}
}

// TestNonCanonicalPathMessage: the refusal names the path to send, in the
// dialect of the API called.
func TestNonCanonicalPathMessage(t *testing.T) {
	for path, want := range map[string]string{
		"/v1/chat%2Fcompletions":                 `send POST /v1/chat/completions`,
		"/v1//messages":                          `"type":"invalid_request_error","message":"/v1//messages is not the canonical form of /v1/messages; send POST /v1/messages"`,
		"/openai/deployments/d/chat/completions": `send POST /v1/chat/completions`,
		"/v1/chat%252Fcompletions":               `double-encoded`,
	} {
		d, _ := newDeps(t)
		r := NewProcessor(d).Handle(testctx.Deadline(t), reqHeaders(path, false, authzMeta("config:k")))
		if b := string(r.GetImmediateResponse().GetBody()); !strings.Contains(b, want) {
			t.Errorf("%s: body %s, want %s", path, b, want)
		}
	}
}

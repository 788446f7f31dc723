package extproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/testenv"
)

// stackChildEnv makes TestHandlingFitsTheFirstStack, in the child process
// it starts, run the sequences itself.
const stackChildEnv = "SLUICE_EXTPROC_STACK_CHILD"

// grpcDepth is how much of a handler goroutine's stack gRPC's frames take
// below Server.Process (grpc-go v1.85 with a stream worker and
// internal/grpcguard's interceptor: 1.9 KiB, read from a goroutine dump of
// a serving process), rounded up.
const grpcDepth = 2 << 10

// TestHandlingFitsTheFirstStack: every kind of request's handling, on top
// of gRPC's own frames, fits in the 8 KiB a goroutine starts with, so an
// open stream's handler goroutine never grows to 16 (one that grows keeps
// the larger stack while its stream stays open; see
// e2e.TestOpenStreamsKeepSmallStacks). A child process runs the sequences
// under debug.SetMaxStack(8 KiB), which turns any growth beyond that into
// a crash whose traceback shows the frames that needed it.
func TestHandlingFitsTheFirstStack(t *testing.T) {
	if testenv.Race {
		t.Skip("the race detector enlarges every stack frame; make test runs this test without it")
	}
	if os.Getenv(stackChildEnv) != "" {
		stackChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHandlingFitsTheFirstStack$", "-test.count=1")
	cmd.Env = append(os.Environ(), stackChildEnv+"=1", "GOTRACEBACK=system")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "stack child: ok") {
		t.Fatalf("the child failed (%v); a \"goroutine stack exceeds\" traceback shows the frames that outgrew 8 KiB:\n%s", err, out)
	}
	t.Logf("%s", out)
}

// stackChild runs each sequence on a goroutine of its own, below
// grpcDepth of padding, with stacks limited to 8 KiB; it prints each
// sequence's name as it passes, and "stack child: ok" at the end.
func stackChild(t *testing.T) {
	ctx := context.Background()
	meta := authzMeta("config:k")
	chunk := func(i int) *extprocsvc.ProcessingRequest {
		return respBody(fmt.Sprintf("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word%d\"},\"finish_reason\":null}],\"usage\":null}\n\n", i), false)
	}
	stream := []*extprocsvc.ProcessingRequest{
		reqHeaders("/v1/chat/completions", false, meta),
		reqBody(`{"model":"mini","stream":true,"messages":[{"role":"user","content":"Hello there, how are you today?"}]}`),
		respHeaders("200", "text/event-stream"),
	}
	for i := range 20 {
		stream = append(stream, chunk(i))
	}
	stream = append(stream, respBody("data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":20,\"total_tokens\":32}}\n\ndata: [DONE]\n\n", true))

	anthropic := []*extprocsvc.ProcessingRequest{
		reqHeaders("/v1/messages", false, meta),
		reqBody(`{"model":"sonnet","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"hi"}]}`),
		respHeaders("200", "text/event-stream"),
		respBody("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n", false),
		respBody("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n", false),
		respBody("event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", true),
	}
	direct := []*extprocsvc.ProcessingRequest{
		reqHeaders("/v1/chat/completions", false, nil, "authorization", "Bearer "+testKey),
		reqBody(`{"model":"mini","messages":[{"role":"user","content":"again"}]}`),
		respHeaders("200", "application/json"),
		respBody(chatJSON, true),
	}
	sequences := []struct {
		name     string
		upstream bool
		refused  bool
		msgs     []*extprocsvc.ProcessingRequest
	}{
		{"chat", false, false, []*extprocsvc.ProcessingRequest{
			reqHeaders("/v1/chat/completions", false, meta),
			reqBody(`{"model":"mini","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Hello"}]}`),
			respHeaders("200", "application/json"),
			respBody(chatJSON, true),
		}},
		{"chat stream", false, false, stream},
		{"anthropic messages stream", false, false, anthropic},
		{"embeddings", false, false, []*extprocsvc.ProcessingRequest{
			reqHeaders("/v1/embeddings", false, meta),
			reqBody(`{"model":"mini","input":["a","b"]}`),
			respHeaders("200", "application/json"),
			respBody(`{"object":"list","data":[],"model":"m","usage":{"prompt_tokens":2,"total_tokens":2}}`, true),
		}},
		{"unknown model", false, true, []*extprocsvc.ProcessingRequest{
			reqHeaders("/v1/chat/completions", false, meta),
			reqBody(`{"model":"nosuch","messages":[]}`),
		}},
		{"malformed body", false, true, []*extprocsvc.ProcessingRequest{
			reqHeaders("/v1/chat/completions", false, meta),
			reqBody(`{"model":`),
		}},
		// The team allows 2 requests a minute: run after two others (see
		// run), this one is refused. Without ext_authz's metadata, ext_proc
		// authenticates the key and counts the request itself.
		{"rate limited", false, true, direct},
		{"provider error", false, false, []*extprocsvc.ProcessingRequest{
			reqHeaders("/v1/chat/completions", false, meta),
			reqBody(`{"model":"mini","messages":[]}`),
			respHeaders("500", "application/json"),
			respBody(`{"error":{"message":"upstream exploded","type":"server_error"}}`, true),
		}},
		{"fallback attempt", true, false, []*extprocsvc.ProcessingRequest{
			withHost(reqHeaders("/v1/chat/completions", false, fallbackHandoff("fb"), chain.RoutingHeader, "sluice.fallback.fb", chain.AttemptCountHeader, "1"), "az"),
			reqBody(`{"model":"fb","messages":[]}`),
			respHeaders("200", "application/json"),
		}},
	}
	// Each sequence has limits of its own (fresh Deps), so that it takes
	// its own path; "rate limited" follows two requests that use them up.
	deps := make([][2]*Deps, len(sequences))
	for i := range deps {
		deps[i][0], _ = newDeps(t)
		deps[i][1], _ = newDeps(t)
	}
	// one runs a request and reports whether it was refused (an
	// immediate response).
	one := func(d *Deps, upstream bool, msgs []*extprocsvc.ProcessingRequest) (refused bool) {
		done := make(chan struct{})
		go padded(func() {
			defer close(done)
			var h handler = NewProcessor(d)
			if upstream {
				h = NewUpstreamProcessor(d)
			}
			for _, m := range msgs {
				if h.Handle(ctx, m).GetImmediateResponse() != nil {
					refused = true
					break
				}
			}
			h.Cancel(ctx)
		})
		<-done
		return refused
	}
	run := func(pass int) {
		for i, s := range sequences {
			d := deps[i][pass]
			if s.name == "rate limited" {
				one(d, false, direct)
				one(d, false, direct)
			}
			if refused := one(d, s.upstream, s.msgs); refused != s.refused {
				t.Errorf("%s: refused %v, want %v: the sequence does not take the path it is named for", s.name, refused, s.refused)
			}
			if pass == 1 {
				fmt.Printf("%s: fits\n", s.name)
			}
		}
	}
	// Once unlimited, as a serving process has done long before: what
	// happens once per process (encoding/json building its encoder for a
	// type, a sync.Once) is not what each stream's goroutine does. Then
	// again, limited.
	run(0)
	debug.SetMaxStack(8 << 10)
	run(1)
	fmt.Println("stack child: ok")
}

// padded calls f below a frame of about grpcDepth bytes.
//
//go:noinline
func padded(f func()) {
	var pad [grpcDepth - 64]byte
	f()
	keep(pad[:])
}

//go:noinline
func keep([]byte) {}

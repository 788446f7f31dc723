package extproc

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/internal/grpcguard"
	"github.com/sluicegw/sluice/internal/testctx"
)

// fakeStream is an ext_proc stream that delivers msgs, then err.
type fakeStream struct {
	grpc.ServerStream // nil: only what Process uses is implemented
	ctx               context.Context
	msgs              []*extprocsvc.ProcessingRequest
	err               error
	sent              int
}

func (s *fakeStream) Context() context.Context { return s.ctx }

func (s *fakeStream) Recv() (*extprocsvc.ProcessingRequest, error) {
	if len(s.msgs) == 0 {
		return nil, s.err
	}
	m := s.msgs[0]
	s.msgs = s.msgs[1:]
	return m, nil
}

func (s *fakeStream) Send(*extprocsvc.ProcessingResponse) error { s.sent++; return nil }

// TestProcessReturnsStreamErrors: a stream Envoy ends (EOF) or whose
// context ended is over without an error; any other receive error is
// returned, for gRPC to report. Either way the request is settled.
func TestProcessReturnsStreamErrors(t *testing.T) {
	reset := errors.New("stream reset")
	for _, tt := range []struct {
		name     string
		err      error
		ctxEnded bool
		want     error
	}{
		{"end of stream", io.EOF, false, nil},
		{"receive error", reset, false, reset},
		{"receive error after the context ended", reset, true, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, led := newDeps(t)
			ctx, cancel := context.WithCancel(testctx.Deadline(t))
			defer cancel()
			if tt.ctxEnded {
				cancel()
			}
			s := &fakeStream{ctx: ctx, err: tt.err, msgs: []*extprocsvc.ProcessingRequest{
				reqHeaders("/v1/chat/completions", false, authzMeta("config:k")),
				reqBody(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`),
				respHeaders("200", "application/json"),
			}}
			if err := NewServer(d).Process(s); !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Errorf("Process returned %v, want %v", err, tt.want)
			}
			if s.sent != 3 || len(led.records) != 1 || led.records[0].Outcome != "cancelled" {
				t.Errorf("%d replies, records %+v; want 3 replies and the request settled, cancelled", s.sent, led.records)
			}
		})
	}
}

// panickingAuth is an Authenticator that panics, standing for a bug in
// handling the first message.
type panickingAuth struct{}

func (panickingAuth) Authenticate(func(string) (string, bool)) authz.Decision { panic("boom") }

// TestPanicLogNamesTheStream: the log line of a panic recovered in a
// stream names the request by whatever its first message carried — its
// x-request-id, its path without the query — and by nothing it did not.
func TestPanicLogNamesTheStream(t *testing.T) {
	for _, tt := range []struct {
		name     string
		headers  []string
		want     []string
		wantNone []string
	}{
		{"id and path", []string{":path", "/v1/chat/completions?key=sk-secret", "x-request-id", "rid-7"},
			[]string{"request_id=rid-7", "path=/v1/chat/completions "}, []string{"sk-secret"}},
		{"id only", []string{"x-request-id", "rid-7"}, []string{"request_id=rid-7"}, nil},
		{"path only", []string{":path", "/v1/embeddings"}, []string{"path=/v1/embeddings"}, nil},
		{"neither", nil, nil, []string{"request_id=", "path="}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, _ := newDeps(t)
			d.Auth = panickingAuth{}
			var logs bytes.Buffer
			g := grpcguard.New(slog.New(slog.NewTextHandler(&logs, nil)), prometheus.NewRegistry())
			s := &fakeStream{ctx: testctx.Deadline(t), err: io.EOF, msgs: []*extprocsvc.ProcessingRequest{
				{Request: &extprocsvc.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocsvc.HttpHeaders{Headers: hdrs(tt.headers...)}}},
			}}
			err := g.Stream(nil, s, &grpc.StreamServerInfo{FullMethod: "/envoy.service.ext_proc.v3.ExternalProcessor/Process"},
				func(_ any, ss grpc.ServerStream) error {
					// The guard's stream carries the identity in its
					// context; the fake delivers the messages.
					s.ctx = ss.Context()
					return NewServer(d).Process(s)
				})
			if err == nil {
				t.Fatal("a panicking stream returned no error")
			}
			line := logs.String()
			for _, w := range tt.want {
				if !strings.Contains(line, w) {
					t.Errorf("panic log %q lacks %q", line, w)
				}
			}
			for _, w := range tt.wantNone {
				if strings.Contains(line, w) {
					t.Errorf("panic log %q has %q", line, w)
				}
			}
		})
	}
}

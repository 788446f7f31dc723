package extproc_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/tools/txtar"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/sluicegw/sluice/authz"
	"github.com/sluicegw/sluice/extproc"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/internal/testctx"
	"github.com/sluicegw/sluice/policies"
)

var update = flag.Bool("update", false, "rewrite the expected sections of extproc/testdata/*.txtar")

// goldenKey is the API key the golden configs declare as
// ${GOLDEN_KEY_SHA256}; a request authenticated from its headers sends it.
const goldenKey = "sk-sluice-GOLDEN6789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefg"

// goldenStart is when a golden file's first message arrives; every step
// (a message, a cancel, the end of the file) comes one second later.
var goldenStart = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// TestGolden replays every testdata/*.txtar: a sluice.yaml, the
// ext_proc messages Envoy sends on one or more streams, and the replies,
// spend records and admission calls Sluice must make. It drives the
// Server over in-process gRPC, through extproc's exported API only, so
// the files pin the wire behaviour whatever the processor's internals.
// docs/testing.md describes the format;
// go test ./extproc -run Golden -update rewrites the expected sections.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no testdata/*.txtar")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			runGolden(t, file)
		})
	}
}

// sectionName is a message section: "N.request", "N.STREAM.request",
// "N.response", "N.STREAM.response", "N.cancel", "N.STREAM.cancel".
var sectionName = regexp.MustCompile(`^([0-9]+)(?:\.([a-z0-9-]+))?\.(request|response|cancel)$`)

// step is one request or cancel of a golden file.
type step struct {
	label  string // N, and .STREAM when the file named it
	stream string
	cancel bool
	req    *extprocsvc.ProcessingRequest
	want   *extprocsvc.ProcessingResponse // nil: no expected section yet
}

type goldenFile struct {
	comment []byte
	config  []byte
	rand    map[string]uint64 // stream → draw; "" for every stream
	randRaw []byte
	steps   []*step
	ledger  []ledger.Record
	admit   []admissionCall
	has     map[string]bool // the expected sections present
}

func parseGolden(data []byte) (*goldenFile, error) {
	a := txtar.Parse(data)
	g := &goldenFile{comment: a.Comment, rand: map[string]uint64{}, has: map[string]bool{}}
	for _, f := range a.Files {
		switch f.Name {
		case "sluice.yaml":
			g.config = f.Data
			continue
		case "rand":
			g.randRaw = f.Data
			for line := range strings.Lines(string(f.Data)) {
				line = strings.TrimSpace(line)
				if line == "" {
					continue
				}
				stream, v, ok := strings.Cut(line, ":")
				if !ok {
					stream, v = "", stream
				}
				n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("rand: %q: want a number or STREAM: number", line)
				}
				g.rand[strings.TrimSpace(stream)] = n
			}
			continue
		case "ledger":
			g.has["ledger"] = true
			if err := strictJSON(f.Data, &g.ledger); err != nil {
				return nil, fmt.Errorf("ledger: %w", err)
			}
			continue
		case "admission":
			g.has["admission"] = true
			if err := strictJSON(f.Data, &g.admit); err != nil {
				return nil, fmt.Errorf("admission: %w", err)
			}
			continue
		}
		m := sectionName.FindStringSubmatch(f.Name)
		if m == nil {
			return nil, fmt.Errorf("section %q: want sluice.yaml, rand, N[.STREAM].request, N[.STREAM].response, N[.STREAM].cancel, ledger or admission", f.Name)
		}
		label, stream, kind := strings.TrimSuffix(f.Name, "."+m[3]), m[2], m[3]
		if stream == "" {
			stream = "downstream"
		}
		switch kind {
		case "request":
			req := &extprocsvc.ProcessingRequest{}
			if err := unmarshalGolden(f.Data, req); err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
			g.steps = append(g.steps, &step{label: label, stream: stream, req: req})
		case "cancel":
			g.steps = append(g.steps, &step{label: label, stream: stream, cancel: true})
		case "response":
			last := len(g.steps) - 1
			if last < 0 || g.steps[last].label != label || g.steps[last].cancel || g.steps[last].want != nil {
				return nil, fmt.Errorf("%s does not follow %s.request", f.Name, label)
			}
			want := &extprocsvc.ProcessingResponse{}
			if err := unmarshalGolden(f.Data, want); err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
			g.steps[last].want = want
		}
	}
	if g.config == nil {
		return nil, errors.New("no sluice.yaml section")
	}
	return g, nil
}

func strictJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// goldenRun is what one replay of a file produced.
type goldenRun struct {
	got    []*extprocsvc.ProcessingResponse // per step; nil for a cancel
	ledger []ledger.Record
	admit  []admissionCall
}

func runGolden(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	g, err := parseGolden(data)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	run := replay(t, g)

	if *update {
		out, err := formatGolden(g, run)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for i, s := range g.steps {
		if s.cancel {
			continue
		}
		if s.want == nil {
			t.Errorf("%s.request has no %s.response section (run with -update to write it)", s.label, s.label)
			continue
		}
		if diff := cmp.Diff(s.want, run.got[i], protocmp.Transform()); diff != "" {
			t.Errorf("%s.response (-want +got):\n%s", s.label, diff)
		}
	}
	for _, sec := range []string{"ledger", "admission"} {
		if !g.has[sec] {
			t.Errorf("no %s section (run with -update to write it)", sec)
		}
	}
	if diff := cmp.Diff(g.ledger, run.ledger, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("ledger (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(g.admit, run.admit, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("admission (-want +got):\n%s", diff)
	}
}

// clock is the Deps.Now of a replay: the harness moves it one second per
// step, so times depend on the exchange, not on how often Sluice reads
// the clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) step() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
}

// current is the stream whose message Sluice is handling (the harness
// sends one message at a time), for the per-stream draws of Deps.Rand.
type current struct {
	mu     sync.Mutex
	stream string
}

func (c *current) set(s string) { c.mu.Lock(); c.stream = s; c.mu.Unlock() }
func (c *current) get() string  { c.mu.Lock(); defer c.mu.Unlock(); return c.stream }

// streamHeader names a harness stream in its gRPC metadata, so the
// server-side interceptor can say when that stream's handler returned.
const streamHeader = "x-golden-stream"

func replay(t *testing.T, g *goldenFile) goldenRun {
	t.Helper()
	env := map[string]string{"GOLDEN_KEY_SHA256": apikey.HashHex(goldenKey)}
	cfg, err := policies.Parse(g.config, "sluice.yaml", func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatalf("sluice.yaml: %v", err)
	}
	snap, err := policies.Compile(cfg, filepath.Join(t.TempDir(), "sluice.yaml"))
	if err != nil {
		t.Fatalf("sluice.yaml: %v", err)
	}
	clk := &clock{t: goldenStart}
	cur := &current{}
	log := slog.New(slog.DiscardHandler)
	ring := keyring.New(log)
	ring.SetPolicy(snap)
	counters := limits.New(limits.Options{})
	led := &goldenLedger{}
	adm := &recordingAdmitter{next: admission.NewLocal(counters, admission.LocalOptions{})}
	deps := &extproc.Deps{
		Policy:     func() *policies.Snapshot { return snap },
		Ring:       ring,
		Auth:       authz.NewChecker(ring, admission.NewLocal(counters, admission.LocalOptions{}), nil, clk.Now),
		Principals: harnessPrincipals,
		Admitter:   adm,
		Ledger:     led,
		Metrics:    extproc.NewMetrics(prometheus.NewRegistry()),
		Log:        log,
		Now:        clk.Now,
		Rand: func() uint64 {
			if n, ok := g.rand[cur.get()]; ok {
				return n
			}
			return g.rand[""]
		},
		NewID: sequentialIDs(),
	}

	var mu sync.Mutex
	finished := map[string]chan struct{}{}
	done := func(name string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		if finished[name] == nil {
			finished[name] = make(chan struct{})
		}
		return finished[name]
	}
	gs := grpc.NewServer(grpc.StreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		err := h(srv, ss)
		if v := metadata.ValueFromIncomingContext(ss.Context(), streamHeader); len(v) == 1 {
			close(done(v[0]))
		}
		return err
	}))
	extprocsvc.RegisterExternalProcessorServer(gs, extproc.NewServer(deps))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- gs.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		conn.Close()
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	client := extprocsvc.NewExternalProcessorClient(conn)

	type open struct {
		name   string
		s      extprocsvc.ExternalProcessor_ProcessClient
		cancel context.CancelFunc
	}
	var opened []*open
	streams := map[string]*open{}
	ended := map[string]bool{}
	wait := func(name string) {
		select {
		case <-done(name):
		case <-time.After(10 * time.Second):
			t.Fatalf("stream %s: the server did not end it", name)
		}
	}

	run := goldenRun{got: make([]*extprocsvc.ProcessingResponse, len(g.steps))}
	rids := map[string]string{} // each stream's x-request-id
	for i, s := range g.steps {
		clk.step()
		cur.set(s.stream)
		o := streams[s.stream]
		if o == nil && (s.cancel || ended[s.stream]) {
			t.Fatalf("%s: stream %s is not open", s.label, s.stream)
		}
		if o == nil {
			// A stream named upstream… is the ext_proc of a fallback
			// model's upstream filter chain (chain.UpstreamExtProc).
			md := metadata.Pairs(streamHeader, s.stream)
			if strings.HasPrefix(s.stream, "upstream") {
				md.Append("x-sluice-upstream", "fallback")
			}
			ctx, cancel := context.WithCancel(metadata.NewOutgoingContext(testctx.Deadline(t), md))
			ps, err := client.Process(ctx)
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			o = &open{name: s.stream, s: ps, cancel: cancel}
			opened = append(opened, o)
			streams[s.stream] = o
		}
		if s.cancel {
			// Envoy reset the stream (the client went away).
			o.cancel()
			wait(o.name)
			delete(streams, s.stream)
			ended[s.stream] = true
			continue
		}
		if rid := requestID(s.req); rid != "" {
			rids[s.stream] = rid
		}
		req := proto.Clone(s.req).(*extprocsvc.ProcessingRequest)
		signAsEnvoy(req, clk.Now())
		if err := o.s.Send(req); err != nil {
			t.Fatalf("%s.request: %v", s.label, err)
		}
		resp, err := o.s.Recv()
		if err != nil {
			t.Fatalf("%s.request: no reply: %v", s.label, err)
		}
		checkHandoffSignature(t, s.label, rids[s.stream], resp, clk.Now())
		run.got[i] = resp
	}
	// The end of the file: Envoy half-closes every stream still open.
	clk.step()
	for _, o := range opened {
		if streams[o.name] != o {
			continue
		}
		cur.set(o.name)
		if err := o.s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := o.s.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("stream %s: after half-close got %v, want the end of the stream", o.name, err)
		}
		wait(o.name)
		o.cancel()
	}
	for _, o := range opened {
		o.cancel()
	}
	run.ledger, run.admit = led.all(), adm.all()
	return run
}

// sequentialIDs numbers spend records rec-1, rec-2, … so that a replay
// is deterministic.
func sequentialIDs() func() (string, error) {
	var mu sync.Mutex
	n := 0
	return func() (string, error) {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("rec-%d", n), nil
	}
}

// goldenLedger records what the processor charged.
type goldenLedger struct {
	mu      sync.Mutex
	records []ledger.Record
}

func (l *goldenLedger) Append(_ context.Context, r ledger.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
	return nil
}

func (l *goldenLedger) all() []ledger.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.records)
}

var _ extproc.Ledger = (*goldenLedger)(nil)

// admissionCall is one call the processor made to its Admitter: a claim
// and, if it was refused, the refusal; or a settlement.
type admissionCall struct {
	Admit  *admitCall  `json:",omitempty"`
	Settle *settleCall `json:",omitempty"`
}

type admitCall struct {
	KeyID                        string
	Model                        string
	CountRequest                 bool
	InputTokens, MaxOutputTokens int64
	CostPico                     int64
	At                           time.Time
	Refused                      string `json:",omitempty"`
}

type settleCall struct {
	KeyID                               string
	Model                               string
	InputTokens, OutputTokens, CostPico int64
	At                                  time.Time
}

// recordingAdmitter records every call to the real admitter.
type recordingAdmitter struct {
	next  extproc.Admitter
	mu    sync.Mutex
	calls []admissionCall
}

func (r *recordingAdmitter) Admit(ctx context.Context, c admission.Claim) (admission.Grant, error) {
	g, err := r.next.Admit(ctx, c)
	call := &admitCall{KeyID: c.Principal.KeyID, Model: c.Model, CountRequest: c.CountRequest,
		InputTokens: c.InputTokens, MaxOutputTokens: c.MaxOutputTokens, CostPico: c.CostPico, At: c.At}
	if err != nil {
		call.Refused = err.Error()
	}
	r.mu.Lock()
	r.calls = append(r.calls, admissionCall{Admit: call})
	r.mu.Unlock()
	return g, err
}

func (r *recordingAdmitter) Settle(ctx context.Context, g admission.Grant, a admission.Actual) {
	r.next.Settle(ctx, g, a)
	var key string
	if g.Claim.Principal != nil {
		key = g.Claim.Principal.KeyID
	}
	r.mu.Lock()
	r.calls = append(r.calls, admissionCall{Settle: &settleCall{KeyID: key, Model: g.Claim.Model,
		InputTokens: a.InputTokens, OutputTokens: a.OutputTokens, CostPico: a.CostPico, At: a.At}})
	r.mu.Unlock()
}

func (r *recordingAdmitter) all() []admissionCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

var _ extproc.Admitter = (*recordingAdmitter)(nil)

// formatGolden writes a file back: its comment, config and requests as
// they were (requests re-indented), each reply after its request, then
// the ledger and the admission calls.
func formatGolden(g *goldenFile, run goldenRun) ([]byte, error) {
	a := &txtar.Archive{Comment: g.comment}
	add := func(name string, data []byte) { a.Files = append(a.Files, txtar.File{Name: name, Data: data}) }
	add("sluice.yaml", g.config)
	if g.randRaw != nil {
		add("rand", g.randRaw)
	}
	for i, s := range g.steps {
		if s.cancel {
			add(s.label+".cancel", nil)
			continue
		}
		req, err := marshalGolden(s.req)
		if err != nil {
			return nil, err
		}
		add(s.label+".request", req)
		resp, err := marshalGolden(run.got[i])
		if err != nil {
			return nil, err
		}
		add(s.label+".response", resp)
	}
	for _, sec := range []struct {
		name string
		v    any
	}{{"ledger", run.ledger}, {"admission", run.admit}} {
		b, err := json.Marshal(sec.v)
		if err != nil {
			return nil, err
		}
		if string(b) == "null" {
			b = []byte("[]")
		}
		out, err := formatJSON(b)
		if err != nil {
			return nil, err
		}
		add(sec.name, out)
	}
	return txtar.Format(a), nil
}

// The golden form of a message is its protojson with one change for
// reading: bytes fields (header raw_value, bodies) are text, not base64.

func marshalGolden(m proto.Message) ([]byte, error) {
	b, err := protojson.Marshal(m)
	if err != nil {
		return nil, err
	}
	v, err := decodeOrdered(b)
	if err != nil {
		return nil, err
	}
	if err := mapBytes(m.ProtoReflect().Descriptor(), v, func(s string) (string, error) {
		raw, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return "", err
		}
		if !utf8.Valid(raw) {
			return "", fmt.Errorf("bytes field %q is not text", raw)
		}
		return string(raw), nil
	}); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	writeJSON(&out, v, "", 0)
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func unmarshalGolden(data []byte, m proto.Message) error {
	v, err := decodeOrdered(data)
	if err != nil {
		return err
	}
	if err := mapBytes(m.ProtoReflect().Descriptor(), v, func(s string) (string, error) {
		return base64.StdEncoding.EncodeToString([]byte(s)), nil
	}); err != nil {
		return err
	}
	var b bytes.Buffer
	writeJSON(&b, v, "", 0)
	return protojson.Unmarshal(b.Bytes(), m)
}

// object is a JSON object that keeps its keys' order.
type object []member

type member struct {
	key string
	val any
}

func decodeOrdered(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("data after the JSON value")
	}
	return v, nil
}

func decodeValue(d *json.Decoder) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		var o object
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(d)
			if err != nil {
				return nil, err
			}
			o = append(o, member{k.(string), v})
		}
		_, err := d.Token()
		return o, err
	case json.Delim('['):
		l := []any{}
		for d.More() {
			v, err := decodeValue(d)
			if err != nil {
				return nil, err
			}
			l = append(l, v)
		}
		_, err := d.Token()
		return l, err
	}
	return tok, nil
}

// mapBytes applies f to every bytes field of v, the JSON form of a message
// of type md. Well-known types (Struct, wrappers, Duration) have their own
// JSON form and hold no bytes here.
func mapBytes(md protoreflect.MessageDescriptor, v any, f func(string) (string, error)) error {
	o, ok := v.(object)
	if !ok || md.FullName().Parent() == "google.protobuf" {
		return nil
	}
	one := func(fd protoreflect.FieldDescriptor, v *any) error {
		switch fd.Kind() {
		case protoreflect.BytesKind:
			s, ok := (*v).(string)
			if !ok {
				return nil
			}
			out, err := f(s)
			if err != nil {
				return fmt.Errorf("%s: %w", fd.FullName(), err)
			}
			*v = out
		case protoreflect.MessageKind, protoreflect.GroupKind:
			return mapBytes(fd.Message(), *v, f)
		}
		return nil
	}
	for i := range o {
		fd := md.Fields().ByJSONName(o[i].key)
		if fd == nil {
			fd = md.Fields().ByTextName(o[i].key)
		}
		if fd == nil {
			continue // protojson reports it
		}
		switch {
		case fd.IsMap():
			if mo, ok := o[i].val.(object); ok {
				for j := range mo {
					if err := one(fd.MapValue(), &mo[j].val); err != nil {
						return err
					}
				}
			}
		case fd.IsList():
			if l, ok := o[i].val.([]any); ok {
				for j := range l {
					if err := one(fd, &l[j]); err != nil {
						return err
					}
				}
			}
		default:
			if err := one(fd, &o[i].val); err != nil {
				return err
			}
		}
	}
	return nil
}

// formatJSON re-indents encoding/json output in the golden style.
func formatJSON(b []byte) ([]byte, error) {
	v, err := decodeOrdered(b)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	writeJSON(&out, v, "", 0)
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// goldenWidth is the column up to which an object or array is kept on one
// line.
const goldenWidth = 100

// writeJSON writes v at indentation indent, the line already holding col
// characters: an object or array that fits on the line stays on it,
// anything larger gets one member per line.
func writeJSON(w *bytes.Buffer, v any, indent string, col int) {
	flat := compactJSON(v)
	_, isObj := v.(object)
	l, isList := v.([]any)
	if (!isObj && !isList) || col+len(flat) <= goldenWidth || (isList && len(l) == 0) || (isObj && len(v.(object)) == 0) {
		w.WriteString(flat)
		return
	}
	inner := indent + "  "
	if isList {
		w.WriteString("[\n")
		for i, e := range l {
			w.WriteString(inner)
			writeJSON(w, e, inner, len(inner))
			if i < len(l)-1 {
				w.WriteByte(',')
			}
			w.WriteByte('\n')
		}
		w.WriteString(indent + "]")
		return
	}
	o := v.(object)
	w.WriteString("{\n")
	for i, m := range o {
		k := quote(m.key) + ": "
		w.WriteString(inner + k)
		writeJSON(w, m.val, inner, len(inner)+len(k))
		if i < len(o)-1 {
			w.WriteByte(',')
		}
		w.WriteByte('\n')
	}
	w.WriteString(indent + "}")
}

func compactJSON(v any) string {
	switch v := v.(type) {
	case object:
		parts := make([]string, len(v))
		for i, m := range v {
			parts[i] = quote(m.key) + ": " + compactJSON(m.val)
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = compactJSON(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case string:
		return quote(v)
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	}
	panic(fmt.Sprintf("compactJSON: %T", v))
}

// quote is a JSON string without HTML escaping, so bodies stay readable.
func quote(s string) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(s); err != nil {
		panic(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

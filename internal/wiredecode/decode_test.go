package wiredecode

import (
	"bytes"
	"fmt"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"
)

var (
	prDesc    = (&extprocsvc.ProcessingRequest{}).ProtoReflect().Descriptor()
	checkDesc = (&authv3.CheckRequest{}).ProtoReflect().Descriptor()
)

// withoutContext is b less its top-level metadata_context and attributes
// fields, false unless b is a well-formed sequence of fields without
// request_headers: what skipContext leaves out.
func withoutContext(b []byte) ([]byte, bool) {
	var kept []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 || num == fieldRequestHeaders {
			return nil, false
		}
		if num != fieldMetadataContext && num != fieldAttributes {
			kept = append(kept, b[:n+m]...)
		}
		b = b[n+m:]
	}
	return kept, true
}

// agree reports a difference between the decoder's result (got, when ok)
// and proto.Unmarshal's (want, err).
func agree(t testing.TB, what string, b []byte, ok bool, got, want proto.Message, err error) {
	t.Helper()
	switch {
	case !ok:
	case err != nil:
		t.Errorf("%s: decoded % x, which proto.Unmarshal refuses (%v), into\n%v", what, b, err, got)
	case !proto.Equal(got, want):
		t.Errorf("%s: % x decoded into\n%v\nproto.Unmarshal gives\n%v", what, b, got, want)
	default:
		if d := shapeDiff(got.ProtoReflect(), want.ProtoReflect(), ""); d != "" {
			t.Errorf("%s: % x decoded with %s", what, b, d)
		}
	}
}

// shapeDiff finds what proto.Equal does not tell apart but Go code
// can: a nil message where proto.Unmarshal puts an empty one (a map
// value, a list element), nil bytes where it puts empty ones or the
// other way round.
func shapeDiff(x, y protoreflect.Message, path string) string {
	var d string
	fields := x.Descriptor().Fields()
	for i := range fields.Len() { // bytes fields, set or not: Range skips empty ones
		if fd := fields.Get(i); fd.Kind() == protoreflect.BytesKind && !fd.IsList() && !fd.IsMap() {
			if d = valueShape(fd, x.Get(fd), y.Get(fd), path+"."+string(fd.Name())); d != "" {
				return d
			}
		}
	}
	x.Range(func(fd protoreflect.FieldDescriptor, vx protoreflect.Value) bool {
		vy := y.Get(fd)
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsMap():
			vx.Map().Range(func(k protoreflect.MapKey, ex protoreflect.Value) bool {
				d = valueShape(fd.MapValue(), ex, vy.Map().Get(k), p+"["+k.String()+"]")
				return d == ""
			})
		case fd.IsList():
			for i := range vx.List().Len() {
				if d = valueShape(fd, vx.List().Get(i), vy.List().Get(i), fmt.Sprintf("%s[%d]", p, i)); d != "" {
					break
				}
			}
		default:
			d = valueShape(fd, vx, vy, p)
		}
		return d == ""
	})
	return d
}

func valueShape(fd protoreflect.FieldDescriptor, x, y protoreflect.Value, path string) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if x.Message().IsValid() != y.Message().IsValid() {
			return fmt.Sprintf("%s: message present %v, proto.Unmarshal's %v", path, x.Message().IsValid(), y.Message().IsValid())
		}
		return shapeDiff(x.Message(), y.Message(), path)
	case protoreflect.BytesKind:
		if (x.Bytes() == nil) != (y.Bytes() == nil) {
			return fmt.Sprintf("%s: bytes nil %v, proto.Unmarshal's %v", path, x.Bytes() == nil, y.Bytes() == nil)
		}
	}
	return ""
}

// checkProcessingRequest holds ProcessingRequest to proto.Unmarshal for
// b, with and without skipContext, and reports whether the decoder
// decoded b in full (without skipContext).
func checkProcessingRequest(t testing.TB, b []byte) bool {
	t.Helper()
	want := &extprocsvc.ProcessingRequest{}
	err := proto.Unmarshal(b, want)
	// A target holding something: the decoder replaces it.
	got := &extprocsvc.ProcessingRequest{ObservabilityMode: true, MetadataContext: &corev3.Metadata{}}
	ok := scribbled(b, func(b []byte) bool { return ProcessingRequest(b, got, false) })
	agree(t, "whole", b, ok, got, want, err)

	wantSkip, errSkip := proto.Message(want), err
	if kept, skips := withoutContext(b); skips {
		w := &extprocsvc.ProcessingRequest{}
		wantSkip, errSkip = w, proto.Unmarshal(kept, w)
	}
	gotSkip := &extprocsvc.ProcessingRequest{Attributes: map[string]*structpb.Struct{"x": {}}}
	okSkip := scribbled(b, func(b []byte) bool { return ProcessingRequest(b, gotSkip, true) })
	agree(t, "skipContext", b, okSkip, gotSkip, wantSkip, errSkip)
	if ok && !okSkip {
		t.Errorf("% x: decoded whole but not with skipContext", b)
	}
	return ok
}

// checkCheckRequest holds CheckRequest to proto.Unmarshal for b and
// reports whether the decoder decoded b.
func checkCheckRequest(t testing.TB, b []byte) bool {
	t.Helper()
	want := &authv3.CheckRequest{}
	err := proto.Unmarshal(b, want)
	got := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{ContextExtensions: map[string]string{"x": "y"}}}
	ok := scribbled(b, func(b []byte) bool { return CheckRequest(b, got) })
	agree(t, "CheckRequest", b, ok, got, want, err)
	return ok
}

// scribbled runs decode on a copy of b, which it then overwrites: what
// was decoded must not share the input's memory, which the codec
// returns to a pool.
func scribbled(b []byte, decode func([]byte) bool) bool {
	c := bytes.Clone(b)
	ok := decode(c)
	for i := range c {
		c[i] = 0xa5
	}
	return ok
}

// marshal encodes m with its map entries in order, so that a seed makes
// the same bytes every time (shuffle reorders them).
func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// kind names a message for test output.
func kind(m proto.Message) string {
	if r, ok := m.(*extprocsvc.ProcessingRequest); ok {
		return fmt.Sprintf("%T", r.GetRequest())
	}
	return fmt.Sprintf("%T", m)
}

// envoyMessages are the realistic messages with their checks and
// descriptors.
type sample struct {
	name  string
	b     []byte
	desc  protoreflect.MessageDescriptor
	check func(testing.TB, []byte) bool
}

func envoySamples(t testing.TB) []sample {
	var out []sample
	for i, r := range envoyRequests() {
		out = append(out, sample{fmt.Sprintf("%d %s", i, kind(r)), marshal(t, r), prDesc, checkProcessingRequest})
	}
	for i, r := range envoyChecks() {
		out = append(out, sample{fmt.Sprintf("check %d", i), marshal(t, r), checkDesc, checkCheckRequest})
	}
	return out
}

// TestEnvoyMessages: every message Envoy sends is decoded, to what
// proto.Unmarshal makes of it, in every order of its fields (its
// top-level ones, or those of its AttributeContext), and with its fields
// nested at any depth shuffled, repeated, dropped or their varints
// padded, all of which keep it well-formed.
func TestEnvoyMessages(t *testing.T) {
	g := newGen(1)
	for _, s := range envoySamples(t) {
		if !s.check(t, s.b) {
			t.Errorf("%s: not decoded (left to proto.Unmarshal)", s.name)
		}
		for _, order := range orders(t, s) {
			if !s.check(t, order) {
				t.Errorf("%s: reordered % x not decoded", s.name, order)
			}
		}
		for i := range 300 {
			var b []byte
			switch i % 4 {
			case 0:
				b = shuffle(g, s.b, s.desc)
			case 1:
				b = duplicate(g, s.b, s.desc)
			case 2:
				b = drop(g, s.b, s.desc)
			case 3:
				b = padVarint(g, s.b, s.desc)
			}
			if !s.check(t, b) {
				t.Errorf("%s: rewritten % x not decoded", s.name, b)
			}
		}
	}
}

// orders is s in every order of the fields of its top level (of a
// CheckRequest's AttributeContext).
func orders(t testing.TB, s sample) [][]byte {
	fs, ok := split(s.b)
	if !ok {
		t.Fatalf("%s: does not split", s.name)
	}
	wrap := func(b []byte) []byte { return b }
	if s.desc == checkDesc && len(fs) == 1 {
		outer := fs[0]
		if fs, ok = split(outer.val); !ok {
			t.Fatalf("%s: attributes do not split", s.name)
		}
		wrap = func(b []byte) []byte { return withContent(outer, b).appendTo(nil) }
	}
	var out [][]byte
	permute(fs, 0, func(p []wireField) { out = append(out, wrap(join(p))) })
	return out
}

func permute(fs []wireField, k int, f func([]wireField)) {
	if k == len(fs) {
		f(fs)
		return
	}
	for i := k; i < len(fs); i++ {
		fs[k], fs[i] = fs[i], fs[k]
		permute(fs, k+1, f)
		fs[k], fs[i] = fs[i], fs[k]
	}
}

// TestEnvoyMessagesDamaged: every truncation and single-byte change of
// the messages Envoy sends, each of their fields at any depth given
// every other wire type, and foreign fields (unknown numbers, other wire
// types, groups) and invalid UTF-8 put into them at any depth, are
// decoded as proto.Unmarshal decodes them or left to it. (Its result
// keeps what it does not know as unknown fields, which proto.Equal
// compares: a field the decoder dropped would show.)
func TestEnvoyMessagesDamaged(t *testing.T) {
	g := newGen(2)
	for _, s := range envoySamples(t) {
		for i := range len(s.b) {
			s.check(t, s.b[:i])
			for _, x := range []byte{0x01, 0x80, 0xff} {
				b := bytes.Clone(s.b)
				b[i] ^= x
				s.check(t, b)
			}
		}
		for range 200 {
			s.check(t, foreign(g, s.b, s.desc))
			s.check(t, badUTF8(g, s.b, s.desc))
		}
		for _, b := range retyped(s.b, s.desc) {
			s.check(t, b)
		}
	}
}

// TestRandomMessages: random messages of every field combination decode
// as proto.Unmarshal decodes them, whole and shuffled, with fields
// repeated, dropped, padded and concatenated (protobuf's merge); those
// holding only what the decoder handles are decoded by it, the others
// left to proto.Unmarshal.
func TestRandomMessages(t *testing.T) {
	n := 400
	if testing.Short() {
		n = 100
	}
	for seed := range n {
		g := newGen(uint64(seed))
		r, prOK := g.processingRequest(), g.take()
		c, checkOK := g.checkRequest(), g.take()
		h := newGen(uint64(seed) + 1e6)
		r2, prOK2 := h.processingRequest(), h.take()
		c2, checkOK2 := h.checkRequest(), h.take()
		for _, s := range []struct {
			name     string
			b, b2    []byte
			desc     protoreflect.MessageDescriptor
			check    func(testing.TB, []byte) bool
			ok, ok2  bool
			original proto.Message
		}{
			{"ProcessingRequest", marshal(t, r), marshal(t, r2), prDesc, checkProcessingRequest, prOK, prOK2, r},
			{"CheckRequest", marshal(t, c), marshal(t, c2), checkDesc, checkCheckRequest, checkOK, checkOK2, c},
		} {
			if got := s.check(t, s.b); got != s.ok {
				t.Errorf("seed %d %s: decoded %v, want %v: %v", seed, s.name, got, s.ok, s.original)
			}
			for i, b := range [][]byte{shuffle(g, s.b, s.desc), duplicate(g, s.b, s.desc), drop(g, s.b, s.desc), padVarint(g, s.b, s.desc)} {
				if got := s.check(t, b); s.ok && !got {
					t.Errorf("seed %d %s: rewrite %d % x not decoded", seed, s.name, i, b)
				}
			}
			if got := s.check(t, append(bytes.Clone(s.b), s.b2...)); s.ok && s.ok2 && !got {
				t.Errorf("seed %d %s: concatenation not decoded", seed, s.name)
			}
			s.check(t, foreign(g, s.b, s.desc))
			s.check(t, badUTF8(g, s.b, s.desc))
			if seed%20 == 0 {
				for _, b := range retyped(s.b, s.desc) {
					s.check(t, b)
				}
			}
			if len(s.b) > 0 {
				b := bytes.Clone(s.b)
				b[g.r.IntN(len(b))] = byte(g.r.UintN(256))
				s.check(t, b)
				s.check(t, b[:g.r.IntN(len(b))])
			}
		}
	}
}

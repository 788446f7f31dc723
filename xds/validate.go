package xds

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/sluicegw/sluice/envoy/envoyrules"
)

// anyFullName is the full name of google.protobuf.Any.
const anyFullName protoreflect.FullName = "google.protobuf.Any"

// pgvValidator is what protoc-gen-validate generates on every Envoy message.
type pgvValidator interface{ ValidateAll() error }

// Validate checks m for what a real Envoy would refuse, or silently
// ignore, when it loads m on its own. It checks exactly two things:
//
//   - PGV: the generated ValidateAll() on m, and the same on every
//     google.protobuf.Any found anywhere inside it (typed_config,
//     typed_extension_protocol_options, …), unpacked and walked
//     recursively. ValidateAll alone stops at an Any, so it misses e.g. an
//     HttpConnectionManager without stat_prefix inside a Listener. An Any
//     whose type is not linked into the binary is an error: Envoy would
//     know the type, but Sluice could not check it (extensions.go lists
//     the types Sluice links).
//   - Envoy's load-time rules that PGV does not express: every message
//     rule of the envoy/envoyrules table, run on every message inside m
//     (Anys unpacked). A rule Envoy enforces by refusing the resource and
//     one whose field Envoy ignores ([#not-implemented-hide:]) are both
//     errors here: Sluice must not emit a field that has no effect.
//
// Every problem is reported, joined with errors.Join, PGV's first, each
// prefixed with its field path, Any types in parentheses:
//
//	filter_chains[0].filters[0].typed_config(envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager): invalid HttpConnectionManager.StatPrefix: …
//	transport_socket.typed_config(envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext).common_tls_context.validation_context: SAN-based verification of peer certificates without trusted CA is insecure and not allowed [refused by Envoy: tls.san-without-trusted-ca]
//
// Validate checks each message on its own. The rules Envoy applies across
// resources (duplicate names, the clusters of a route configuration that
// validates them) are ValidateSet's; references Envoy leaves to run time
// (a route naming a cluster that does not exist, over RDS) are the
// snapshot builder's to check. The rules are Envoy's: a resource served to
// a proxyless gRPC client is checked with ValidateAPI instead.
func Validate(m proto.Message) error {
	errs := pgvErrors(m)
	if m != nil {
		for _, v := range envoyrules.Check(m) {
			errs = append(errs, v)
		}
	}
	return errors.Join(errs...)
}

// ValidateAPI is the first half of Validate alone: PGV, into every Any.
// It is what Sluice checks of a resource for a proxyless gRPC client,
// which is not Envoy and has its own rules (grpc-go's xdsresource
// unmarshalling): a TLS cluster for grpc-go names system_root_certs or a
// certificate provider instance and no trusted_ca, which Envoy refuses.
func ValidateAPI(m proto.Message) error { return errors.Join(pgvErrors(m)...) }

func pgvErrors(m proto.Message) []error {
	if m == nil {
		return []error{errors.New("validate: nil message")}
	}
	w := &anyWalker{}
	w.each = w.field // one method value for every Range
	root := m.ProtoReflect()
	if root.Descriptor().FullName() == anyFullName {
		w.unpack(root)
	} else {
		w.validateAll(root)
		w.message(root)
	}
	return w.errs
}

// ValidateSet checks r as one resource set, as Envoy loads it: the set
// rules of the envoy/envoyrules table (cluster and listener names unique;
// every cluster named by a route configuration that validates its
// clusters — one inline in a connection manager, or one with
// validate_clusters true — exists). Each problem is reported, joined, with
// the resource it is in and its field path. It checks nothing else: each
// resource on its own is Validate's.
func ValidateSet(r *Resources) error {
	vs := envoyrules.CheckSet(envoyrules.Set{Clusters: r.Clusters, Listeners: r.Listeners, Routes: r.Routes})
	errs := make([]error, len(vs))
	for i, v := range vs {
		errs[i] = v
	}
	return errors.Join(errs...)
}

// anyWalker finds the Any fields of a message. The path to the current
// field is kept as a stack of steps and rendered only when there is an
// error, so a valid message costs no string building.
type anyWalker struct {
	path []pathStep
	errs []error
	each func(protoreflect.FieldDescriptor, protoreflect.Value) bool
}

// pathStep is one element of a field path: a field, an element of a
// repeated field or map, or the unpacked content of an Any.
type pathStep struct {
	field protoreflect.FieldDescriptor
	index int                   // list index, when field is a list
	key   protoreflect.MapKey   // map key, when field is a map
	typ   protoreflect.FullName // unpacked type, for an Any's content
}

// message searches a message for Anys. Its own ValidateAll has already run,
// as part of its closest enclosing Any's (or the root's): the generated
// code descends into every nested message except an Any.
func (w *anyWalker) message(m protoreflect.Message) {
	d := m.Descriptor()
	switch {
	case d.FullName() == anyFullName:
		w.unpack(m)
	case d.ParentFile().Package() == "google.protobuf":
		// The other well-known types (Struct, Duration, wrappers…) hold
		// no Any.
	default:
		m.Range(w.each)
	}
}

// field walks one populated field of a message.
func (w *anyWalker) field(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
	switch {
	case fd.IsList():
		if fd.Message() == nil {
			return true
		}
		l := v.List()
		for i := range l.Len() {
			w.path = append(w.path, pathStep{field: fd, index: i})
			w.message(l.Get(i).Message())
			w.path = w.path[:len(w.path)-1]
		}
	case fd.IsMap():
		if fd.MapValue().Message() == nil {
			return true
		}
		mp := v.Map()
		// Sorted, so that errors come out in the same order every time.
		keys := make([]protoreflect.MapKey, 0, mp.Len())
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		kind := fd.MapKey().Kind()
		slices.SortFunc(keys, func(a, b protoreflect.MapKey) int { return compareMapKeys(kind, a, b) })
		for _, k := range keys {
			w.path = append(w.path, pathStep{field: fd, key: k})
			w.message(mp.Get(k).Message())
			w.path = w.path[:len(w.path)-1]
		}
	case fd.Message() != nil:
		w.path = append(w.path, pathStep{field: fd})
		w.message(v.Message())
		w.path = w.path[:len(w.path)-1]
	}
	return true
}

// unpack resolves an Any's type and unmarshals it, as anypb.UnmarshalNew
// does but telling an unlinked type apart from bad bytes, validates the
// content and walks it for further Anys.
func (w *anyWalker) unpack(a protoreflect.Message) {
	fields := a.Descriptor().Fields()
	url := a.Get(fields.ByName("type_url")).String()
	value := a.Get(fields.ByName("value")).Bytes()
	if url == "" {
		w.fail(errors.New("Any without a type_url"))
		return
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		w.fail(fmt.Errorf("%s: type not linked into Sluice (see xds/extensions.go): %w", url, err))
		return
	}
	inner := mt.New()
	if err := proto.Unmarshal(value, inner.Interface()); err != nil {
		w.fail(fmt.Errorf("%s: %w", url, err))
		return
	}
	w.path = append(w.path, pathStep{typ: inner.Descriptor().FullName()})
	w.validateAll(inner)
	w.message(inner)
	w.path = w.path[:len(w.path)-1]
}

func (w *anyWalker) validateAll(m protoreflect.Message) {
	v, ok := m.Interface().(pgvValidator)
	if !ok {
		return
	}
	if err := v.ValidateAll(); err != nil {
		w.fail(err)
	}
}

// fail records err at the current path.
func (w *anyWalker) fail(err error) {
	if len(w.path) == 0 {
		w.errs = append(w.errs, err)
		return
	}
	w.errs = append(w.errs, fmt.Errorf("%s: %w", w.render(), err))
}

// render formats the current path, e.g.
// filter_chains[0].filters[0].typed_config(envoy…HttpConnectionManager).
func (w *anyWalker) render() string {
	var b strings.Builder
	for _, s := range w.path {
		if s.field == nil {
			b.WriteString("(")
			b.WriteString(string(s.typ))
			b.WriteString(")")
			continue
		}
		if b.Len() > 0 {
			b.WriteString(".")
		}
		b.WriteString(string(s.field.Name()))
		switch {
		case s.field.IsList():
			b.WriteString("[")
			b.WriteString(strconv.Itoa(s.index))
			b.WriteString("]")
		case s.field.IsMap():
			b.WriteString("[")
			if s.field.MapKey().Kind() == protoreflect.StringKind {
				b.WriteString(strconv.Quote(s.key.String()))
			} else {
				b.WriteString(s.key.String())
			}
			b.WriteString("]")
		}
	}
	return b.String()
}

// compareMapKeys orders two keys of a map whose keys are of the given kind.
func compareMapKeys(kind protoreflect.Kind, a, b protoreflect.MapKey) int {
	switch kind {
	case protoreflect.StringKind:
		return cmp.Compare(a.String(), b.String())
	case protoreflect.BoolKind:
		return cmp.Compare(boolOrder(a.Bool()), boolOrder(b.Bool()))
	case protoreflect.Int32Kind, protoreflect.Int64Kind,
		protoreflect.Sint32Kind, protoreflect.Sint64Kind,
		protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
		return cmp.Compare(a.Int(), b.Int())
	default:
		return cmp.Compare(a.Uint(), b.Uint())
	}
}

func boolOrder(b bool) int {
	if b {
		return 1
	}
	return 0
}

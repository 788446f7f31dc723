package xds

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicegw/sluice/envoy/envoyrules"
)

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
func Validate(m proto.Message) error { return validate(m, true) }

// ValidateAPI is the first half of Validate alone: PGV, into every Any.
// It is what Sluice checks of a resource for a proxyless gRPC client,
// which is not Envoy and has its own rules (grpc-go's xdsresource
// unmarshalling): a TLS cluster for grpc-go names system_root_certs or a
// certificate provider instance and no trusted_ca, which Envoy refuses.
func ValidateAPI(m proto.Message) error { return validate(m, false) }

// validate walks m once (envoyrules.Walk): PGV at the root and at each
// Any's content, and, with rules, the envoyrules table on every message.
func validate(m proto.Message, rules bool) error {
	if m == nil {
		return errors.Join(errors.New("validate: nil message"))
	}
	v := &validator{rules: rules}
	envoyrules.Walk(m.ProtoReflect(), v)
	errs := v.errs
	for _, x := range v.checker.Violations {
		errs = append(errs, x)
	}
	return errors.Join(errs...)
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

// validator is the envoyrules.Visitor of validate. The path is rendered
// only for an error, so a valid message costs no string building.
type validator struct {
	errs    []error            // PGV's, and the Anys that cannot be unpacked
	rules   bool               // run the envoyrules table too (Validate)
	checker envoyrules.Checker // its violations, when rules
}

var _ envoyrules.Visitor = (*validator)(nil)

// Message runs ValidateAll on the root and on each Any's content, the
// messages no field leads to, and the rules on every message. The
// generated ValidateAll descends into every nested message except an Any,
// so any other message is validated as part of its closest enclosing
// Any's content (or the root).
func (v *validator) Message(p envoyrules.Path, m protoreflect.Message) {
	if p.Field() == nil {
		if pv, ok := m.Interface().(pgvValidator); ok {
			if err := pv.ValidateAll(); err != nil {
				v.fail(p, err)
			}
		}
	}
	if v.rules {
		v.checker.Message(p, m)
	}
}

// BadAny reports an Any Sluice cannot check: one without a type_url, one
// whose type is not linked into the binary (Envoy would know it, but
// Sluice could not check it), one whose bytes do not unmarshal.
func (v *validator) BadAny(p envoyrules.Path, url string, linked bool, err error) {
	switch {
	case url == "":
		err = errors.New("Any without a type_url")
	case !linked:
		err = fmt.Errorf("%s: type not linked into Sluice (see xds/extensions.go): %w", url, err)
	default:
		err = fmt.Errorf("%s: %w", url, err)
	}
	v.fail(p, err)
}

// fail records err at p.
func (v *validator) fail(p envoyrules.Path, err error) {
	if at := p.String(); at != "" {
		err = fmt.Errorf("%s: %w", at, err)
	}
	v.errs = append(v.errs, err)
}

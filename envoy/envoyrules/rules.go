package envoyrules

import (
	"slices"
	"strings"
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Severity is what Envoy does with a configuration that breaks a rule.
type Severity int

const (
	// Refused: Envoy refuses the resource at load. Over xDS the update is
	// NACKed (for CDS and LDS the other resources of the response are
	// still applied); in a bootstrap Envoy exits.
	Refused Severity = iota + 1
	// Ignored: Envoy loads the resource but never reads the field, so it
	// has no effect. Nothing tells the operator: a configuration relying
	// on it silently does something else.
	Ignored
)

func (s Severity) String() string {
	switch s {
	case Refused:
		return "refused"
	case Ignored:
		return "ignored"
	}
	return "unknown"
}

// Rule is one check Envoy makes when it loads a resource that PGV's
// generated ValidateAll does not express.
//
// A rule is either a message rule (Check) or a resource-set rule
// (CheckSet), never both.
type Rule struct {
	// Name is stable and short, e.g. "tls.san-without-trusted-ca".
	Name string
	// Applies is the message a message rule is called with; for a set
	// rule, the resource type whose instances it reports.
	Applies protoreflect.FullName
	// Source is the Envoy source file and function the rule follows.
	Source string
	// Severity is what Envoy does with a violation.
	Severity Severity
	// Check is called with every message of type Applies found in a
	// checked message (Anys unpacked). It returns Envoy's error text,
	// quoted where Envoy has one, with the path of the offending field
	// relative to the message.
	Check func(proto.Message) []Finding
	// CheckSet is called with a whole resource set, for the references
	// between resources that Envoy checks at load.
	CheckSet func(Set) []Finding
}

// Finding is one violation of a rule, as a check function reports it.
type Finding struct {
	// Resource names the resource of a set rule, e.g. `cluster "a"`; empty
	// for a message rule.
	Resource string
	// Path is the offending field, relative to the message (a message
	// rule) or to the resource (a set rule); empty for the message itself.
	Path string
	// Msg is Envoy's error text (Refused), or what the field fails to do
	// (Ignored).
	Msg string
}

// Set is a set of resources that Envoy loads together: one bootstrap's
// static resources, or the resources a control plane serves one node.
type Set struct {
	Clusters  []*clusterv3.Cluster
	Listeners []*listenerv3.Listener
	Routes    []*routev3.RouteConfiguration
}

// Violation is a finding with its rule and the path from the checked
// message.
type Violation struct {
	Rule     *Rule
	Resource string // for a set rule, e.g. `route "sluice"`
	Path     string // e.g. filter_chains[0].filters[0].typed_config(…).http_filters[1]
	Msg      string
}

// Error formats the violation like a field-addressed validation error:
//
//	transport_socket.typed_config(envoy…UpstreamTlsContext).common_tls_context.validation_context: SAN-based verification … [refused by Envoy: tls.san-without-trusted-ca]
func (v Violation) Error() string {
	var b strings.Builder
	if v.Resource != "" {
		b.WriteString(v.Resource)
		b.WriteString(": ")
	}
	if v.Path != "" {
		b.WriteString(v.Path)
		b.WriteString(": ")
	}
	b.WriteString(v.Msg)
	b.WriteString(" [")
	b.WriteString(v.Rule.Severity.String())
	b.WriteString(" by Envoy: ")
	b.WriteString(v.Rule.Name)
	b.WriteString("]")
	return b.String()
}

// Table returns every rule, message rules first, in a fixed order. The
// slice is the caller's; the rules it points to must not be changed.
func Table() []*Rule { return slices.Clone(table()) }

var table = sync.OnceValue(func() []*Rule {
	var t []*Rule
	for _, part := range [][]*Rule{
		tlsRules(), staticSecretRules(), hiddenRules(), hcmRules(), clusterRules(), routeRules(), filterRules(), setRules(),
	} {
		t = append(t, part...)
	}
	return t
})

// byType indexes the message rules by the message they apply to.
var byType = sync.OnceValue(func() map[protoreflect.FullName][]*Rule {
	idx := map[protoreflect.FullName][]*Rule{}
	for _, r := range table() {
		if r.Check != nil {
			idx[r.Applies] = append(idx[r.Applies], r)
		}
	}
	return idx
})

// Check runs every message rule over m and every message inside it,
// unpacking each google.protobuf.Any whose type is linked into the binary
// (an Any that does not resolve or unpack is left to PGV validation, which
// reports it). Violations come in field order; paths are rendered as in
// xds.Validate (Path.String). It is a Walk with a Checker.
func Check(m proto.Message) []Violation {
	if m == nil {
		return nil
	}
	var c Checker
	Walk(m.ProtoReflect(), &c)
	return c.Violations
}

// CheckSet runs every set rule over s.
func CheckSet(s Set) []Violation {
	var out []Violation
	for _, r := range table() {
		if r.CheckSet == nil {
			continue
		}
		for _, f := range r.CheckSet(s) {
			out = append(out, Violation{Rule: r, Resource: f.Resource, Path: f.Path, Msg: f.Msg})
		}
	}
	return out
}

// on adapts a typed check function to Rule.Check.
func on[T proto.Message](f func(T) []Finding) func(proto.Message) []Finding {
	return func(m proto.Message) []Finding {
		t, ok := m.(T)
		if !ok {
			return nil
		}
		return f(t)
	}
}

// nameOf is the full name of m's message type.
func nameOf(m proto.Message) protoreflect.FullName { return m.ProtoReflect().Descriptor().FullName() }

// find is one finding at path.
func find(path, msg string) []Finding { return []Finding{{Path: path, Msg: msg}} }

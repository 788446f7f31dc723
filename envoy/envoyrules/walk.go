package envoyrules

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

const anyFullName protoreflect.FullName = "google.protobuf.Any"

// Visitor is told of what Walk finds. The Path it is given is valid only
// during the call: Walk reuses its steps.
type Visitor interface {
	// Message is told of every message inside the root, the root first,
	// each before the messages inside it, fields in the order
	// protoreflect's Range gives them (declaration order, for generated
	// messages), list elements by index and map entries in key order. An Any is never told of: its content is,
	// unpacked, in its place. Walk does not descend into the other
	// google.protobuf well-known types (Struct, Duration, wrappers…), which
	// hold no Any, but tells of them.
	Message(p Path, m protoreflect.Message)
	// BadAny is told of an Any at p whose content Walk cannot reach, and
	// does not descend into it: its type_url does not resolve in
	// protoregistry.GlobalTypes (linked false, err from the registry; an
	// empty type_url is one), or its value does not unmarshal into that
	// type (linked true, err from proto.Unmarshal).
	BadAny(p Path, typeURL string, linked bool, err error)
}

// Walk tells v of every message inside root, Anys unpacked through
// protoregistry.GlobalTypes (see Visitor). The path is a stack of steps,
// rendered only when the visitor asks (Path.String), so a walk costs no
// string building.
func Walk(root protoreflect.Message, v Visitor) {
	w := &walker{v: v}
	w.each = w.field // one method value for every Range
	w.message(root)
}

// Path is where Walk is inside its root: a stack of steps, each a field,
// an element of a repeated field or map, or the unpacked content of an
// Any.
type Path struct{ steps []step }

type step struct {
	field protoreflect.FieldDescriptor // nil for an Any's content
	index int                          // list index, when field is a list
	key   protoreflect.MapKey          // map key, when field is a map
	typ   protoreflect.FullName        // unpacked type, for an Any's content
}

// Field is the field, repeated field or map whose value (or element) the
// message at p is; nil for the root and for an Any's content.
func (p Path) Field() protoreflect.FieldDescriptor {
	if len(p.steps) == 0 {
		return nil
	}
	return p.steps[len(p.steps)-1].field
}

// String renders p as a field path, Any types in parentheses and map keys
// quoted when they are strings, e.g.
// filter_chains[0].filters[0].typed_config(envoy…HttpConnectionManager).stat_prefix;
// the root's path is empty.
func (p Path) String() string {
	var b strings.Builder
	for _, s := range p.steps {
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

type walker struct {
	v    Visitor
	path Path
	each func(protoreflect.FieldDescriptor, protoreflect.Value) bool
}

func (w *walker) push(s step) { w.path.steps = append(w.path.steps, s) }
func (w *walker) pop()        { w.path.steps = w.path.steps[:len(w.path.steps)-1] }

func (w *walker) message(m protoreflect.Message) {
	d := m.Descriptor()
	if d.FullName() == anyFullName {
		w.unpack(m)
		return
	}
	w.v.Message(w.path, m)
	if d.ParentFile().Package() == "google.protobuf" {
		return
	}
	m.Range(w.each)
}

// field walks one populated field of a message.
func (w *walker) field(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
	switch {
	case fd.IsList():
		if fd.Message() == nil {
			return true
		}
		l := v.List()
		for i := range l.Len() {
			w.push(step{field: fd, index: i})
			w.message(l.Get(i).Message())
			w.pop()
		}
	case fd.IsMap():
		if fd.MapValue().Message() == nil {
			return true
		}
		mp := v.Map()
		keys := make([]protoreflect.MapKey, 0, mp.Len())
		mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
			keys = append(keys, k)
			return true
		})
		kind := fd.MapKey().Kind()
		slices.SortFunc(keys, func(a, b protoreflect.MapKey) int { return compareKeys(kind, a, b) })
		for _, k := range keys {
			w.push(step{field: fd, key: k})
			w.message(mp.Get(k).Message())
			w.pop()
		}
	case fd.Message() != nil:
		w.push(step{field: fd})
		w.message(v.Message())
		w.pop()
	}
	return true
}

// unpack resolves an Any's type and unmarshals it, as anypb.UnmarshalNew
// does but telling an unlinked type apart from bad bytes, and walks the
// content.
func (w *walker) unpack(a protoreflect.Message) {
	fields := a.Descriptor().Fields()
	url := a.Get(fields.ByName("type_url")).String()
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		w.v.BadAny(w.path, url, false, err)
		return
	}
	inner := mt.New()
	if err := proto.Unmarshal(a.Get(fields.ByName("value")).Bytes(), inner.Interface()); err != nil {
		w.v.BadAny(w.path, url, true, err)
		return
	}
	w.push(step{typ: inner.Descriptor().FullName()})
	w.message(inner)
	w.pop()
}

// compareKeys orders map keys of one kind, so that a walk comes out in the
// same order every time.
func compareKeys(kind protoreflect.Kind, a, b protoreflect.MapKey) int {
	switch kind {
	case protoreflect.StringKind:
		return cmp.Compare(a.String(), b.String())
	case protoreflect.BoolKind:
		return cmp.Compare(strconv.FormatBool(a.Bool()), strconv.FormatBool(b.Bool()))
	case protoreflect.Int32Kind, protoreflect.Int64Kind, protoreflect.Sint32Kind,
		protoreflect.Sint64Kind, protoreflect.Sfixed32Kind, protoreflect.Sfixed64Kind:
		return cmp.Compare(a.Int(), b.Int())
	default:
		return cmp.Compare(a.Uint(), b.Uint())
	}
}

// Checker is the Visitor Check walks with: it runs the message rules of
// the table on each message it is told of and keeps their violations, in
// walk order, each path from the root. An Any that does not resolve or
// unmarshal it skips: that is not the rules' to report (xds.Validate's PGV
// half does). Its zero value is ready to use.
type Checker struct {
	Violations []Violation
}

// Message runs the rules of m's type, rendering p only for a violation.
func (c *Checker) Message(p Path, m protoreflect.Message) {
	var base string
	rendered := false
	for _, r := range byType()[m.Descriptor().FullName()] {
		for _, f := range r.Check(m.Interface()) {
			if !rendered {
				base, rendered = p.String(), true
			}
			c.Violations = append(c.Violations, Violation{Rule: r, Path: joinPath(base, f.Path), Msg: f.Msg})
		}
	}
}

// BadAny does nothing: see Checker.
func (c *Checker) BadAny(Path, string, bool, error) {}

var _ Visitor = (*Checker)(nil)

func joinPath(base, rel string) string {
	switch {
	case base == "":
		return rel
	case rel == "":
		return base
	}
	return base + "." + rel
}

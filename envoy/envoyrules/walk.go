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

// walker visits every message inside a root message, Anys unpacked, and
// runs the rules of each message's type. The path is a stack of steps,
// rendered only for a violation.
type walker struct {
	rules map[protoreflect.FullName][]*Rule
	path  []step
	out   []Violation
	each  func(protoreflect.FieldDescriptor, protoreflect.Value) bool
}

// step is one element of a field path: a field, an element of a repeated
// field or map, or the unpacked content of an Any.
type step struct {
	field protoreflect.FieldDescriptor
	index int
	key   protoreflect.MapKey
	typ   protoreflect.FullName
}

func (w *walker) message(m protoreflect.Message) {
	d := m.Descriptor()
	if d.FullName() == anyFullName {
		w.unpack(m)
		return
	}
	if rs := w.rules[d.FullName()]; len(rs) > 0 {
		base := w.render()
		for _, r := range rs {
			for _, f := range r.Check(m.Interface()) {
				w.out = append(w.out, Violation{Rule: r, Path: joinPath(base, f.Path), Msg: f.Msg})
			}
		}
	}
	if d.ParentFile().Package() == "google.protobuf" {
		return // Struct, Duration, wrappers…: no Any, no rule
	}
	m.Range(w.each)
}

func (w *walker) field(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
	switch {
	case fd.IsList():
		if fd.Message() == nil {
			return true
		}
		l := v.List()
		for i := range l.Len() {
			w.path = append(w.path, step{field: fd, index: i})
			w.message(l.Get(i).Message())
			w.path = w.path[:len(w.path)-1]
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
			w.path = append(w.path, step{field: fd, key: k})
			w.message(mp.Get(k).Message())
			w.path = w.path[:len(w.path)-1]
		}
	case fd.Message() != nil:
		w.path = append(w.path, step{field: fd})
		w.message(v.Message())
		w.path = w.path[:len(w.path)-1]
	}
	return true
}

// unpack walks an Any's content. One that does not resolve or unmarshal is
// skipped: it is not the rules' to report.
func (w *walker) unpack(a protoreflect.Message) {
	fields := a.Descriptor().Fields()
	url := a.Get(fields.ByName("type_url")).String()
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
	if err != nil {
		return
	}
	inner := mt.New()
	if err := proto.Unmarshal(a.Get(fields.ByName("value")).Bytes(), inner.Interface()); err != nil {
		return
	}
	w.path = append(w.path, step{typ: inner.Descriptor().FullName()})
	w.message(inner)
	w.path = w.path[:len(w.path)-1]
}

// render formats the current path as xds.Validate does, e.g.
// filter_chains[0].filters[0].typed_config(envoy…HttpConnectionManager).
func (w *walker) render() string {
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

func joinPath(base, rel string) string {
	switch {
	case base == "":
		return rel
	case rel == "":
		return base
	}
	return base + "." + rel
}

// compareKeys orders map keys of one kind, so that violations come out in
// the same order every time.
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

package policies

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// maxDecodeSteps bounds the work that aliases and merge keys (<<) add to
// decoding one document, so that a file of nested aliases ("billion
// laughs") fails instead of hanging: what they expand to — every value
// decoded through an alias or from a merged pair, and every pair a merge
// copies — may count up to maxDecodeSteps, one more is refused. Values
// written out count nothing: their work is bounded by the file's size,
// which yaml.v3 has already parsed, so a file may declare any number of
// keys.
const maxDecodeSteps = 1_000_000

// expansion records what ${ENV} expansion did to one scalar.
type expansion struct {
	orig   string // as written in the file
	value  string // after expansion
	failed bool   // a reference could not be expanded (and was reported)
}

// decoder decodes a yaml.Node tree into a Config, expanding ${ENV}
// references in scalar values, and collects every problem it meets.
type decoder struct {
	env      LookupEnv
	problems Problems
	expanded map[*yaml.Node]*expansion
	order    []*yaml.Node // the keys of expanded, in the order expanded
	steps    int          // what aliases and merges expanded to (maxDecodeSteps)
	maxSteps int
	copying  int                    // > 0 while decoding through an alias or a merged pair
	inside   map[*yaml.Node]bool    // the mappings and lists being decoded while copying
	merging  map[*yaml.Node]bool    // the merge sources whose pairs are being made
	merged   map[*yaml.Node]mapping // a merge source's pairs, made once
	// pairStack holds the pairs of the mappings being decoded, the
	// innermost last (see pairs).
	pairStack []pair
	path      []pathSeg // the path of the value being decoded (pathSeg)
}

// pathSeg is one step of the path of the value being decoded: a struct
// field, a map key or a list item. The decoder keeps the path as a stack
// of them (decoder.path), and makes its text ("keys[3].limits.requests")
// only for a problem, so that a config of many keys decodes without a
// string per field.
type pathSeg struct {
	name  string // a field's name or a map's key
	index int    // a list item's index
	kind  pathKind
}

type pathKind uint8

const (
	pathField pathKind = iota // a struct field: .name
	pathKey                   // a free-form map key, quoted where needed (keyPath)
	pathIndex                 // a list item: [index]
)

// appendPath appends the text of the path segs to b: what fieldPath,
// keyPath and indexPath make of them.
func appendPath(b []byte, segs []pathSeg) []byte {
	for _, p := range segs {
		switch {
		case p.kind == pathIndex:
			b = append(b, '[')
			b = strconv.AppendInt(b, int64(p.index), 10)
			b = append(b, ']')
			continue
		case p.kind == pathKey && !plainKey(p.name):
			b = append(b, '[')
			b = strconv.AppendQuote(b, p.name)
			b = append(b, ']')
			continue
		case len(b) > 0:
			b = append(b, '.')
		}
		b = append(b, p.name...)
	}
	return b
}

// push enters the segment seg of the path; pop leaves it.
func (d *decoder) push(seg pathSeg) { d.path = append(d.path, seg) }
func (d *decoder) pop()             { d.path = d.path[:len(d.path)-1] }

// pathText is the text of the path of the value being decoded.
func (d *decoder) pathText() string { return string(appendPath(nil, d.path)) }

// mapping is the pairs of a mapping with its merge keys applied, and
// whether every merge key in it (or in what it merges) was well formed.
type mapping struct {
	pairs []pair
	ok    bool
}

func newDecoder(env LookupEnv, maxSteps int) *decoder {
	if env == nil {
		env = func(string) (string, bool) { return "", false }
	}
	return &decoder{env: env, maxSteps: maxSteps, expanded: make(map[*yaml.Node]*expansion),
		inside: make(map[*yaml.Node]bool), merging: make(map[*yaml.Node]bool), merged: make(map[*yaml.Node]mapping)}
}

// step counts n steps of expansion; false once the document is over the
// bound, which is reported once.
func (d *decoder) step(n int) bool {
	over := d.steps > d.maxSteps
	d.steps += n
	if d.steps > d.maxSteps && !over {
		d.addAt("", nil, fmt.Sprintf("document too large: aliases and merge keys expand to more than %d values", d.maxSteps))
	}
	return d.steps <= d.maxSteps
}

// add reports a problem with the value being decoded, at the position of
// the node at (none for nil).
func (d *decoder) add(at *yaml.Node, msg string) {
	p := Problem{Path: d.pathText(), Msg: msg}
	if at != nil {
		p.Line, p.Column = at.Line, at.Column
	}
	d.problems = append(d.problems, p)
}

// addIn reports a problem with the value at segment seg of the one being
// decoded.
func (d *decoder) addIn(seg pathSeg, at *yaml.Node, msg string) {
	d.push(seg)
	d.add(at, msg)
	d.pop()
}

// addAt reports a problem at the path whose text is path.
func (d *decoder) addAt(path string, at *yaml.Node, msg string) {
	p := Problem{Path: path, Msg: msg}
	if at != nil {
		p.Line, p.Column = at.Line, at.Column
	}
	d.problems = append(d.problems, p)
}

var (
	timeType     = reflect.TypeFor[time.Time]()
	durationType = reflect.TypeFor[time.Duration]()
)

// decode decodes n, found at the decoder's path under the mapping key
// node key (nil for a list item or the document), into v. A null value
// leaves v as it is, so that omitted and empty fields keep their defaults.
func (d *decoder) decode(key, n *yaml.Node, v reflect.Value) {
	if d.steps > d.maxSteps {
		return
	}
	at := position(key, n)
	if n != nil && n.Kind == yaml.AliasNode {
		d.copying++
		defer func() { d.copying-- }()
	}
	n = deref(n)
	if d.copying > 0 {
		if !d.step(1) {
			return
		}
		// An alias, or a merged pair, may bring in a value that holds it
		// (limits hold the limits of models): the second time round is a
		// cycle. Only a copy can make one: a tree written out has none.
		if n != nil && (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) {
			if d.inside[n] {
				d.add(at, "an alias or merge key must not bring in a value that holds it")
				return
			}
			d.inside[n] = true
			defer delete(d.inside, n)
		}
	}
	d.decodeValue(at, n, v)
}

// decodeValue decodes n (no alias), found at at, into v.
func (d *decoder) decodeValue(at *yaml.Node, n *yaml.Node, v reflect.Value) {
	switch v.Type() {
	case timeType:
		d.decodeTime(at, n, v)
		return
	case durationType:
		d.decodeDuration(at, n, v)
		return
	case postgresType, redisType:
		// A URL alone is the mapping's url.
		if n != nil && n.Kind == yaml.ScalarNode && !isNull(n) {
			d.decodeValue(at, n, v.FieldByName("URL"))
			return
		}
	}
	switch v.Kind() {
	case reflect.Pointer:
		if isNull(n) {
			return
		}
		elem := reflect.New(v.Type().Elem())
		if !v.IsNil() {
			elem.Elem().Set(v.Elem())
		}
		// The same node, a pointer's indirection down: not a second
		// visit (decode would take it for a cycle inside an alias).
		d.decodeValue(at, n, elem.Elem())
		v.Set(elem)
	case reflect.Struct:
		d.decodeStruct(at, n, v)
	case reflect.Slice:
		if isNull(n) {
			return
		}
		if n.Kind != yaml.SequenceNode {
			d.add(at, "must be a list, got "+describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.push(pathSeg{index: i, kind: pathIndex})
			d.decode(nil, item, s.Index(i))
			d.pop()
		}
		v.Set(s)
	case reflect.Map:
		d.decodeMap(at, n, v)
	case reflect.String:
		s, ok := d.scalar(at, n, "a string")
		if ok {
			v.SetString(s)
		}
	case reflect.Bool:
		d.decodeBool(at, n, v)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		d.decodeInt(at, n, v)
	default:
		// Programmer error: a Config field of a kind this decoder does not know.
		d.add(at, fmt.Sprintf("internal error: cannot decode into %s", v.Type()))
	}
}

func (d *decoder) decodeStruct(at, n *yaml.Node, v reflect.Value) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.add(at, "must be a mapping, got "+describe(n))
		return
	}
	switch v.Type() {
	case reflect.TypeFor[Store]():
		// A store section replaces the default store entirely: writing
		// postgres must not leave the default sqlite path behind.
		v.SetZero()
	case reflect.TypeFor[Ledger]():
		// So does a ledger section's postgres (sqlite must not stay),
		// keeping the default bound of the spool.
		if mappingHas(n, "postgres") {
			v.FieldByName("SQLite").SetString("")
		}
	}
	fields, names := yamlFields(v.Type())
	ps, mark := d.pairs(n, pathField)
	defer d.releasePairs(mark)
	for _, p := range ps {
		if p.key.Kind != yaml.ScalarNode {
			d.add(p.key, "mapping keys must be strings, got "+describe(p.key))
			continue
		}
		name := p.key.Value
		i, ok := fields[name]
		if !ok {
			hint := didYouMean(name, names)
			if hint == "" {
				hint = " (expected one of: " + strings.Join(names, ", ") + ")"
			}
			d.addIn(pathSeg{name: name}, p.key, "unknown field"+hint)
			continue
		}
		d.push(pathSeg{name: name})
		d.decodePair(p, v.Field(i))
		d.pop()
	}
}

// decodePair decodes the value of p into v; a pair a merge key brought
// in counts as expansion, as an alias does.
func (d *decoder) decodePair(p pair, v reflect.Value) {
	if p.merged {
		d.copying++
		defer func() { d.copying-- }()
	}
	d.decode(p.key, p.value, v)
}

func (d *decoder) decodeMap(at, n *yaml.Node, v reflect.Value) {
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.add(at, "must be a mapping, got "+describe(n))
		return
	}
	m := reflect.MakeMap(v.Type())
	ps, mark := d.pairs(n, pathKey)
	defer d.releasePairs(mark)
	for _, p := range ps {
		if p.key.Kind != yaml.ScalarNode {
			d.add(p.key, "mapping keys must be strings, got "+describe(p.key))
			continue
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		d.push(pathSeg{name: p.key.Value, kind: pathKey})
		d.decodePair(p, elem)
		d.pop()
		m.SetMapIndex(reflect.ValueOf(p.key.Value).Convert(v.Type().Key()), elem)
	}
	v.Set(m)
}

// pairs lists the key/value pairs of mapping n, reporting duplicate keys
// (as segments of kind under path) and malformed merge keys. The pairs
// are on the decoder's stack of them, which they leave with
// releasePairs(mark) once decoded: a mapping's pairs are needed only while
// it is decoded, and a config of many keys has a great many mappings.
func (d *decoder) pairs(n *yaml.Node, kind pathKind) (ps []pair, mark int) {
	mark = len(d.pairStack)
	var bad []*yaml.Node
	var dups []pair
	d.pairStack, bad = d.mappingPairs(d.pairStack, n, &dups)
	for _, dup := range dups {
		first, again := dup.key, dup.value
		d.addIn(pathSeg{name: again.Value, kind: kind}, again, fmt.Sprintf("duplicate key (first at line %d)", first.Line))
	}
	for _, b := range bad {
		d.addIn(pathSeg{name: "<<"}, b, "a merge key must refer to a mapping or a list of mappings, none of which merges the mapping that holds it")
	}
	return d.pairStack[mark:len(d.pairStack):len(d.pairStack)], mark
}

// releasePairs takes the pairs from mark on off the decoder's stack.
func (d *decoder) releasePairs(mark int) {
	clear(d.pairStack[mark:])
	d.pairStack = d.pairStack[:mark]
}

// scalar returns the string value of the scalar n after ${ENV} expansion.
// ok is false when n is null (the field keeps its value) or a problem was
// reported.
func (d *decoder) scalar(at, n *yaml.Node, want string) (s string, ok bool) {
	if n.Kind != yaml.ScalarNode {
		d.add(at, "must be "+want+", got "+describe(n))
		return "", false
	}
	if e := d.expand(at, n); e != nil {
		return e.value, !e.failed
	}
	if isNull(n) {
		return "", false
	}
	return n.Value, true
}

// expand expands the ${ENV} references of the scalar n once (an anchored
// scalar can be reached through several aliases) and returns what it did,
// or nil when n has nothing to expand.
func (d *decoder) expand(at, n *yaml.Node) *expansion {
	if e, ok := d.expanded[n]; ok {
		return e
	}
	if !strings.Contains(n.Value, "$") {
		return nil
	}
	value, problems := expandEnv(n.Value, d.env)
	e := &expansion{orig: n.Value, value: value, failed: len(problems) > 0}
	d.expanded[n] = e
	d.order = append(d.order, n)
	for _, msg := range problems {
		d.add(at, msg)
	}
	return e
}

func (d *decoder) decodeInt(at, n *yaml.Node, v reflect.Value) {
	if n.Kind != yaml.ScalarNode {
		d.add(at, "must be an integer"+intHint(d.pathText())+", got "+describe(n))
		return
	}
	s := n.Value
	e := d.expand(at, n)
	switch {
	case e != nil && e.failed:
		return
	case e != nil:
		s = e.value
	case isNull(n):
		return
	case n.ShortTag() != "!!int":
		d.add(at, "must be an integer"+intHint(d.pathText())+", got "+literal(n))
		return
	}
	i, err := strconv.ParseInt(strings.TrimSpace(s), 0, 64)
	if err == nil && v.OverflowInt(i) {
		err = strconv.ErrRange
	}
	if err != nil {
		got := literal(n)
		if e != nil {
			got = "the expansion of " + strconv.Quote(e.orig)
		}
		d.add(at, "must be an integer"+intHint(d.pathText())+", got "+got)
		return
	}
	v.SetInt(i)
}

// intHint explains the unit of prices, the only integers that people are
// tempted to write as decimals.
func intHint(path string) string {
	switch {
	case !strings.HasPrefix(path, "pricing"):
		return ""
	case strings.HasSuffix(path, ".above_input_tokens"):
		return " (a number of prompt tokens)"
	case strings.HasSuffix(path, ".per_request"):
		return " (micro-dollars per request: $0.01 is 10000)"
	}
	return " (micro-dollars per 1M tokens: $2.50 is 2500000)"
}

var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02"}

func (d *decoder) decodeTime(at, n *yaml.Node, v reflect.Value) {
	const want = "a timestamp (RFC 3339 such as 2026-01-02T15:04:05Z, or a date such as 2026-01-02)"
	if n.Kind != yaml.ScalarNode {
		d.add(at, "must be "+want+", got "+describe(n))
		return
	}
	s := n.Value
	e := d.expand(at, n)
	switch {
	case e != nil && e.failed:
		return
	case e != nil:
		s = e.value
	case isNull(n):
		return
	case n.ShortTag() != "!!timestamp" && n.ShortTag() != "!!str":
		d.add(at, "must be "+want+", got "+literal(n))
		return
	}
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, strings.TrimSpace(s)); err == nil {
			v.Set(reflect.ValueOf(t))
			return
		}
	}
	got := literal(n)
	if e != nil {
		got = "the expansion of " + strconv.Quote(e.orig)
	}
	d.add(at, "must be "+want+", got "+got)
}

// yamlStruct is what yamlFields returns for a struct type; callers only
// read it.
type yamlStruct struct {
	index map[string]int
	names []string
}

// fieldCache holds each struct type's yamlStruct, made on first use: a
// config of many keys decodes the same few structs hundreds of thousands
// of times.
var fieldCache sync.Map // reflect.Type → *yamlStruct

// yamlFields maps the YAML names of a struct's fields to field indexes, and
// lists the names in declaration order. The results are shared: callers
// must not change them.
func yamlFields(t reflect.Type) (map[string]int, []string) {
	if f, ok := fieldCache.Load(t); ok {
		sf := f.(*yamlStruct)
		return sf.index, sf.names
	}
	fields, names := structFieldsOf(t)
	fieldCache.Store(t, &yamlStruct{index: fields, names: names})
	return fields, names
}

// structFieldsOf works out what yamlFields returns, uncached.
func structFieldsOf(t reflect.Type) (map[string]int, []string) {
	fields := make(map[string]int, t.NumField())
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		fields[name] = i
		names = append(names, name)
	}
	return fields, names
}

// pair is one key/value pair of a YAML mapping; merged when a merge key
// brought it in.
type pair struct {
	key, value *yaml.Node
	merged     bool
}

// mappingPairs appends to dst the pairs of mapping n with merge keys (<<)
// applied:
// keys written in n win over merged ones, and among merged mappings the
// first wins. dup, if not nil, is called for every key written twice in n
// itself. bad lists the merge keys whose value is not a mapping or a list
// of mappings, or merges one that holds n (a cycle). The pairs of a merged
// mapping are made once per document, and every pair a merge copies
// counts as a step of expansion.
func (d *decoder) mappingPairs(dst []pair, n *yaml.Node, dups *[]pair) (ps []pair, bad []*yaml.Node) {
	var keys pairKeys
	var merged []pair
	ps = slices.Grow(dst, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			m, ok := d.mergeSources(n, v)
			if !ok {
				bad = append(bad, k)
			}
			merged = append(merged, m...)
			continue
		}
		if k.Kind == yaml.ScalarNode {
			if first := keys.find(k.Value); first != nil {
				if dups != nil {
					*dups = append(*dups, pair{key: first, value: k})
				}
				continue
			}
			keys.add(k)
		}
		ps = append(ps, pair{key: k, value: v})
	}
	for _, p := range merged {
		if keys.find(p.key.Value) != nil {
			continue
		}
		keys.add(p.key)
		p.merged = true
		ps = append(ps, p)
	}
	return ps, bad
}

// pairKeys is the set of keys mappingPairs has taken, by value: a list
// while they are few (most mappings have a handful of keys, and a map for
// each would cost more than the search), a map after.
type pairKeys struct {
	few   [linearPairs]*yaml.Node
	n     int
	index map[string]*yaml.Node
}

// linearPairs is how many keys pairKeys searches through before it keeps
// a map.
const linearPairs = 16

// find returns the key taken with this value, or nil.
func (k *pairKeys) find(value string) *yaml.Node {
	if k.index != nil {
		return k.index[value]
	}
	for _, n := range k.few[:k.n] {
		if n.Value == value {
			return n
		}
	}
	return nil
}

// add takes key, whose value find does not know.
func (k *pairKeys) add(key *yaml.Node) {
	switch {
	case k.index != nil:
		k.index[key.Value] = key
	case k.n < linearPairs:
		k.few[k.n] = key
		k.n++
	default:
		k.index = make(map[string]*yaml.Node, 4*linearPairs)
		for _, n := range k.few {
			k.index[n.Value] = n
		}
		k.index[key.Value] = key
	}
}

// mergeSources is the pairs the merge key of mapping n with value v
// brings in, and whether v is well formed.
func (d *decoder) mergeSources(n, v *yaml.Node) ([]pair, bool) {
	v = deref(v)
	switch v.Kind {
	case yaml.MappingNode:
		m := d.source(n, v)
		return m.pairs, m.ok
	case yaml.SequenceNode:
		var all []pair
		ok := true
		for _, item := range v.Content {
			item = deref(item)
			if item.Kind != yaml.MappingNode {
				ok = false
				continue
			}
			m := d.source(n, item)
			all = append(all, m.pairs...)
			ok = ok && m.ok
		}
		return all, ok
	}
	return nil, false
}

// source is the pairs of src, merged into mapping n: none when src is n
// or is itself being merged (a cycle), or once the document is over the
// bound.
func (d *decoder) source(n, src *yaml.Node) mapping {
	if src == n || d.merging[src] {
		return mapping{}
	}
	m, done := d.merged[src]
	if !done {
		d.merging[src] = true
		ps, bad := d.mappingPairs(nil, src, nil)
		delete(d.merging, src)
		m = mapping{pairs: ps, ok: len(bad) == 0}
		d.merged[src] = m
	}
	if !d.step(len(m.pairs)) {
		return mapping{ok: m.ok}
	}
	return m
}

func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// position is the node to point at for the value n found under key: the
// value itself when it is a scalar written out, else its key (a block
// mapping or list starts on the line after its key; an empty value has no
// position of its own).
func position(key, n *yaml.Node) *yaml.Node {
	if key == nil || n.Kind == yaml.AliasNode {
		return n
	}
	if n.Kind == yaml.ScalarNode && !(isNull(n) && n.Value == "") {
		return n
	}
	return key
}

// describe names the kind of value n holds, for type errors.
func describe(n *yaml.Node) string {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!bool":
			return "a boolean"
		case "!!int":
			return "an integer"
		case "!!float":
			return "a number"
		case "!!timestamp":
			return "a timestamp"
		}
		return "a string"
	}
	return "nothing"
}

// literal shows a scalar as written: strings quoted, other scalars bare.
func literal(n *yaml.Node) string {
	if n.ShortTag() == "!!str" {
		return strconv.Quote(n.Value)
	}
	return n.Value
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expandEnv replaces every ${NAME} in s with the value of the environment
// variable NAME and every $$ with $. A $ followed by anything else is kept.
// The problems never include a variable's value.
func expandEnv(s string, env LookupEnv) (string, []string) {
	var b strings.Builder
	var problems []string
	for i := 0; i < len(s); {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			i++
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i += 2
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				problems = append(problems, `unterminated "${" (write "$$" for a literal "$")`)
				return "", problems
			}
			name := s[i+2 : i+2+end]
			switch {
			case name == "":
				problems = append(problems, `empty environment variable reference "${}"`)
			case !envName.MatchString(name):
				problems = append(problems, fmt.Sprintf("invalid environment variable name %q", name))
			default:
				value, ok := env(name)
				if !ok {
					problems = append(problems, fmt.Sprintf("environment variable %s is not set", name))
				}
				b.WriteString(value)
			}
			i += 2 + end + 1
		default:
			b.WriteByte('$')
			i++
		}
	}
	if len(problems) > 0 {
		return "", problems
	}
	return b.String(), nil
}

// find follows path from root. It returns the value node reached, the
// node to point at for it (see position), and whether the whole path
// exists; when it does not, n and at are those of the deepest part that
// does, or nil when not even the first step does.
func (d *decoder) find(root *yaml.Node, path string) (n, at *yaml.Node, ok bool) {
	segs, valid := splitPath(path)
	if !valid || len(segs) == 0 || root == nil {
		return nil, nil, false
	}
	cur := deref(root)
	for _, s := range segs {
		var key, next *yaml.Node
		switch {
		case s.index >= 0 && cur.Kind == yaml.SequenceNode && s.index < len(cur.Content):
			next = cur.Content[s.index]
		case s.index < 0 && cur.Kind == yaml.MappingNode:
			ps, _ := d.mappingPairs(nil, cur, nil)
			for _, p := range ps {
				if p.key.Kind == yaml.ScalarNode && p.key.Value == s.key {
					key, next = p.key, p.value
					break
				}
			}
		}
		if next == nil {
			return n, at, false
		}
		at = position(key, next)
		cur = deref(next)
		n = cur
	}
	return n, at, true
}

// locate returns the position of the value at path (see find), or 0, 0.
func (d *decoder) locate(root *yaml.Node, path string) (line, col int) {
	if _, at, _ := d.find(root, path); at != nil {
		return at.Line, at.Column
	}
	return 0, 0
}

// parseDocuments parses every YAML document in data with yaml.v3.
func parseDocuments(data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, &n)
	}
}

var unknownAnchor = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

var yamlLinePrefix = regexp.MustCompile(`^line [0-9]+: `)

// syntaxMessage strips the "yaml: line N: " prefix from a parse error.
func syntaxMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	return yamlLinePrefix.ReplaceAllString(msg, "")
}

// locateSyntaxError finds where the YAML syntax error msg is. The YAML
// library reports a line only, often the line where the enclosing block
// starts rather than where the mistake is; so this finds the shortest
// prefix of the document that fails with the same message, first by whole
// lines, then by characters within the last line. It returns 0, 0 when it
// cannot tell.
func locateSyntaxError(data []byte, msg string) (line, col int) {
	fails := func(prefix []byte) bool {
		_, err := parseDocuments(prefix)
		return err != nil && syntaxMessage(err) == msg
	}
	var starts []int // the offset of each line
	for off := 0; off < len(data); {
		starts = append(starts, off)
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			break
		}
		off += nl + 1
	}
	end := func(i int) int { // the end of line i, including its newline
		if i+1 < len(starts) {
			return starts[i+1]
		}
		return len(data)
	}
	i := sort.Search(len(starts), func(i int) bool { return fails(data[:end(i)]) })
	if i == len(starts) {
		return 0, 0
	}
	text := bytes.TrimRight(data[starts[i]:end(i)], "\r\n")
	j := sort.Search(len(text), func(j int) bool { return fails(data[:starts[i]+j+1]) })
	if m := unknownAnchor.FindStringSubmatch(msg); m != nil {
		if k := bytes.Index(text, []byte("*"+m[1])); k >= 0 {
			j = k // point at the alias rather than past it
		}
	}
	if j == len(text) {
		j = len(text) - len(bytes.TrimLeft(text, " \t"))
	}
	return i + 1, utf8.RuneCount(text[:j]) + 1
}

func (d *decoder) decodeDuration(at, n *yaml.Node, v reflect.Value) {
	const want = "a duration such as 30s, 5m or 1h30m"
	s, ok := d.scalar(at, n, want)
	if !ok {
		return
	}
	t, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || t < 0 {
		d.add(at, "must be "+want+", got "+strconv.Quote(s))
		return
	}
	v.SetInt(int64(t))
}

func (d *decoder) decodeBool(at, n *yaml.Node, v reflect.Value) {
	s, ok := d.scalar(at, n, "true or false")
	if !ok {
		return
	}
	b, err := strconv.ParseBool(strings.TrimSpace(s))
	if err != nil {
		d.add(at, "must be true or false, got "+strconv.Quote(s))
		return
	}
	v.SetBool(b)
}

var (
	postgresType = reflect.TypeFor[Postgres]()
	redisType    = reflect.TypeFor[Redis]()
)

// mappingHas reports whether the mapping n has the key name.
func mappingHas(n *yaml.Node, name string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.Value == name {
			return true
		}
	}
	return false
}

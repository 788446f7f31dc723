package blockyaml

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// reference parses data with yaml.v3 as one document.
func reference(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("a second document, or %v", err)
	}
	return &doc, nil
}

// diff describes the first difference between two trees, ignoring
// comments, or returns "".
func diff(path string, want, got *yaml.Node) string {
	switch {
	case want == nil && got == nil:
		return ""
	case want == nil || got == nil:
		return fmt.Sprintf("%s: want %v, got %v", path, want, got)
	}
	type fields struct {
		Kind   yaml.Kind
		Style  yaml.Style
		Tag    string
		Value  string
		Anchor string
		Alias  bool
		Line   int
		Column int
		N      int
	}
	w := fields{want.Kind, want.Style, want.Tag, want.Value, want.Anchor, want.Alias != nil, want.Line, want.Column, len(want.Content)}
	g := fields{got.Kind, got.Style, got.Tag, got.Value, got.Anchor, got.Alias != nil, got.Line, got.Column, len(got.Content)}
	if w != g {
		return fmt.Sprintf("%s: want %+v, got %+v", path, w, g)
	}
	if want.ShortTag() != got.ShortTag() {
		return fmt.Sprintf("%s: short tag: want %s, got %s", path, want.ShortTag(), got.ShortTag())
	}
	for i := range want.Content {
		if d := diff(fmt.Sprintf("%s/%d", path, i), want.Content[i], got.Content[i]); d != "" {
			return d
		}
	}
	return ""
}

// check fails t when Parse accepts data and its tree is not yaml.v3's.
func check(t *testing.T, data []byte) (accepted bool) {
	t.Helper()
	got, ok := Parse(data)
	if !ok {
		return false
	}
	want, err := reference(data)
	if err != nil {
		t.Fatalf("Parse accepted %q, which yaml.v3 rejects: %v", data, err)
	}
	if d := diff("", want, got); d != "" {
		t.Fatalf("Parse(%q) differs from yaml.v3 at %s", data, d)
	}
	checkStreams(t, data, got)
	return true
}

// checkStreams streams each top-level list of the document data, whose
// tree is full, with items released and kept: the items handed over and
// the tree left must be full's.
func checkStreams(t *testing.T, data []byte, full *yaml.Node) {
	t.Helper()
	top := full.Content[0]
	if top.Kind != yaml.MappingNode {
		return
	}
	streamed := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Style != 0 || streamed[k.Value] {
			continue
		}
		streamed[k.Value] = true
		for _, release := range []bool{true, false} {
			var items []*yaml.Node
			size := -1
			doc, ok := ParseStream(data, Stream{Key: k.Value, Size: func(n int) { size = n }, Item: func(j int, item *yaml.Node) bool {
				if size < 0 {
					t.Fatal("an item handed over before the list's size")
				}
				if j != len(items) {
					t.Fatalf("item %d handed over as %d", len(items), j)
				}
				items = append(items, deepCopy(item))
				return release
			}})
			if !ok {
				t.Fatalf("ParseStream(%q, %q) declined what Parse reads", data, k.Value)
			}
			list := doc.Content[0].Content[i+1]
			if v.Kind == yaml.SequenceNode && v.Style == 0 {
				// A block list: streamed.
				if d := diff("", &yaml.Node{Kind: v.Kind, Style: v.Style, Tag: v.Tag, Line: v.Line, Column: v.Column, Content: items}, v); d != "" {
					t.Fatalf("ParseStream(%q, %q) handed over items that differ at %s", data, k.Value, d)
				}
				if size != len(items) {
					t.Fatalf("ParseStream(%q, %q) gave the size %d, then %d items", data, k.Value, size, len(items))
				}
				if len(list.Content) != 0 {
					t.Fatalf("ParseStream(%q, %q) kept the streamed items in the tree", data, k.Value)
				}
				list.Content = items
			} else if len(items) != 0 {
				t.Fatalf("ParseStream(%q, %q) streamed a value that is no block list", data, k.Value)
			}
			if d := diff("", full, doc); d != "" {
				t.Fatalf("ParseStream(%q, %q) differs from Parse at %s", data, k.Value, d)
			}
		}
	}
}

func deepCopy(n *yaml.Node) *yaml.Node {
	c := *n
	c.Content = nil
	for _, k := range n.Content {
		c.Content = append(c.Content, deepCopy(k))
	}
	return &c
}

// accepted are documents of the shapes sluice.yaml is written in: Parse
// must read them itself, as yaml.v3 does.
var accepted = []string{
	"a: 1\n",
	"a: 1",
	"a:\n",
	"a:",
	"a:\nb: 2\n",
	"a:   # a comment\n  b: c\n",
	"# head\n\na: b # trailing\n\n# foot\n",
	"  a: 1\n  b: 2\n",
	"a:\n  b:\n    c: d\n  e: f\ng: h\n",
	"a:\n- x\n- y\nb: z\n",
	"a:\n  - x\n  -\n  - y\n",
	"- a\n- b\n",
	"-\n- b\n-\n",
	"- name: a\n  team: b\n- name: c\n",
	"a: 1\nkeys:\n- name: a\n  team: [x, y]\n- name: b\n-\n- [c]\nb: 2\nkeys:\n  - x\n",
	"keys:\n  - name: a\n    limits: {requests: {per_minute: 1}}\n  - {name: b}\n  - c\n  -\n    - d\nteams:\n  - t\n",
	"keys: []\nteams:\n- t\n",
	"-   name: a\n    team: b\n",
	"- a:\n  b: 1\n",
	"-\n  a: 1\n",
	"-\n  - a\n  - b\n",
	"a: [x, y]\n",
	"a: []\nb: {}\n",
	"a: [ x , y ]\n",
	"a: {x: 1, y: 2}\n",
	"a: {x: {y: [1, 2, {z: w}]}, v: []}\n",
	"a: [\"x\", 'y', \"\", '']\n",
	"a: \"x y\"\nb: 'z # w'\nc: \"\"\n",
	"a: \"x\" # c\n",
	"url: http://127.0.0.1:9/v1?x=y#frag\n",
	"at: 2030-01-01T00:00:00Z\nday: 2026-01-02\n",
	"n: -5\nm: 0x1F\nf: 1.5\ni: .inf\nnan: .nan\nb: true\nc: no\nnull1: ~\nnull2: null\nbig: 9223372036854775808\nneg: -9223372036854775809\n",
	"<<: x\n",
	"true: 1\n1: 2\n~: 3\n",
	"a: b c  d \n",
	"a: x#y\n",
	"a: it's\n",
	"a: b, c\n",
	"a: ${ENV}\nb: $$x\n",
	"key-0.x_y/z: v\n",
	"a: -x\nb: -.5\n",
	"\"a b\": 1\n'c': 2\n\"x:y\":\n  - \"v1:0\": {input: 1}\n",
	"a: [llama3.1:8b, x:y, \"z\"]\nb: {k: x:y, x:y: z}\n",
	"# caf\u00e9 \u2014 \U0001F600\na: 1 # \u00e9\nb: 2\n",
	"a: 1 # \u00e9\n",
	"a: [x] #\u00e9\n",
}

func TestAccepted(t *testing.T) {
	for _, doc := range accepted {
		if !check(t, []byte(doc)) {
			t.Errorf("Parse declined %q, which is in the subset", doc)
		}
	}
}

// declined are documents outside the subset, valid YAML or not.
var declined = []string{
	"",
	"# only a comment\n",
	"a\n",
	"[a, b]\n",
	"---\na: 1\n",
	"a: 1\n---\nb: 2\n",
	"a: 1\n...\n",
	"a: &x 1\nb: *x\n",
	"a: !!str 1\n",
	"a: |\n  x\n",
	"a: >\n  x\n",
	"a: x\n  y\n",
	"- a\n  b\n",
	"a:\tb\n",
	"a: b\r\n",
	"a: \"\\n\"\n",
	"a: 'it''s'\n",
	"a: \"x\n  y\"\n",
	"a: [x,\n  y]\n",
	"a: [x, ]\n",
	"a: [x, , y]\n",
	"a: {x}\n",
	"a: {x:1}\n",
	"a: {x : 1}\n",
	"a: [x: 1]\n",
	"a: [x#y]\n",
	"0: [0?]",
	"a: {k?: v}\n",
	"a : 1\n",
	"a: \"\\\": 1\n",
	"\"a\" : 1\n",
	"\"a\":1\n",
	"\"a\\b\": 1\n",
	"'a''b': 1\n",
	"a: 1 # \u2028b: 2\n",
	"a: 1 # \u0085\n",
	"a: 1 # \x01\n",
	"a: 1 # \xff\n",
	"a: 1 # \ufeff\n",
	"a: 'caf\u00e9 #' # \u00e9\n",
	"a: x # \u00e9\n  b: 1\n",
	"a: b: c\n",
	"a: b:\n",
	"a: - x\n",
	"- - a\n",
	"? a\n: b\n",
	"a: 1\n b: 2\n",
	"a:\n  b: 1\n c: 2\n",
	"a:\n  - x\n  b: 1\n",
	"- a\nb: 1\n",
	"a: 'x'#y\n",
	"a: caf\xc3\xa9\n",
	"\xef\xbb\xbfa: 1\n",
	"a: -\n",
	"a: ---\n",
	"%YAML 1.2\n---\na: 1\n",
	"a: @x\n",
	"a: `x`\n",
	"a: [" + strings.Repeat("[", 100) + strings.Repeat("]", 100) + "]\n",
	"a:\n" + strings.Repeat(" ", 2) + "b: " + strings.Repeat("x", 10) + "\n\tc: d\n",
	strings.Repeat("x", 1100) + ": 1\n",
	"a: {" + strings.Repeat("x", 1100) + ": 1}\n",
	"- " + strings.Repeat("x", 1100) + ": 1\n",
	"\"" + strings.Repeat("x", 1100) + "\": 1\n",
}

func TestDeclined(t *testing.T) {
	for _, doc := range declined {
		if check(t, []byte(doc)) {
			t.Errorf("Parse accepted %q, which is outside the subset", doc)
		}
	}
}

func TestDeepNestingIsDeclined(t *testing.T) {
	var b strings.Builder
	for i := range 200 {
		fmt.Fprintf(&b, "%sk:\n", strings.Repeat(" ", i))
	}
	if check(t, []byte(b.String())) {
		t.Error("Parse accepted 200 nested mappings")
	}
	var s strings.Builder
	for i := range 200 {
		fmt.Fprintf(&s, "%s-\n", strings.Repeat(" ", 2*i))
	}
	if check(t, []byte(s.String())) {
		t.Error("Parse accepted 200 nested lists")
	}
}

// TestEveryPrefix parses every prefix of a document of every accepted
// shape, cut at each byte: each is either declined or yaml.v3's tree.
func TestEveryPrefix(t *testing.T) {
	doc := []byte(strings.Join(accepted[:20], "---\n"))
	for _, part := range bytes.Split(doc, []byte("---\n")) {
		for i := range len(part) + 1 {
			check(t, part[:i])
		}
	}
}

// mustRead reports whether the repository file at rel is a sluice.yaml
// written in the subset: the examples, the bench's config, the good
// configs of the tests but the one about anchors.
func mustRead(rel string) bool {
	switch {
	case rel == "examples/quickstart.yaml", rel == "bench/extprocload/bench.yaml":
		return true
	case strings.HasPrefix(rel, "policies/testdata/good/"):
		return rel != "policies/testdata/good/anchors.yaml"
	}
	return false
}

func FuzzParse(f *testing.F) {
	for _, doc := range accepted {
		f.Add([]byte(doc))
	}
	for _, doc := range declined {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check(t, data)
	})
}

// tagged are plain scalars whose tags plainTag works out itself or must
// leave to yaml.v3.
var tagged = []string{
	"", "~", "null", "Null", "NULL", "nULL", "true", "True", "TRUE", "tRUE", "false", "no", "yes", "on", "off", "<<", "<", "<<<",
	"0", "-0", "+0", "1", "-1", "0x1F", "0X1f", "0_XA", "0__x1", "1_0x5", "0_b1", "0_", "1__", "0o17", "0O17", "0b101", "0B101", "-0b101", "-0o17", "017", "089", "1_000",
	"9223372036854775807", "9223372036854775808", "18446744073709551616", "-9223372036854775809",
	"1.5", "1e3", "1E3", "1e", ".5", "-.5", "+.5", ".inf", ".Inf", "-.inf", "+.inf", ".nan", "1.", "1.2.3",
	"2030-01-01", "2030-01-01T00:00:00Z", "2030-01-01t00:00:00z", "2030-1-1 0:0:0", "2030-01-01T00:00:00+01:00", "2030-01-0a",
	"0f94cb83f847ff1795bac8987850c3de599cdba7e5ccface1241b6f64bf307b4", "1e4743047e3", "1d", "1f", "1a", "0x1p-2", "0x1.8p3", "1Inf", "1nan",
	"abc", "sk-sluice-x", "gpt-4o", "-x", ".x", "+x", "@", "Yes", "Off",
}

func TestPlainTagIsYAMLs(t *testing.T) {
	for _, v := range tagged {
		want := (&yaml.Node{Kind: yaml.ScalarNode, Value: v}).ShortTag()
		if v == "<<" {
			want = "!!merge"
		}
		if got := plainTag(v); got != want {
			t.Errorf("plainTag(%q) = %s, yaml.v3 says %s", v, got, want)
		}
	}
}

func FuzzPlainTag(f *testing.F) {
	for _, v := range tagged {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		want := (&yaml.Node{Kind: yaml.ScalarNode, Value: v}).ShortTag()
		if got := plainTag(v); got != want && v != "<<" {
			t.Fatalf("plainTag(%q) = %s, yaml.v3 says %s", v, got, want)
		}
	})
}

// TestRepositoryFiles checks Parse on every YAML file in the repository,
// and that it reads the configurations themselves: if it declined them,
// sluice.yaml would be read at yaml.v3's speed again, silently.
func TestRepositoryFiles(t *testing.T) {
	var files []string
	err := filepath.WalkDir("../..", func(path string, e fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case e.IsDir() && strings.HasPrefix(e.Name(), ".") && path != "../..":
			return filepath.SkipDir
		case strings.HasSuffix(path, ".yaml"):
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 20 {
		t.Fatalf("found %d YAML files; has the repository moved?", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ok := check(t, data)
		rel, _ := filepath.Rel("../..", f)
		if mustRead(rel) && !ok {
			t.Errorf("%s: declined; it is a sluice.yaml in the subset", rel)
		}
	}
}

// TestStreamReusesReleasedNodes checks that a streamed list whose items
// are released costs the memory of an item, not of the list.
func TestStreamReusesReleasedNodes(t *testing.T) {
	var b strings.Builder
	b.WriteString("teams:\n- t\nkeys:\n")
	for i := range 20000 {
		fmt.Fprintf(&b, "  - name: key-%d\n    team: t\n    sha256: %064x\n    models: [m1, m2]\n", i, i)
	}
	data := []byte(b.String())
	allocated := func(f func()) uint64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f()
		runtime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	whole := allocated(func() {
		if _, ok := Parse(data); !ok {
			t.Fatal("Parse declined the document")
		}
	})
	n := 0
	streamed := allocated(func() {
		if _, ok := ParseStream(data, Stream{Key: "keys", Item: func(int, *yaml.Node) bool { n++; return true }}); !ok {
			t.Fatal("ParseStream declined the document")
		}
	})
	if n != 20000 {
		t.Fatalf("%d items handed over, want 20000", n)
	}
	// What is left is mostly the scalars' strings.
	if streamed*3 > whole {
		t.Errorf("streaming allocated %d bytes, parsing whole %d: released nodes are not reused", streamed, whole)
	}
	t.Logf("whole %d bytes, streamed %d", whole, streamed)
}

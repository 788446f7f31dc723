package policies

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sameAsTree fails t unless parsing doc streamed gives what parsing its
// whole tree gives, or declines it. It reports whether it streamed.
func sameAsTree(t *testing.T, doc []byte, env LookupEnv, skipProviderKeys bool) bool {
	t.Helper()
	streamed, ok := parseStreamed(doc, env, maxDecodeSteps, skipProviderKeys)
	tree, err := parseTree(doc, "f.yaml", env, maxDecodeSteps, skipProviderKeys)
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("the streamed parse accepted %q, which the tree parse refuses: %v", doc, err)
	}
	if !reflect.DeepEqual(streamed, tree) {
		t.Fatalf("the streamed parse of %q gave\n%+v\nthe tree parse\n%+v", doc, streamed, tree)
	}
	return true
}

// manyKeys is a config in the block subset that declares n keys, of every
// shape a key is written in: flow and block limits, allow-lists, expiry,
// ${ENV} values, merged mappings, and quoted scalars.
func manyKeys(n int) []byte {
	var b strings.Builder
	b.WriteString(`providers:
  - name: local
    kind: openai-compatible
    base_url: http://127.0.0.1:8000
models:
  - name: m1
    provider: local
  - name: m2
    provider: local
teams:
  - name: t
    models: [m1, m2]
  - name: u
keys:
`)
	for i := range n {
		fmt.Fprintf(&b, "  - name: key-%d\n    team: %s\n    sha256: %064x\n", i, []string{"t", "u"}[i%2], i+1)
		switch i % 6 {
		case 0:
			fmt.Fprintf(&b, "    prefix: sk-sluice-%06d\n    models: [m1]\n    limits:\n      requests: {per_minute: %d}\n", i, i+1)
		case 1:
			b.WriteString("    expires_at: 2030-01-01T00:00:00Z\n    limits: {tokens: {total: {per_day: 1000}}}\n")
		case 2:
			b.WriteString("    prefix: ${PREFIX}\n")
		case 3:
			b.WriteString("    <<: {models: [m2], prefix: \"sk-sluice-merged\"}\n")
		case 4:
			b.WriteString("    models:\n    - 'm*'\n")
		}
	}
	return []byte(b.String())
}

func TestStreamedParseIsTreeParse(t *testing.T) {
	env := func(name string) (string, bool) {
		if name == "PREFIX" {
			return "sk-sluice-env", true
		}
		return lookupTestEnv(name)
	}
	if !sameAsTree(t, manyKeys(600), env, false) {
		t.Fatal("the streamed parse declined a valid config in the block subset")
	}
	if !sameAsTree(t, manyKeys(60), env, true) {
		t.Fatal("the streamed parse declined a valid config in the block subset, provider keys left out")
	}
	// Any problem sends the document to the tree parse, which reports it
	// where it is.
	bad := strings.Replace(string(manyKeys(60)), "team: u\n", "team: nope\n", 1)
	if sameAsTree(t, []byte(bad), env, false) {
		t.Error("the streamed parse accepted a key of an unknown team")
	}
	if sameAsTree(t, manyKeys(60), nil, false) {
		t.Error("the streamed parse accepted an unset variable")
	}
	files, _ := filepath.Glob("testdata/*/*.yaml")
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, skip := range []bool{false, true} {
			got := sameAsTree(t, doc, lookupTestEnv, skip)
			if strings.HasPrefix(f, "testdata/bad/") && got && !skip {
				t.Errorf("%s: the streamed parse accepted a bad config", f)
			}
		}
	}
}

// BenchmarkParseManyKeys parses a config of 100,000 declared keys.
func BenchmarkParseManyKeys(b *testing.B) {
	doc := manyKeys(100000)
	env := func(string) (string, bool) { return "sk-sluice-env", true }
	b.ReportAllocs()
	b.SetBytes(int64(len(doc)))
	for b.Loop() {
		if _, err := Parse(doc, "sluice.yaml", env); err != nil {
			b.Fatal(err)
		}
	}
}

package policies

import (
	"fmt"
	"strings"
	"testing"
)

// manyKeys is a config that declares n keys, of every shape a key is
// written in: flow and block limits, allow-lists, expiry, ${ENV} values,
// merged mappings, and quoted scalars.
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

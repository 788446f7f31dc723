package policies

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestModelSetAllows(t *testing.T) {
	tests := []struct {
		name     string
		patterns []string
		allowed  []string
		denied   []string
	}{
		{"empty allows all", nil, []string{"gpt-4o", "", "anything/at:all"}, nil},
		{"star allows all", []string{"gpt-4o", "*"}, []string{"gpt-4o", "claude", ""}, nil},
		{"exact", []string{"gpt-4o", "sonnet"}, []string{"gpt-4o", "sonnet"},
			[]string{"gpt-4o-mini", "gpt-4", "GPT-4o", "", "sonnet "}},
		{"prefix", []string{"gpt-4o*"}, []string{"gpt-4o", "gpt-4o-mini", "gpt-4o/x"}, []string{"gpt-4", "xgpt-4o"}},
		{"suffix", []string{"*-mini"}, []string{"gpt-4o-mini", "-mini"}, []string{"gpt-4o-mini-2", "mini"}},
		{"infix", []string{"*sonnet*"}, []string{"sonnet", "claude-sonnet-4", "x/sonnet/y"}, []string{"sonet", "claude"}},
		{"star crosses slashes", []string{"meta-llama/*"}, []string{"meta-llama/Llama-3.1-8B", "meta-llama/a/b"}, []string{"meta-llama", "mistral/x"}},
		{"several stars", []string{"a*b*c"}, []string{"abc", "aXbYc", "abbc", "abcbc", "a-b-b-c"}, []string{"ab", "acb", "bac", "abcd"}},
		{"prefix and suffix must not overlap", []string{"ab*ba"}, []string{"abba", "ab-ba"}, []string{"aba", "ab"}},
		{"repeated parts", []string{"*a*a*"}, []string{"aa", "xaxax"}, []string{"a", "xax"}},
		{"double star", []string{"gpt**4o"}, []string{"gpt-4o", "gpt4o"}, []string{"gpt-4"}},
		{"mixed", []string{"claude-*", "gpt-4o"}, []string{"claude-3", "gpt-4o"}, []string{"gpt-4o-mini"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := NewModelSet(tt.patterns)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.allowed {
				if !m.Allows(s) {
					t.Errorf("%q: Allows(%q) = false, want true", tt.patterns, s)
				}
			}
			for _, s := range tt.denied {
				if m.Allows(s) {
					t.Errorf("%q: Allows(%q) = true, want false", tt.patterns, s)
				}
			}
		})
	}
}

func TestModelSetZero(t *testing.T) {
	var m ModelSet
	if !m.Allows("gpt-4o") || !m.Unrestricted() || len(m.Patterns()) != 0 {
		t.Errorf("zero ModelSet: Allows=%v Unrestricted=%v Patterns=%q; want true, true, []", m.Allows("gpt-4o"), m.Unrestricted(), m.Patterns())
	}
}

func TestModelSetAccessors(t *testing.T) {
	patterns := []string{"gpt-4o", "claude-*"}
	m, err := NewModelSet(patterns)
	if err != nil {
		t.Fatal(err)
	}
	patterns[0] = "changed" // the set keeps its own copy
	got := m.Patterns()
	if diff := cmp.Diff([]string{"gpt-4o", "claude-*"}, got); diff != "" {
		t.Errorf("Patterns (-want +got):\n%s", diff)
	}
	got[0] = "changed"
	if !m.Allows("gpt-4o") || m.Patterns()[0] != "gpt-4o" {
		t.Error("changing the slice returned by Patterns changed the set")
	}
	if m.Unrestricted() {
		t.Error("Unrestricted() = true for a restricted set")
	}
	all, err := NewModelSet([]string{"gpt-4o", "*"})
	if err != nil {
		t.Fatal(err)
	}
	if !all.Unrestricted() {
		t.Error(`Unrestricted() = false for a set with "*"`)
	}
}

func TestNewModelSetErrors(t *testing.T) {
	tests := []struct {
		patterns []string
		want     string
	}{
		{[]string{"gpt-4o", ""}, "model pattern 1: must not be empty"},
		{[]string{"gpt-4o?"}, `model pattern 0: may contain only letters, digits, -_.:/@ and the wildcard *, got "gpt-4o?"`},
		{[]string{"gpt 4o"}, `model pattern 0: may contain only letters, digits, -_.:/@ and the wildcard *, got "gpt 4o"`},
		{[]string{"[a-z]*"}, `model pattern 0: may contain only letters, digits, -_.:/@ and the wildcard *, got "[a-z]*"`},
	}
	for _, tt := range tests {
		_, err := NewModelSet(tt.patterns)
		if err == nil || err.Error() != tt.want {
			t.Errorf("NewModelSet(%q) = %v, want %s", tt.patterns, err, tt.want)
		}
	}
}

func TestModelSetAllowsDoesNotAllocate(t *testing.T) {
	m, err := NewModelSet([]string{"gpt-4o", "claude-*", "*-mini", "meta-llama/*instruct*"})
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"gpt-4o", "claude-3", "o3-mini", "meta-llama/x-instruct-y", "nope"} {
		if n := testing.AllocsPerRun(100, func() { m.Allows(model) }); n != 0 {
			t.Errorf("Allows(%q) allocates %v times", model, n)
		}
	}
}

func BenchmarkModelSetAllows(b *testing.B) {
	m, err := NewModelSet([]string{"gpt-4o", "gpt-4o-mini", "claude-*", "*-mini", "meta-llama/*instruct*"})
	if err != nil {
		b.Fatal(err)
	}
	models := []string{"gpt-4o", "claude-sonnet-4", "o3-mini", "meta-llama/llama-3.1-8b-instruct", "mistral-large"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.Allows(models[i%len(models)])
		i++
	}
}

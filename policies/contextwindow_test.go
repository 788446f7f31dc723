package policies

import "testing"

// TestKnownContextWindow: a name takes the window of the longest prefix
// it equals or continues with '-'; a prefix it merely starts with (no
// '-') does not count.
func TestKnownContextWindow(t *testing.T) {
	for _, tt := range []struct {
		name string
		want int64
	}{
		{"gpt-4o", 128_000},
		{"gpt-4o-mini", 128_000},
		{"gpt-4o-2024-08-06", 128_000},
		{"gpt-4.1-nano", 1_047_576},
		{"gpt-5-mini", 400_000},
		{"o1", 200_000},
		{"o1-mini", 128_000},            // longer than o1: it wins
		{"o1-mini-2024-09-12", 128_000}, // a snapshot of the longer prefix
		{"o1-2024-12-17", 200_000},
		{"o3-pro", 200_000},
		{"claude-sonnet-4-5", 200_000},
		{"o1x", 0}, // starts with o1, does not continue it with '-'
		{"gpt-4omni", 0},
		{"llama3", 0},
		{"", 0},
		{"claude", 200_000},
	} {
		if got := KnownContextWindow(tt.name); got != tt.want {
			t.Errorf("KnownContextWindow(%q) = %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestContextWindowOfAModel: context_window wins; else the largest known
// window of the model's name and its providers' upstream names.
func TestContextWindowOfAModel(t *testing.T) {
	for _, tt := range []struct {
		m       Model
		targets []Target
		want    int64
	}{
		{Model{Name: "mine", ContextWindow: 32_000}, []Target{{Upstream: "gpt-4.1"}}, 32_000},
		{Model{Name: "mine"}, []Target{{Upstream: "gpt-4o"}, {Upstream: "gpt-4.1"}}, 1_047_576},
		{Model{Name: "gpt-4.1"}, []Target{{Upstream: "gpt-4o"}}, 1_047_576},
		{Model{Name: "gpt-4o"}, []Target{{Upstream: "gpt-4.1"}}, 1_047_576},
		{Model{Name: "mine"}, []Target{{Upstream: "llama"}}, 0},
		{Model{Name: "mine", ContextWindow: -1}, nil, 0},
	} {
		if got := contextWindow(tt.m, tt.targets); got != tt.want {
			t.Errorf("contextWindow(%+v, %+v) = %d, want %d", tt.m, tt.targets, got, tt.want)
		}
	}
}

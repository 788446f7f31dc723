package extproc

import "testing"

// TestRateLimitKind: which kind of limit a response header describes,
// for OpenAI's and Anthropic's names and their variants; anything else is
// no kind and is never renamed.
func TestRateLimitKind(t *testing.T) {
	for name, want := range map[string]string{
		"x-ratelimit-limit-requests":                  kindRequests,
		"x-ratelimit-remaining-requests":              kindRequests,
		"x-ratelimit-reset-requests":                  kindRequests,
		"x-ratelimit-limit-tokens":                    kindTokens,
		"x-ratelimit-remaining-tokens_usage_based":    kindTokens,
		"x-ratelimit-reset-tokens":                    kindTokens,
		"x-ratelimit-limit-project-tokens":            kindTokens,
		"x-ratelimit-limit-budget-micro-usd":          kindBudget,
		"x-ratelimit-remaining-budget-micro-usd":      kindBudget,
		"anthropic-ratelimit-requests-limit":          kindRequests,
		"anthropic-ratelimit-requests-reset":          kindRequests,
		"anthropic-ratelimit-tokens-remaining":        kindTokens,
		"anthropic-ratelimit-input-tokens-limit":      kindTokens,
		"anthropic-ratelimit-output-tokens-reset":     kindTokens,
		"anthropic-ratelimit-unified-5h-utilization":  "",
		"x-ratelimit-requests":                        "",
		"x-ratelimit-used-requests":                   "",
		"x-upstream-ratelimit-limit-requests":         "",
		"x-upstream-anthropic-ratelimit-tokens-limit": "",
		"retry-after":     "",
		"ratelimit-limit": "",
	} {
		if got := rateLimitKind(name); got != want {
			t.Errorf("rateLimitKind(%q) = %q, want %q", name, got, want)
		}
	}
	if got := upstreamName("anthropic-ratelimit-tokens-limit"); got != "x-upstream-anthropic-ratelimit-tokens-limit" {
		t.Errorf("upstreamName = %q", got)
	}
	if got := upstreamName("x-ratelimit-reset-tokens"); got != "x-upstream-ratelimit-reset-tokens" {
		t.Errorf("upstreamName = %q", got)
	}
}

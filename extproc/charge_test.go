package extproc

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/usage"
)

// TestCharge covers every charging rule of docs/architecture.md,
// "Settling".
func TestCharge(t *testing.T) {
	const est = 40 // the tokenizer's count of the prompt
	reported := usage.Usage{InputTokens: 12, CachedInputTokens: 4, CacheCreationTokens: 2, OutputTokens: 30, ReasoningTokens: 7}
	counted := usage.Usage{InputTokens: est, OutputTokens: 25} // Sluice's own count
	delivered := usage.Usage{InputTokens: est, OutputTokens: 9}
	tests := []struct {
		name     string
		status   int
		complete bool
		res      usage.Result
		want     charged
	}{
		{name: "2xx: what the provider reported", status: 200, complete: true,
			res:  usage.Result{Usage: reported, Reported: true},
			want: charged{Usage: reported, Outcome: "ok"}},
		{name: "2xx: the last 2xx status is still ok", status: 299, complete: true,
			res:  usage.Result{Usage: reported, Reported: true},
			want: charged{Usage: reported, Outcome: "ok"}},
		{name: "2xx, nothing reported: the tokenizer's count, estimated", status: 200, complete: true,
			res:  usage.Result{Usage: counted, Estimated: true},
			want: charged{Usage: counted, Outcome: "ok", Estimated: true}},
		{name: "2xx, partly reported: as metered, estimated", status: 201, complete: true,
			res:  usage.Result{Usage: reported, Reported: true, Estimated: true},
			want: charged{Usage: reported, Outcome: "ok", Estimated: true}},
		{name: "non-2xx, nothing reported: charged nothing", status: 500, complete: true,
			res:  usage.Result{Usage: counted, Estimated: true},
			want: charged{Outcome: "upstream_error", Estimated: true}},
		{name: "non-2xx below 200: charged nothing", status: 199, complete: true,
			res:  usage.Result{Usage: counted},
			want: charged{Outcome: "upstream_error"}},
		{name: "3xx: charged nothing", status: 300, complete: true,
			res:  usage.Result{Usage: counted},
			want: charged{Outcome: "upstream_error"}},
		{name: "non-2xx, reported: what the provider reported", status: 400, complete: true,
			res:  usage.Result{Usage: reported, Reported: true},
			want: charged{Usage: reported, Outcome: "upstream_error"}},
		{name: "non-2xx, unparsed: still an upstream error, charged nothing", status: 502, complete: true,
			res:  usage.Result{Unparsed: true},
			want: charged{Outcome: "upstream_error"}},
		{name: "2xx unreadable: the input estimate, never a silent zero", status: 200, complete: true,
			res:  usage.Result{Unparsed: true},
			want: charged{Usage: usage.Usage{InputTokens: est}, Outcome: "unparsed", Estimated: true}},
		{name: "2xx unreadable after usage was reported: what was reported", status: 200, complete: true,
			res:  usage.Result{Usage: reported, Reported: true, Unparsed: true},
			want: charged{Usage: reported, Outcome: "unparsed"}},
		{name: "2xx unreadable after text was counted: the input estimate and that output", status: 200, complete: true,
			res:  usage.Result{Usage: counted, Estimated: true, Unparsed: true},
			want: charged{Usage: usage.Usage{InputTokens: est, OutputTokens: counted.OutputTokens}, Outcome: "unparsed", Estimated: true}},
		{name: "2xx ending in a provider error: what was delivered, the error kept", status: 200, complete: true,
			res:  usage.Result{Usage: delivered, Reported: true, Estimated: true, ProviderError: "overloaded_error"},
			want: charged{Usage: delivered, Outcome: "upstream_error", Estimated: true, ErrorType: "overloaded_error"}},
		{name: "2xx provider error, nothing reported: the estimate of what was delivered", status: 200, complete: true,
			res:  usage.Result{Usage: delivered, Estimated: true, ProviderError: "server_error"},
			want: charged{Usage: delivered, Outcome: "upstream_error", Estimated: true, ErrorType: "server_error"}},
		{name: "2xx provider error on an unreadable body: still the provider error", status: 200, complete: true,
			res:  usage.Result{Usage: delivered, Estimated: true, Unparsed: true, ProviderError: "error"},
			want: charged{Usage: delivered, Outcome: "upstream_error", Estimated: true, ErrorType: "error"}},
		{name: "non-2xx error body: the error type kept, charged nothing", status: 529, complete: true,
			res:  usage.Result{Usage: counted, Estimated: true, ProviderError: "overloaded_error"},
			want: charged{Outcome: "upstream_error", Estimated: true, ErrorType: "overloaded_error"}},
		{name: "cut short after a provider error: cancelled, what was delivered", status: 200, complete: false,
			res:  usage.Result{Usage: delivered, Estimated: true, ProviderError: "overloaded_error"},
			want: charged{Usage: delivered, Outcome: "cancelled", Estimated: true, ErrorType: "overloaded_error"}},
		{name: "stream cut short: what was delivered", status: 200, complete: false,
			res:  usage.Result{Usage: delivered, Estimated: true},
			want: charged{Usage: delivered, Outcome: "cancelled", Estimated: true}},
		{name: "stream cut short: reported usage stands", status: 200, complete: false,
			res:  usage.Result{Usage: reported, Reported: true},
			want: charged{Usage: reported, Outcome: "cancelled"}},
		{name: "cut short on a non-2xx: what was delivered", status: 503, complete: false,
			res:  usage.Result{Usage: delivered},
			want: charged{Usage: delivered, Outcome: "cancelled"}},
		{name: "cut short on an unreadable body: what was delivered", status: 200, complete: false,
			res:  usage.Result{Unparsed: true},
			want: charged{Outcome: "cancelled"}},
		{name: "cut before response headers: the input estimate", status: 0, complete: false,
			res:  unmetered(est),
			want: charged{Usage: usage.Usage{InputTokens: est}, Outcome: "cancelled", Estimated: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := charge(tt.status, tt.complete, tt.res, est)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("charge(%d, %v, %+v) (-want +got):\n%s", tt.status, tt.complete, tt.res, diff)
			}
		})
	}
}

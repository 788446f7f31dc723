package extproc

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/internal/usage"
)

// TestCharge covers every charging rule of docs/architecture.md,
// "Settling".
func TestCharge(t *testing.T) {
	const est = 40 // the tokenizer's count of the prompt
	reported := usage.Usage{tokens.Input: 12, tokens.CachedInput: 4, tokens.CacheWrite: 2, tokens.Output: 30, tokens.Reasoning: 7}
	counted := usage.Usage{tokens.Input: est, tokens.Output: 25} // Sluice's own count
	delivered := usage.Usage{tokens.Input: est, tokens.Output: 9}
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
		{name: "non-2xx, nothing reported: charged nothing, and nothing in it is an estimate", status: 500, complete: true,
			res:  usage.Result{Usage: counted, Estimated: true},
			want: charged{Outcome: "upstream_error"}},
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
			want: charged{Usage: usage.Usage{tokens.Input: est}, Outcome: "unparsed", Estimated: true}},
		{name: "2xx unreadable after usage was reported: what was reported", status: 200, complete: true,
			res:  usage.Result{Usage: reported, Reported: true, Unparsed: true},
			want: charged{Usage: reported, Outcome: "unparsed"}},
		{name: "2xx unreadable after text was counted: the input estimate and that output", status: 200, complete: true,
			res:  usage.Result{Usage: counted, Estimated: true, Unparsed: true},
			want: charged{Usage: usage.Usage{tokens.Input: est, tokens.Output: counted[tokens.Output]}, Outcome: "unparsed", Estimated: true}},
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
			want: charged{Outcome: "upstream_error", ErrorType: "overloaded_error"}},
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
			want: charged{Usage: usage.Usage{tokens.Input: est}, Outcome: "cancelled", Estimated: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := charge(tt.status, tt.complete, tt.res, est, 1<<20)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("charge(%d, %v, %+v) (-want +got):\n%s", tt.status, tt.complete, tt.res, diff)
			}
		})
	}
}

// TestChargeOutputCap: output Sluice estimated is never charged above the
// request's output cap × choices (what admission reserved), complete or
// cut; output the provider reported is charged as reported, even above it.
func TestChargeOutputCap(t *testing.T) {
	const est = 40
	estimated := func(out int64) usage.Result { // nothing reported: the tokenizer's count
		return usage.Result{Usage: usage.Usage{tokens.Input: est, tokens.Output: out}, Estimated: true, OutputEstimated: true}
	}
	inputReported := usage.Result{ // an Anthropic stream cut after message_start
		Usage: usage.Usage{tokens.Input: 12, tokens.CachedInput: 4, tokens.Output: 20}, Reported: true, Estimated: true, OutputEstimated: true}
	outputReported := usage.Result{ // the final count, input from the estimate
		Usage: usage.Usage{tokens.Input: est, tokens.Output: 20, tokens.Reasoning: 18}, Reported: true, Estimated: true}
	reported := usage.Result{Usage: usage.Usage{tokens.Input: 12, tokens.Output: 20, tokens.Reasoning: 18}, Reported: true}
	tests := []struct {
		name     string
		status   int
		complete bool
		res      usage.Result
		cap      int64
		want     charged
	}{
		{name: "cut, estimated above the cap: the cap", status: 200, res: estimated(20), cap: 13,
			want: charged{Usage: usage.Usage{tokens.Input: est, tokens.Output: 13}, Outcome: "cancelled", Estimated: true}},
		{name: "cut, estimated at the cap", status: 200, res: estimated(13), cap: 13,
			want: charged{Usage: usage.Usage{tokens.Input: est, tokens.Output: 13}, Outcome: "cancelled", Estimated: true}},
		{name: "cut, estimated under the cap", status: 200, res: estimated(12), cap: 13,
			want: charged{Usage: usage.Usage{tokens.Input: est, tokens.Output: 12}, Outcome: "cancelled", Estimated: true}},
		{name: "cut, n choices: the cap is max_tokens × n", status: 200, res: estimated(70), cap: 13 * 4,
			want: charged{Usage: usage.Usage{tokens.Input: est, tokens.Output: 52}, Outcome: "cancelled", Estimated: true}},
		{name: "complete, estimated above the cap: the cap", status: 200, complete: true, res: estimated(20), cap: 13,
			want: charged{Usage: usage.Usage{tokens.Input: est, tokens.Output: 13}, Outcome: "ok", Estimated: true}},
		{name: "cut, input reported, output estimated: the output capped", status: 200, res: inputReported, cap: 13,
			want: charged{Usage: usage.Usage{tokens.Input: 12, tokens.CachedInput: 4, tokens.Output: 13}, Outcome: "cancelled", Estimated: true}},
		{name: "output reported above the cap: as reported", status: 200, complete: true, res: outputReported, cap: 13,
			want: charged{Usage: outputReported.Usage, Outcome: "ok", Estimated: true}},
		{name: "reported above the cap: as reported", status: 200, complete: true, res: reported, cap: 13,
			want: charged{Usage: reported.Usage, Outcome: "ok"}},
		{name: "cut, reported above the cap: as reported", status: 200, res: reported, cap: 13,
			want: charged{Usage: reported.Usage, Outcome: "cancelled"}},
		{name: "cap 0: no estimated output", status: 200, complete: true, res: estimated(20), cap: 0,
			want: charged{Usage: usage.Usage{tokens.Input: est}, Outcome: "ok", Estimated: true}},
		{name: "no cap known: the estimate", status: 200, res: estimated(20), cap: -1,
			want: charged{Usage: usage.Usage{tokens.Input: est, tokens.Output: 20}, Outcome: "cancelled", Estimated: true}},
		{name: "huge cap: the estimate", status: 200, res: estimated(1 << 40), cap: math.MaxInt64,
			want: charged{Usage: usage.Usage{tokens.Input: est, tokens.Output: 1 << 40}, Outcome: "cancelled", Estimated: true}},
		{name: "cut, estimated audio output above the cap: its parts capped too", status: 200, cap: 13,
			res:  usage.Result{Usage: usage.Usage{tokens.Input: est, tokens.Output: 30, tokens.Reasoning: 20, tokens.AudioOutput: 25}, Reported: true, Estimated: true, OutputEstimated: true},
			want: charged{Usage: usage.Usage{tokens.Input: est, tokens.Output: 13, tokens.Reasoning: 13, tokens.AudioOutput: 13}, Outcome: "cancelled", Estimated: true}},
		{name: "huge estimate: the cap", status: 200, res: estimated(1 << 40), cap: 13,
			want: charged{Usage: usage.Usage{tokens.Input: est, tokens.Output: 13}, Outcome: "cancelled", Estimated: true}},
		{name: "non-2xx, nothing reported: still nothing", status: 500, complete: true, res: estimated(20), cap: 13,
			want: charged{Outcome: "upstream_error"}},
		{name: "cut before response headers: no output", res: unmetered(est), cap: 13,
			want: charged{Usage: usage.Usage{tokens.Input: est}, Outcome: "cancelled", Estimated: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := charge(tt.status, tt.complete, tt.res, est, tt.cap)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("charge(%d, %v, %+v, cap %d) (-want +got):\n%s", tt.status, tt.complete, tt.res, tt.cap, diff)
			}
		})
	}
}

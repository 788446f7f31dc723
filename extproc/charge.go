package extproc

import (
	"github.com/sluicegw/sluice/internal/tokens"
	"github.com/sluicegw/sluice/internal/usage"
)

// Outcomes of a settled request: the ledger record's Outcome, the usage
// metadata's "outcome" and the outcome label of
// sluice_extproc_requests_total.
const (
	outcomeOK            = "ok"
	outcomeUpstreamError = "upstream_error"
	outcomeUnparsed      = "unparsed"
	outcomeCancelled     = "cancelled"
)

// charged is what a request is charged for, and why.
type charged struct {
	Usage     usage.Usage
	Outcome   string
	Estimated bool // Usage is Sluice's count, not the provider's
	// ErrorType is the error the provider reported (res.ProviderError),
	// "" if none.
	ErrorType string
}

// charge applies the charging rules (docs/architecture.md, "Settling") to
// what the meter measured: status is the response's HTTP status, complete
// whether the final chunk arrived, res the meter's result, inputEstimate
// the tokenizer's count of the prompt and outputCap the most output the
// request may produce (its output cap × choices, what admission reserved;
// negative: no cap known).
//
//   - a stream cut short is charged what was delivered (cancelled), whatever
//     the status;
//   - a non-2xx is charged nothing unless the provider reported usage
//     (upstream_error);
//   - a 2xx that reports a provider error (an error event mid-stream, an
//     error object in the body) is charged what was delivered, as metered
//     (upstream_error);
//   - a 2xx body that cannot be read, or whose usage is not believable, is
//     charged what the provider reported, else the input estimate plus
//     the output the tokenizer counted — never a silent zero (unparsed);
//   - any other 2xx is charged what the provider reported, or the
//     tokenizer's count when it reported nothing (ok; res.Estimated).
//
// Output Sluice estimated (res.OutputEstimated: no final count from the
// provider, whether the stream completed or not) is never charged above
// outputCap: the provider stops there, and the tokenizer's count of the
// text seen can run above it. Output the provider reported is charged as
// reported, above the cap too.
//
// It is pure: pricing, the ledger, admission and metrics are settle's.
func charge(status int, complete bool, res usage.Result, inputEstimate, outputCap int64) charged {
	c := charged{Usage: res.Usage, Outcome: outcomeOK, Estimated: res.Estimated, ErrorType: res.ProviderError}
	switch {
	case !complete:
		c.Outcome = outcomeCancelled
	case status < 200 || status >= 300:
		c.Outcome = outcomeUpstreamError
		if !res.Reported {
			// Zero is the rule, not a count: the record is not estimated.
			c.Usage = usage.Usage{}
			c.Estimated = false
		}
	case res.ProviderError != "":
		c.Outcome = outcomeUpstreamError
	case res.Unparsed:
		c.Outcome = outcomeUnparsed
		if !res.Reported {
			c.Usage = usage.Usage{tokens.Input: inputEstimate, tokens.Output: res.Usage[tokens.Output]}
			c.Estimated = true
		}
	}
	if res.OutputEstimated && outputCap >= 0 && c.Usage[tokens.Output] > outputCap {
		c.Usage[tokens.Output] = outputCap
		c.Usage[tokens.Reasoning] = min(c.Usage[tokens.Reasoning], outputCap)
		c.Usage[tokens.AudioOutput] = min(c.Usage[tokens.AudioOutput], outputCap)
	}
	return c
}

// unmetered is the result of a request cut before its response headers,
// when there is no meter: the provider may have billed the input, so it
// is the input estimate.
func unmetered(inputEstimate int64) usage.Result {
	return usage.Result{Usage: usage.Usage{tokens.Input: inputEstimate}, Estimated: true, OutputEstimated: true}
}

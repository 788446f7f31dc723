package extproc

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/internal/payload"
	"github.com/sluicegw/sluice/internal/ssefilter"
)

// The usage chunk Sluice asked for is metered and then kept from the
// client, who did not ask for it (internal/ssefilter).

// forcesUsage reports whether Sluice turns stream_options.include_usage
// on for r, a request to ep: a streaming chat or completions request that
// did not ask for usage itself (no include_usage, or false). Those
// requests are sent with accept-encoding: identity, and their streamed
// responses lose the usage-only chunk on the way to the client.
func forcesUsage(ep llmapi.Endpoint, r payload.Request) bool {
	return r.Stream && (ep == llmapi.ChatCompletions || ep == llmapi.Completions) && !r.IncludeUsage
}

// identityEncoding asks the provider for an unencoded response, so the
// stream can be filtered as it passes.
func identityEncoding() *corev3.HeaderValueOption { return rawHeader("accept-encoding", "identity") }

// The outcomes of sluice_extproc_usage_chunks_total.
const (
	usageChunkRemoved      = "removed"
	usageChunkOversized    = "oversized"
	usageChunkEncoded      = "encoded"
	usageChunkUnterminated = "unterminated"
)

// usageFilter is the filter of the response to a request whose usage
// Sluice forced, or nil: for other requests, and for a response that is
// JSON (an error) or encoded. A provider that ignores accept-encoding:
// identity and compresses anyway has its stream passed as it came,
// usage chunk included, and counted (encoded): decompressing and
// recompressing every chunk would cost more than the chunk does.
func (p *Processor) usageFilter(contentType, contentEncoding string) *ssefilter.Filter {
	if !forcesUsage(p.ep, p.req) || strings.Contains(strings.ToLower(contentType), "json") {
		return nil
	}
	if ce := strings.TrimSpace(contentEncoding); ce != "" && !strings.EqualFold(ce, "identity") {
		p.d.Metrics.usageChunks.WithLabelValues(usageChunkEncoded).Inc()
		return nil
	}
	return ssefilter.New(0)
}

// filterBody filters a response chunk: nil when it passes unchanged,
// else the mutation that replaces it. Envoy's STREAMED mode applies a
// body reply's body_mutation to that one chunk
// (ProcessorState::handleBodyResponse in
// source/extensions/filters/http/ext_proc/processor_state.cc:
// MutationUtils::applyBodyMutations on the dequeued chunk, then
// injectDataToFilterChain only if bytes remain). An emptied chunk
// injects nothing, and one that was the last still ends the stream:
// Filter::handleDataStreamedModeBase (ext_proc.cc) stopped it with
// StopIterationNoBuffer, for which
// ActiveStreamFilterBase::commonHandleAfterDataCallback
// (source/common/http/filter_manager.cc) left an empty buffer "to make
// sure that when commonContinue is called, the pipeline resumes with an
// empty data frame with end_stream = true". Bytes held back from one
// chunk go out with a later one.
func (p *Processor) filterBody(b *extprocsvc.HttpBody) *extprocsvc.CommonResponse {
	out, changed := p.strip.Write(b.GetBody(), b.GetEndOfStream())
	if c := p.strip.TakeCounts(); c != (ssefilter.Counts{}) {
		p.d.Metrics.usageChunks.WithLabelValues(usageChunkRemoved).Add(float64(c.Removed))
		p.d.Metrics.usageChunks.WithLabelValues(usageChunkOversized).Add(float64(c.Oversized))
	}
	if !changed {
		return nil
	}
	bm := &extprocsvc.BodyMutation{Mutation: &extprocsvc.BodyMutation_Body{Body: out}}
	if len(out) == 0 {
		bm.Mutation = &extprocsvc.BodyMutation_ClearBody{ClearBody: true}
	}
	return &extprocsvc.CommonResponse{BodyMutation: bm}
}

// endUsageFilter is called when a response ends in trailers: no body
// reply follows, so bytes still held (the start of an event that never
// ended, which an SSE client would discard) cannot be sent, and are
// counted.
func (p *Processor) endUsageFilter() {
	if p.strip != nil && p.strip.Held() > 0 {
		p.d.Metrics.usageChunks.WithLabelValues(usageChunkUnterminated).Inc()
	}
	p.strip = nil
}

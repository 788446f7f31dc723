package envoytest

// Upstream HTTP filters: a cluster's HttpProtocolOptions.http_filters, run
// once per router attempt by Envoy's UpstreamFilterManager
// (source/common/router/upstream_request.cc), the upstream codec last.

import (
	"errors"
	"fmt"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
)

const typeUpstreamCodec = "envoy.extensions.filters.http.upstream_codec.v3.UpstreamCodec"

// buildUpstreamFilters builds cl's upstream filter chain: ext_proc filters
// followed by envoy.filters.http.upstream_codec, which must be last.
func (e *Emulator) buildUpstreamFilters(cl *cluster, cfg *config) error {
	fs := cl.httpOpts.GetHttpFilters()
	if len(fs) == 0 {
		return nil
	}
	if fs[len(fs)-1].GetTypedConfig().MessageName() != typeUpstreamCodec {
		return errors.New("http_filters: the last filter must be envoy.filters.http.upstream_codec")
	}
	for i, f := range fs[:len(fs)-1] {
		if f.GetDisabled() {
			return fmt.Errorf("http_filters[%d] (%s): disabled filters are not supported by the emulator", i, f.GetName())
		}
		tc := f.GetTypedConfig()
		if err := e.checkUpstreamFilterRelease(f.GetName(), string(tc.MessageName())); err != nil {
			return fmt.Errorf("http_filters[%d] (%s): %w", i, f.GetName(), err)
		}
		switch tc.MessageName() {
		case typeExtProc:
			c := &extprocv3.ExternalProcessor{}
			if err := anyTo(tc, typeExtProc, c); err != nil {
				return fmt.Errorf("http_filters[%d] (%s): %w", i, f.GetName(), err)
			}
			hf, err := e.newExtProcFilter(f.GetName(), c, cfg)
			if err != nil {
				return fmt.Errorf("http_filters[%d] (%s): %w", i, f.GetName(), err)
			}
			cl.upstreamFilters = append(cl.upstreamFilters, hf)
		case typeUpstreamCodec:
			return fmt.Errorf("http_filters[%d] (%s): envoy.filters.http.upstream_codec must be the last filter", i, f.GetName())
		default:
			return fmt.Errorf("http_filters[%d] (%s): unsupported upstream filter type %q (the emulator implements ext_proc and the upstream codec)", i, f.GetName(), tc.MessageName())
		}
	}
	return nil
}

package envoyrules

import (
	"fmt"
	"strings"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	upstreamcodecv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/upstream_codec/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/reflect/protoreflect"
)

const (
	srcFilterChain = "source/common/http/filter_chain_helper.h, FilterChainHelper::processFilter; " +
		"source/common/config/utility.cc, Utility::validateTerminalFilters"
)

// httpFactory is what the rules know of an HTTP filter's factory: its name
// (Envoy's "type" in the terminal-filter messages) and whether it is
// terminal (isTerminalFilterByProto).
type httpFactory struct {
	name     string
	terminal bool
}

// httpFactories are the HTTP filters Sluice uses. A filter of any other
// type gets no verdict on where it stands: its factory alone knows whether
// it is terminal.
var httpFactories = map[protoreflect.FullName]httpFactory{
	nameOf(&routerv3.Router{}):               {"envoy.filters.http.router", true},
	nameOf(&upstreamcodecv3.UpstreamCodec{}): {"envoy.filters.http.upstream_codec", true},
	nameOf(&extauthzv3.ExtAuthz{}):           {"envoy.filters.http.ext_authz", false},
	nameOf(&extprocv3.ExternalProcessor{}):   {"envoy.filters.http.ext_proc", false},
}

// terminalFindings applies validateTerminalFilters to one filter chain of
// the given type ("http", "http upgrade", "upstream http"): a terminal
// filter must be last, and the last filter must be terminal.
func terminalFindings(filters []*hcmv3.HttpFilter, path, chain string) []Finding {
	var out []Finding
	for i, f := range filters {
		fac, ok := httpFactories[f.GetTypedConfig().MessageName()]
		if !ok || f.GetConfigDiscovery() != nil {
			continue
		}
		last := i == len(filters)-1
		switch {
		case fac.terminal && !last:
			out = append(out, Finding{Path: fmt.Sprintf("%s[%d]", path, i), Msg: fmt.Sprintf(
				"Error: terminal filter named %s of type %s must be the last filter in a %s filter chain.", f.GetName(), fac.name, chain)})
		case !fac.terminal && last:
			out = append(out, Finding{Path: fmt.Sprintf("%s[%d]", path, i), Msg: fmt.Sprintf(
				"Error: non-terminal filter named %s of type %s is the last filter in a %s filter chain.", f.GetName(), fac.name, chain)})
		}
	}
	return out
}

// lastDisabled: the last filter of a chain cannot be disabled by default.
func lastDisabled(filters []*hcmv3.HttpFilter, path string) []Finding {
	if len(filters) == 0 || !filters[len(filters)-1].GetDisabled() {
		return nil
	}
	f := filters[len(filters)-1]
	return find(fmt.Sprintf("%s[%d].disabled", path, len(filters)-1),
		fmt.Sprintf("Error: the last (terminal) filter (%s) in the chain cannot be disabled by default.", f.GetName()))
}

// hcmChains calls fn for each HTTP filter chain of a connection manager:
// http_filters ("http"), and the filters of each upgrade config
// ("http upgrade").
func hcmChains(h *hcmv3.HttpConnectionManager, fn func(filters []*hcmv3.HttpFilter, path, chain string) []Finding) []Finding {
	out := fn(h.GetHttpFilters(), "http_filters", "http")
	for i, u := range h.GetUpgradeConfigs() {
		if len(u.GetFilters()) > 0 {
			out = append(out, fn(u.GetFilters(), fmt.Sprintf("upgrade_configs[%d].filters", i), "http upgrade")...)
		}
	}
	return out
}

func hcmRules() []*Rule {
	hcm := nameOf(&hcmv3.HttpConnectionManager{})
	return []*Rule{
		{
			Name: "hcm.terminal-filter", Applies: hcm, Source: srcFilterChain, Severity: Refused,
			Check: on(func(h *hcmv3.HttpConnectionManager) []Finding { return hcmChains(h, terminalFindings) }),
		},
		{
			Name: "hcm.last-filter-disabled", Applies: hcm, Source: srcFilterChain, Severity: Refused,
			Check: on(func(h *hcmv3.HttpConnectionManager) []Finding {
				return hcmChains(h, func(fs []*hcmv3.HttpFilter, path, _ string) []Finding { return lastDisabled(fs, path) })
			}),
		},
		{
			Name: "hcm.max-response-headers-kb", Applies: hcm, Source: srcHCMConfig, Severity: Refused,
			Check: on(func(h *hcmv3.HttpConnectionManager) []Finding {
				if h.GetCommonHttpProtocolOptions().GetMaxResponseHeadersKb() == nil {
					return nil
				}
				return find("common_http_protocol_options.max_response_headers_kb", "Error: max_response_headers_kb cannot be set on http_connection_manager.")
			}),
		},
		{
			Name: "hcm.strip-host-port", Applies: hcm, Source: srcHCMConfig, Severity: Refused,
			Check: on(func(h *hcmv3.HttpConnectionManager) []Finding {
				if !h.GetStripAnyHostPort() || !h.GetStripMatchingHostPort() {
					return nil
				}
				return find("strip_matching_host_port", "Error: Only one of `strip_matching_host_port` or `strip_any_host_port` can be set.")
			}),
		},
		{
			Name: "hcm.original-ip-detection", Applies: hcm, Source: srcHCMConfig, Severity: Refused,
			Check: on(func(h *hcmv3.HttpConnectionManager) []Finding {
				if len(h.GetOriginalIpDetectionExtensions()) == 0 {
					return nil
				}
				if h.GetUseRemoteAddress().GetValue() {
					return find("original_ip_detection_extensions", "Original IP detection extensions and use_remote_address may not be mixed")
				}
				if h.GetXffNumTrustedHops() > 0 {
					return find("original_ip_detection_extensions", "Original IP detection extensions and xff_num_trusted_hops may not be mixed")
				}
				return nil
			}),
		},
		{
			Name: "hcm.access-log-options", Applies: hcm, Source: srcHCMConfig, Severity: Refused,
			Check: on(func(h *hcmv3.HttpConnectionManager) []Finding {
				if h.GetAccessLogOptions() == nil {
					return nil
				}
				if h.GetFlushAccessLogOnNewRequest() { //nolint:staticcheck // the deprecated field is what Envoy checks
					return find("access_log_options", "Only one of flush_access_log_on_new_request or access_log_options can be specified.")
				}
				if h.GetAccessLogFlushInterval() != nil { //nolint:staticcheck // as above
					return find("access_log_options", "Only one of access_log_flush_interval or access_log_options can be specified.")
				}
				return nil
			}),
		},
		{
			Name: "hcm.duplicate-upgrade", Applies: hcm, Source: srcHCMConfig, Severity: Refused,
			Check: on(func(h *hcmv3.HttpConnectionManager) []Finding {
				var out []Finding
				seen := map[string]bool{}
				for i, u := range h.GetUpgradeConfigs() {
					k := strings.ToLower(u.GetUpgradeType())
					if seen[k] {
						out = append(out, Finding{Path: fmt.Sprintf("upgrade_configs[%d].upgrade_type", i),
							Msg: fmt.Sprintf("Error: multiple upgrade configs with the same name: '%s'", u.GetUpgradeType())})
					}
					seen[k] = true
				}
				return out
			}),
		},
		{
			Name: "listener.quic-codec", Applies: nameOf(&listenerv3.Listener{}), Source: srcHCMConfig, Severity: Refused,
			Check: on(func(l *listenerv3.Listener) []Finding {
				// A listener is QUIC when its udp_listener_config has
				// quic_options (ListenerImpl; listenerInfo().isQuic()).
				quic := l.GetUdpListenerConfig().GetQuicOptions() != nil
				var out []Finding
				eachHCM(l, func(path string, h *hcmv3.HttpConnectionManager) {
					http3 := h.GetCodecType() == hcmv3.HttpConnectionManager_HTTP3
					switch {
					case http3 && !quic:
						out = append(out, Finding{Path: path + ".codec_type", Msg: "HTTP/3 codec configured on non-QUIC listener."})
					case !http3 && quic:
						out = append(out, Finding{Path: path + ".codec_type", Msg: "Non-HTTP/3 codec configured on QUIC listener."})
					}
				})
				return out
			}),
		},
	}
}

// eachHCM calls fn with every http_connection_manager in a listener's
// filter chains (the default one included) and its path.
func eachHCM(l *listenerv3.Listener, fn func(path string, h *hcmv3.HttpConnectionManager)) {
	chain := func(prefix string, fc *listenerv3.FilterChain) {
		for j, f := range fc.GetFilters() {
			a := f.GetTypedConfig()
			if a.MessageName() != nameOf(&hcmv3.HttpConnectionManager{}) {
				continue
			}
			h := &hcmv3.HttpConnectionManager{}
			if a.UnmarshalTo(h) != nil {
				continue
			}
			fn(fmt.Sprintf("%s.filters[%d].typed_config(%s)", prefix, j, a.MessageName()), h)
		}
	}
	for i, fc := range l.GetFilterChains() {
		chain(fmt.Sprintf("filter_chains[%d]", i), fc)
	}
	if fc := l.GetDefaultFilterChain(); fc != nil {
		chain("default_filter_chain", fc)
	}
}

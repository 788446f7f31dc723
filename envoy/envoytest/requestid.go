package envoytest

import (
	"fmt"
	"net/netip"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// requestIDPolicy is what the connection manager does with x-request-id
// before any filter runs, as Envoy's ConnectionManagerUtility::
// mutateRequestHeaders (source/common/http/conn_manager_utility.cc) does:
//
//   - the request is internal when use_remote_address is set, the request
//     carries no x-forwarded-for, and the peer's address is internal by
//     internal_address_config — its CIDR ranges; none configured means no
//     address is internal, Envoy's default since 1.33 (the emulator has no
//     unix-socket listeners);
//   - it is an edge request when use_remote_address is set and it is not
//     internal (without use_remote_address no request is an edge request);
//   - with generate_request_id (default true) an edge request gets a new
//     x-request-id, whatever the client sent, unless
//     preserve_external_request_id is set; any other request gets one only
//     if it has none;
//   - with always_set_request_id_in_response the response (a local reply
//     too) carries the request's x-request-id (mutateResponseHeaders).
//
// The rest of what use_remote_address changes (x-forwarded-for appending,
// x-envoy-* sanitizing, x-envoy-external-address) is not emulated.
type requestIDPolicy struct {
	generate, useRemote, preserve, inResp bool
	internal                              []netip.Prefix
}

func newRequestIDPolicy(hcm *hcmv3.HttpConnectionManager) (requestIDPolicy, error) {
	p := requestIDPolicy{
		generate:  hcm.GetGenerateRequestId() == nil || hcm.GetGenerateRequestId().GetValue(),
		useRemote: hcm.GetUseRemoteAddress().GetValue(),
		preserve:  hcm.GetPreserveExternalRequestId(),
		inResp:    hcm.GetAlwaysSetRequestIdInResponse(),
	}
	for i, r := range hcm.GetInternalAddressConfig().GetCidrRanges() {
		a, err := netip.ParseAddr(r.GetAddressPrefix())
		if err != nil {
			return p, fmt.Errorf("internal_address_config.cidr_ranges[%d]: %w", i, err)
		}
		pr, err := a.Prefix(int(r.GetPrefixLen().GetValue()))
		if err != nil {
			return p, fmt.Errorf("internal_address_config.cidr_ranges[%d]: %w", i, err)
		}
		p.internal = append(p.internal, pr)
	}
	return p, nil
}

// apply sets h's x-request-id for a request from remoteIP.
func (p requestIDPolicy) apply(h *Headers, remoteIP string) {
	if !p.generate {
		return
	}
	_, hasXFF := h.Get("x-forwarded-for")
	internal := p.useRemote && !hasXFF && p.isInternal(remoteIP)
	edge := p.useRemote && !internal
	if _, ok := h.Get("x-request-id"); !ok || (edge && !p.preserve) {
		h.Set("x-request-id", newUUID())
	}
}

func (p requestIDPolicy) isInternal(ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, pr := range p.internal {
		if pr.Contains(a) {
			return true
		}
	}
	return false
}

// inResponse is the x-request-id a response to req carries, if any.
func (p requestIDPolicy) inResponse(req *Headers) (string, bool) {
	if !p.inResp {
		return "", false
	}
	id, ok := req.Get("x-request-id")
	return id, ok && id != ""
}

// respond sets the x-request-id of resp, a response to req.
func (p requestIDPolicy) respond(resp, req *Headers) {
	if id, ok := p.inResponse(req); ok {
		resp.Set("x-request-id", id)
	}
}

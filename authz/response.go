package authz

import (
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/chain"
)

// MetadataNamespace is where Envoy stores ext_authz dynamic metadata; the
// ext_proc filter must list it in metadata_options.forwarding_namespaces.
const MetadataNamespace = chain.AuthzNamespace

// Response turns a Decision into the CheckResponse Envoy expects. It is the
// one place where decisions meet the wire (envoy-protocol.md §2).
func Response(d *Decision) *authv3.CheckResponse {
	if d.Allowed() {
		return &authv3.CheckResponse{
			Status: &rpcstatus.Status{Code: int32(codes.OK)},
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
				// The caller's credential must never reach a provider.
				HeadersToRemove: apikey.CredentialHeaders,
			}},
			DynamicMetadata: d.Principal.Metadata(),
		}
	}
	code := codes.PermissionDenied
	if d.Status == 401 {
		code = codes.Unauthenticated
	}
	// Envoy uses only non-append headers in a denied response: set
	// append=false explicitly on each.
	headers := []*corev3.HeaderValueOption{
		header("content-type", "application/json"),
	}
	if d.Status == 429 {
		headers = append(headers, header("retry-after", strconv.FormatInt(ceilSeconds(d.RetryAfter), 10)))
	}
	if d.Status == 401 {
		scheme := `Bearer realm="sluice"`
		headers = append(headers, header("www-authenticate", scheme))
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(code), Message: d.Code},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(d.Status)},
			Headers: headers,
			Body:    string(apierr.Body(d.Dialect, &apierr.Error{Status: d.Status, Code: d.Code, Message: d.Message})),
		}},
	}
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header: &corev3.HeaderValue{Key: k, Value: v},
		Append: wrapperspb.Bool(false),
	}
}

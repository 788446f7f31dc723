package authz

import (
	"net/http"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/llmapi"
)

// MetadataNamespace is where Envoy stores ext_authz dynamic metadata; the
// ext_proc filter must list it in metadata_options.forwarding_namespaces.
const MetadataNamespace = chain.AuthzNamespace

// Response turns a Decision into the CheckResponse Envoy expects. It is the
// one place where decisions meet the wire (envoy-protocol.md §2).
func Response(d *Decision) *authv3.CheckResponse {
	if !d.Allowed() {
		return denied(d.Err, d.Dialect)
	}
	c := new(allowCell) // the reply and its parts in one allocation
	// The caller's credential must never reach a provider.
	c.ok.HeadersToRemove = apikey.CredentialHeaders
	c.member.OkResponse = &c.ok
	c.status.Code = int32(codes.OK)
	c.resp.Status, c.resp.HttpResponse = &c.status, &c.member
	c.resp.DynamicMetadata = d.Principal.Metadata()
	c.sig.Kind = &c.sigText
	c.sigText.StringValue = d.Signature
	c.resp.DynamicMetadata.Fields[chain.PrincipalSignatureKey] = &c.sig
	return &c.resp
}

// allowCell holds what Response returns for an allowed request.
type allowCell struct {
	resp    authv3.CheckResponse
	status  rpcstatus.Status
	member  authv3.CheckResponse_OkResponse
	ok      authv3.OkHttpResponse
	sig     structpb.Value
	sigText structpb.Value_StringValue
}

// denied is the one function that turns a refusal into Envoy's denied
// CheckResponse: gRPC status Unauthenticated for a 401 and PermissionDenied
// otherwise, with the code as its message; the HTTP status; the body in the
// dialect of the API called; content-type, retry-after on a 429 and on
// any refusal that says when to retry (503 admission_unavailable: whole
// seconds, at least 1) and www-authenticate on a 401.
func denied(e *apierr.Error, dialect llmapi.Dialect) *authv3.CheckResponse {
	code := codes.PermissionDenied
	if e.Status == http.StatusUnauthorized {
		code = codes.Unauthenticated
	}
	// Envoy uses only non-append headers in a denied response: set
	// append=false explicitly on each.
	headers := []*corev3.HeaderValueOption{
		header("content-type", "application/json"),
	}
	if e.Status == http.StatusTooManyRequests || e.RetryAfter > 0 {
		headers = append(headers, header("retry-after", strconv.FormatInt(retryAfter(e), 10)))
	}
	if e.Status == http.StatusUnauthorized {
		headers = append(headers, header("www-authenticate", `Bearer realm="sluice"`))
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(code), Message: e.Code},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(e.Status)},
			Headers: headers,
			Body:    string(apierr.Body(dialect, e)),
		}},
	}
}

// retryAfter is the retry-after of a 429 in whole seconds, rounded up and
// at least 1: the unit of the header, and of "retry in" in messages.
func retryAfter(e *apierr.Error) int64 { return max(e.RetryAfterSeconds(), 1) }

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header: &corev3.HeaderValue{Key: k, Value: v},
		Append: wrapperspb.Bool(false),
	}
}

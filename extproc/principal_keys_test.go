package extproc

import (
	"bytes"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/chain"
	"github.com/sluicegw/sluice/internal/principal"
)

// testKeys sign the principals of this package's tests, as ext_authz
// would; testPrincipals gives them to a Deps.
var testKeys = func() *principal.Keys {
	k, err := principal.New([][]byte{bytes.Repeat([]byte("k"), principal.MinSecretBytes)})
	if err != nil {
		panic(err)
	}
	return k
}()

func testPrincipals() *principal.Keys { return testKeys }

// signedAuthz is ext_authz's metadata for key id of team and org, signed
// for request rid at iat.
func signedAuthz(id, team, org, rid string, iat time.Time) *corev3.Metadata {
	s, _ := structpb.NewStruct(map[string]any{"key_id": id, "team": team, "org": org,
		chain.PrincipalSignatureKey: testKeys.Sign(principal.ForPrincipal, rid, iat, id, team, org)})
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{chain.AuthzNamespace: s}}
}

// signAll signs, at t0 and for the message's own x-request-id, an
// unsigned principal (key_id without sig) and an unsigned handoff
// (fallback_client_path without fallback_sig) in m's metadata, as
// ext_authz and the downstream processor would; a signature the test
// wrote itself is kept. It returns m.
func signAll(m *extprocsvc.ProcessingRequest) *extprocsvc.ProcessingRequest {
	fm := m.GetMetadataContext().GetFilterMetadata()
	rid, _ := headerGetter(m.GetRequestHeaders().GetHeaders())("x-request-id")
	if a := fm[chain.AuthzNamespace].GetFields(); a != nil && a["key_id"] != nil && a[chain.PrincipalSignatureKey] == nil {
		f := [3]string{a["key_id"].GetStringValue(), a["team"].GetStringValue(), a["org"].GetStringValue()}
		a[chain.PrincipalSignatureKey] = structpb.NewStringValue(testKeys.Sign(principal.ForPrincipal, rid, t0, f[:]...))
	}
	if h := fm[chain.UsageNamespace].GetFields(); h != nil && h[chain.FallbackPathKey] != nil && h[chain.FallbackSignatureKey] == nil {
		ho := decodeHandoff(m.GetMetadataContext(), rid)
		f := ho.fields()
		h[chain.FallbackSignatureKey] = structpb.NewStringValue(testKeys.Sign(principal.ForHandoff, rid, t0, f[:]...))
	}
	return m
}

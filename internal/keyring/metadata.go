package keyring

import "google.golang.org/protobuf/types/known/structpb"

// Metadata returns the principal encoded as the dynamic metadata ext_authz
// hands to ext_proc (fields in docs/architecture.md). It is built once when
// the principal is published and shared by every request of the key: the
// returned message must not be modified.
func (p *Principal) Metadata() *structpb.Struct { return p.metadata }

// encodeMetadata builds p's metadata: key_id, key_prefix, key_name, team,
// org, and key_models / team_models only where an allow-list exists.
func encodeMetadata(p *Principal) *structpb.Struct {
	f := map[string]*structpb.Value{
		"key_id":     structpb.NewStringValue(p.KeyID),
		"key_prefix": structpb.NewStringValue(p.KeyPrefix),
		"key_name":   structpb.NewStringValue(p.KeyName),
		"team":       structpb.NewStringValue(p.Team),
		"org":        structpb.NewStringValue(p.Org),
	}
	if !p.KeyModels.Unrestricted() {
		f["key_models"] = stringList(p.KeyModels.Patterns())
	}
	if !p.TeamModels.Unrestricted() {
		f["team_models"] = stringList(p.TeamModels.Patterns())
	}
	return &structpb.Struct{Fields: f}
}

func stringList(ss []string) *structpb.Value {
	vs := make([]*structpb.Value, len(ss))
	for i, s := range ss {
		vs[i] = structpb.NewStringValue(s)
	}
	return structpb.NewListValue(&structpb.ListValue{Values: vs})
}

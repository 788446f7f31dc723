package keyring

import "google.golang.org/protobuf/types/known/structpb"

// Metadata returns the principal encoded as the dynamic metadata ext_authz
// hands to ext_proc (fields in docs/architecture.md): key_id, key_prefix,
// key_name, team, org, and key_models / team_models only where an
// allow-list exists. It is built on each call, from values the keys of a
// team (and of an allow-list) share, so a key that is never used costs no
// metadata; the returned message must not be modified, for the shared
// values are in use by other requests.
func (p *Principal) Metadata() *structpb.Struct {
	c := new(metadataCell) // the struct and the key's own values in one allocation
	f := make(map[string]*structpb.Value, 7)
	f["key_id"] = c.str(0, p.KeyID)
	f["key_prefix"] = c.str(1, p.KeyPrefix)
	f["key_name"] = c.str(2, p.KeyName)
	if t := p.team; t != nil && t.name == p.Team && t.org == p.Org {
		f["team"], f["org"] = t.mdTeam, t.mdOrg
	} else {
		f["team"], f["org"] = structpb.NewStringValue(p.Team), structpb.NewStringValue(p.Org)
	}
	if !p.KeyModels.Unrestricted() {
		if p.keyModelsMD != nil {
			f["key_models"] = p.keyModelsMD
		} else {
			f["key_models"] = stringList(p.KeyModels.Patterns())
		}
	}
	if !p.TeamModels.Unrestricted() {
		if p.team != nil && p.team.mdModels != nil {
			f["team_models"] = p.team.mdModels
		} else {
			f["team_models"] = stringList(p.TeamModels.Patterns())
		}
	}
	c.s.Fields = f
	return &c.s
}

// metadataCell holds a Metadata struct and its key's three string values.
type metadataCell struct {
	s    structpb.Struct
	vals [3]structpb.Value
	strs [3]structpb.Value_StringValue
}

// str is value i of the cell, holding v.
func (c *metadataCell) str(i int, v string) *structpb.Value {
	c.strs[i].StringValue = v
	c.vals[i].Kind = &c.strs[i]
	return &c.vals[i]
}

func stringList(ss []string) *structpb.Value {
	vs := make([]*structpb.Value, len(ss))
	for i, s := range ss {
		vs[i] = structpb.NewStringValue(s)
	}
	return structpb.NewListValue(&structpb.ListValue{Values: vs})
}

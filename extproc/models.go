package extproc

import (
	"encoding/json"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocsvc "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/sluicegw/sluice/internal/keyring"
	"github.com/sluicegw/sluice/internal/llmapi"
	"github.com/sluicegw/sluice/policies"
)

// The model endpoints (GET /v1/models, GET /v1/models/{id}) are answered
// by Sluice itself, from the request headers, with an ImmediateResponse:
// the request never reaches a provider, reserves nothing and writes no
// spend record.
//
// Each API family lists what its own API can call: a request in
// Anthropic's dialect (llmapi.RequestDialect: the anthropic-version
// header) gets the models whose providers speak Anthropic's Messages API,
// any other the models whose providers speak OpenAI's API (every provider
// of one model speaks the same API: policies refuses a mix). A model the
// client's API cannot call is not in its list, and retrieving it is 404,
// as for a model that does not exist.
//
// The list holds models, not names: each model once, under its canonical
// name, in configured order, if the caller may use it (mayUse, the one
// allow-list check authorize makes too). Aliases are not listed: neither
// API's model object has a field that could say "another name for
// gpt-4o-mini", and a client that lists models to choose one (or to show
// them) would otherwise offer the same model twice. An alias still works
// wherever a model name does, retrieval included: GET /v1/models/{alias}
// answers with the model it names, under its canonical id, as Anthropic's
// own API answers for its aliases.
//
// owned_by is "sluice": the gateway's names are its own, and the provider
// behind one may change from request to request (weighted, fallback).
// Sluice knows no release date, so created is 0 and created_at the epoch
// (Anthropic documents an epoch value for an unknown date). The list is
// never paged: has_more is false and Anthropic's limit, before_id and
// after_id are ignored.

// modelsCreatedAt is created_at in Anthropic's shape: the epoch, RFC 3339.
const modelsCreatedAt = "1970-01-01T00:00:00Z"

// modelsOwner is owned_by in OpenAI's shape.
const modelsOwner = "sluice"

// mayUse reports whether the principal may use the model route: its key's
// and its team's allow-lists both allow it (an org has no allow-list).
// authorize and the model endpoints ask this one function.
func mayUse(pr *keyring.Principal, route *policies.ModelRoute) bool {
	return route.AllowedBy(pr.KeyModels) && route.AllowedBy(pr.TeamModels)
}

// speaks reports whether the model's providers speak dialect d's API.
func speaks(route *policies.ModelRoute, d llmapi.Dialect) bool {
	return route.Provider.Kind.Dialect() == d
}

// usableModels are the canonical names of the models the principal may
// use through dialect d's API, in configured order.
func usableModels(snap *policies.Snapshot, pr *keyring.Principal, d llmapi.Dialect) []string {
	ids := []string{}
	for _, r := range snap.Models() {
		if speaks(r, d) && mayUse(pr, r) {
			ids = append(ids, r.Name)
		}
	}
	return ids
}

type openAIModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type openAIModelList struct {
	Object string        `json:"object"`
	Data   []openAIModel `json:"data"`
}

type anthropicModel struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	DisplayName string `json:"display_name"`
	CreatedAt   string `json:"created_at"`
}

type anthropicModelList struct {
	Data    []anthropicModel `json:"data"`
	HasMore bool             `json:"has_more"`
	FirstID *string          `json:"first_id"`
	LastID  *string          `json:"last_id"`
}

func modelObject(d llmapi.Dialect, id string) any {
	if d == llmapi.Anthropic {
		return anthropicModel{Type: "model", ID: id, DisplayName: id, CreatedAt: modelsCreatedAt}
	}
	return openAIModel{ID: id, Object: "model", Created: 0, OwnedBy: modelsOwner}
}

// modelListBody is the list of ids in dialect d's shape.
func modelListBody(d llmapi.Dialect, ids []string) any {
	if d == llmapi.Anthropic {
		l := anthropicModelList{Data: []anthropicModel{}}
		for _, id := range ids {
			l.Data = append(l.Data, modelObject(d, id).(anthropicModel))
		}
		if len(ids) > 0 {
			l.FirstID, l.LastID = &ids[0], &ids[len(ids)-1]
		}
		return l
	}
	l := openAIModelList{Object: "list", Data: []openAIModel{}}
	for _, id := range ids {
		l.Data = append(l.Data, modelObject(d, id).(openAIModel))
	}
	return l
}

// answerModels answers a model endpoint: the list, or the one model the
// path names (by its name or an alias) — 404 model_not_found, the same for
// a model the caller may not use, or the caller's API cannot call, as for
// one that does not exist, so that a key cannot learn which models others
// may use.
func (p *Processor) answerModels() *extprocsvc.ProcessingResponse {
	var v any
	if p.ep == llmapi.ModelList {
		v = modelListBody(p.dialect, usableModels(p.snap, p.principal, p.dialect))
	} else {
		id, ok := llmapi.ModelID(p.path)
		route, known := p.snap.Model(id)
		if !ok || !known || !speaks(route, p.dialect) || !mayUse(p.principal, route) {
			return p.refuse(modelNotFound(id))
		}
		v = modelObject(p.dialect, route.Name)
	}
	body, _ := json.Marshal(v) // structs of strings, bools and ints: cannot fail
	p.state = finished
	p.d.Metrics.requests.WithLabelValues(p.ep.String(), outcomeAnswered).Inc()
	return &extprocsvc.ProcessingResponse{Response: &extprocsvc.ProcessingResponse_ImmediateResponse{ImmediateResponse: &extprocsvc.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode_OK},
		Headers: &extprocsvc.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{rawHeader("content-type", "application/json")}},
		Body:    body,
		Details: "sluice_" + p.ep.String(),
	}}}
}

// outcomeAnswered labels a request Sluice answered itself, and
// outcomeForwarded one it forwarded unmetered (count_tokens, an unknown
// path under unknown_paths: pass), in
// sluice_extproc_requests_total.
const (
	outcomeAnswered  = "answered"
	outcomeForwarded = "forwarded"
)

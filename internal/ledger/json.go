package ledger

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/sluicegw/sluice/internal/tokens"
)

// A Record's JSON (sluice spend records --format json, the golden files
// of extproc's tests) is an object of its fields under their Go names, its
// token counts a field per kind among them, named as tokens.Names.Field
// says ("InputTokens", …): the shape it had when each kind was a field.

type recordHead struct {
	RequestID, ClientRequestID, KeyID, Team, Org, Endpoint string
	Model, Provider, UpstreamModel                         string
}

type recordTail struct {
	CostPico              int64
	Priced                bool
	Status                int
	Outcome, ErrorType    string
	Estimated, Stream     bool
	StartedAt, FinishedAt time.Time
	TTFT                  time.Duration
}

func fieldName(n tokens.Names) string { return n.Field }

// MarshalJSON writes r in the shape above.
func (r Record) MarshalJSON() ([]byte, error) {
	return tokens.JSONObject(
		recordHead{r.RequestID, r.ClientRequestID, r.KeyID, r.Team, r.Org, r.Endpoint, r.Model, r.Provider, r.UpstreamModel},
		r.Tokens, fieldName,
		recordTail{r.CostPico, r.Priced, r.Status, r.Outcome, r.ErrorType, r.Estimated, r.Stream, r.StartedAt, r.FinishedAt, r.TTFT})
}

// UnmarshalJSON reads r from the shape above; a field it does not know is
// an error.
func (r *Record) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	var counts tokens.Counts
	for _, k := range tokens.All() {
		name := k.Names().Field
		if v, ok := fields[name]; ok {
			if err := json.Unmarshal(v, &counts[k]); err != nil {
				return err
			}
			delete(fields, name)
		}
	}
	rest, err := json.Marshal(fields)
	if err != nil {
		return err
	}
	var v struct {
		recordHead
		recordTail
	}
	d := json.NewDecoder(bytes.NewReader(rest))
	d.DisallowUnknownFields()
	if err := d.Decode(&v); err != nil {
		return err
	}
	h, t := v.recordHead, v.recordTail
	*r = Record{
		RequestID: h.RequestID, ClientRequestID: h.ClientRequestID, KeyID: h.KeyID, Team: h.Team, Org: h.Org,
		Endpoint: h.Endpoint, Model: h.Model, Provider: h.Provider, UpstreamModel: h.UpstreamModel,
		Tokens:   counts,
		CostPico: t.CostPico, Priced: t.Priced, Status: t.Status, Outcome: t.Outcome, ErrorType: t.ErrorType,
		Estimated: t.Estimated, Stream: t.Stream, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt, TTFT: t.TTFT,
	}
	return nil
}

// A Total's JSON (the admin API's /v1/spend totals, sluice spend
// --format json) is its group and request count, a field per kind of
// token named as tokens.Names.JSON says ("input_tokens", …), then its
// cost three ways: rounded up to the micro-dollar (cost_micro_usd), the
// same in dollars (cost_usd), and exact in pico-dollars (cost_pico_usd).

type totalHead struct {
	Group    string `json:"group"`
	Requests int64  `json:"requests"`
}

type totalTail struct {
	CostMicroUSD int64       `json:"cost_micro_usd"`
	CostPicoUSD  json.Number `json:"cost_pico_usd"`
	CostUSD      string      `json:"cost_usd"`
	Estimated    int64       `json:"estimated"`
	Unpriced     int64       `json:"unpriced"`
}

func jsonName(n tokens.Names) string { return n.JSON }

// MarshalJSON writes t in the shape above.
func (t Total) MarshalJSON() ([]byte, error) {
	return tokens.JSONObject(totalHead{t.Group, t.Requests}, t.Tokens, jsonName,
		totalTail{t.Cost.MicrosUp(), json.Number(t.Cost.PicoString()), t.Cost.DollarsUp(), t.Estimated, t.Unpriced})
}

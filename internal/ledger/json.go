package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
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

// UnmarshalJSON reads r from the shape above; a field it does not know,
// a field named in another letter case, and a field given twice are
// errors (encoding/json alone would match names in any case and keep a
// repeated field's last value).
func (r *Record) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	fields, err := objectFields(b)
	if err != nil {
		return err
	}
	for name := range fields {
		if !recordFieldNames[name] {
			return fmt.Errorf("ledger: record: unknown field %q", name)
		}
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
	CostMicroUSD json.Number `json:"cost_micro_usd"` // exact: 2^63 for the largest Sum
	CostPicoUSD  json.Number `json:"cost_pico_usd"`
	CostUSD      string      `json:"cost_usd"`
	Estimated    int64       `json:"estimated"`
	Unpriced     int64       `json:"unpriced"`
}

func jsonName(n tokens.Names) string { return n.JSON }

// MarshalJSON writes t in the shape above.
func (t Total) MarshalJSON() ([]byte, error) {
	return tokens.JSONObject(totalHead{t.Group, t.Requests}, t.Tokens, jsonName,
		totalTail{json.Number(t.Cost.MicrosUpString()), json.Number(t.Cost.PicoString()), t.Cost.DollarsUp(), t.Estimated, t.Unpriced})
}

// recordFieldNames are the names of a Record's JSON fields, exactly.
var recordFieldNames = func() map[string]bool {
	m := map[string]bool{}
	for _, t := range []reflect.Type{reflect.TypeFor[recordHead](), reflect.TypeFor[recordTail]()} {
		for i := range t.NumField() {
			m[t.Field(i).Name] = true
		}
	}
	for _, k := range tokens.All() {
		m[k.Names().Field] = true
	}
	return m
}()

// objectFields reads the JSON object b into its fields' raw values,
// refusing a field given twice.
func objectFields(b []byte) (map[string]json.RawMessage, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	if t, err := d.Token(); err != nil {
		return nil, err
	} else if t != json.Delim('{') {
		return nil, fmt.Errorf("ledger: record: want a JSON object, got %v", t)
	}
	fields := map[string]json.RawMessage{}
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return nil, err
		}
		name, _ := t.(string)
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		if _, dup := fields[name]; dup {
			return nil, fmt.Errorf("ledger: record: field %q given twice", name)
		}
		fields[name] = v
	}
	if _, err := d.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("ledger: record: data after the object")
	}
	return fields, nil
}

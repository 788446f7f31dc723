package ledger

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/money"
	"github.com/sluicegw/sluice/internal/tokens"
)

// TestAttackRecordJSONEveryKindAtTheEdges: each kind's count at 0, -1,
// MaxInt64 and MinInt64, the others set apart, writes its own field and
// reads back unchanged.
func TestAttackRecordJSONEveryKindAtTheEdges(t *testing.T) {
	for _, k := range tokens.All() {
		for _, v := range []int64{0, -1, math.MaxInt64, math.MinInt64} {
			r := Record{RequestID: "r\"<\n>\u2028", KeyID: "k", CostPico: math.MaxInt64, Status: 200, TTFT: math.MinInt64,
				StartedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}
			for j := range r.Tokens {
				r.Tokens[j] = int64(j+1) * 1_000_003
			}
			r.Tokens[k] = v
			b, err := json.Marshal(r)
			if err != nil {
				t.Fatalf("%s = %d: %v", k, v, err)
			}
			if !strings.Contains(string(b), `"`+k.Names().Field+`":`+strconv.FormatInt(v, 10)) {
				t.Errorf("%s = %d: not in %s", k, v, b)
			}
			var got Record
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("%s = %d: %v\n%s", k, v, err, b)
			}
			if diff := cmp.Diff(r, got); diff != "" {
				t.Errorf("%s = %d (-want +got):\n%s", k, v, diff)
			}
		}
	}
}

// TestAttackRecordJSONRefusesUnknownFields: a field no record has, a
// kind's count that is not a whole int64, or a token field under another
// spelling is refused, never dropped.
func TestAttackRecordJSONRefusesUnknownFields(t *testing.T) {
	for _, in := range []string{
		`{"RequestID":"r","Tokens":[1]}`,
		`{"RequestID":"r","input_tokens":1}`,
		`{"RequestID":"r","inputtokens":1}`,
		`{"RequestID":"r","InputTokens ":1}`,
		`{"RequestID":"r","InputTokens":1.5}`,
		`{"RequestID":"r","InputTokens":9223372036854775808}`,
		`{"RequestID":"r","InputTokens":"1"}`,
		`{"RequestID":"r","Cost":1}`,
		`[]`,
		`{"RequestID":"r"`,
	} {
		var r Record
		if err := json.Unmarshal([]byte(in), &r); err == nil {
			t.Errorf("%s read as %+v", in, r)
		}
	}
}

// TestAttackRecordJSONRefusesDuplicateFields: a record with a field twice
// says two things; reading it as either is a guess, so it is refused, as
// a field it does not know is.
func TestAttackRecordJSONRefusesDuplicateFields(t *testing.T) {
	for _, in := range []string{
		`{"RequestID":"r","InputTokens":1,"InputTokens":2}`,
		`{"RequestID":"r","AudioOutputTokens":1,"AudioOutputTokens":1}`,
		`{"RequestID":"a","RequestID":"b"}`,
		`{"RequestID":"r","CostPico":1,"CostPico":1000000}`,
		`{"RequestID":"r","requestid":"s"}`,
	} {
		var r Record
		if err := json.Unmarshal([]byte(in), &r); err == nil {
			t.Errorf("%s read as %+v", in, r)
		}
	}
}

// TestAttackRecordJSONFieldNamesExact: the fields are named exactly as
// MarshalJSON writes them, token counts and the rest alike: a name in
// another letter case is a field the record does not have.
func TestAttackRecordJSONFieldNamesExact(t *testing.T) {
	for _, in := range []string{`{"costpico":5}`, `{"requestID":"r"}`, `{"STATUS":200}`, `{"inputTokens":1}`} {
		var r Record
		if err := json.Unmarshal([]byte(in), &r); err == nil {
			t.Errorf("%s read as %+v", in, r)
		}
	}
}

// ceilMicros is p pico-dollars rounded up to the micro-dollar.
func ceilMicros(p *big.Int) *big.Int {
	q, m := new(big.Int).QuoRem(p, big.NewInt(money.PicoPerMicro), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// TestAttackTotalJSONCost: for costs around the micro-dollar and at the
// largest Sum, cost_pico_usd is the exact cost, cost_micro_usd is it
// rounded up to the micro-dollar, and cost_usd is cost_micro_usd in
// dollars: a cost is never shown as less than it is.
func TestAttackTotalJSONCost(t *testing.T) {
	for _, tt := range []struct {
		name string
		cost money.Sum
		pico string
	}{
		{"zero", money.Sum{}, "0"},
		{"1 pico-dollar", money.FromPico(1), "1"},
		{"just under a micro-dollar", money.FromPico(999_999), "999999"},
		{"a micro-dollar", money.FromPico(1_000_000), "1000000"},
		{"just over a micro-dollar", money.FromPico(1_000_001), "1000001"},
		{"just under a dollar", money.FromPico(999_999_999_999), "999999999999"},
		{"a dollar and a pico-dollar", money.FromPico(1_000_000_000_001), "1000000000001"},
		{"MaxInt64 pico-dollars", money.FromPico(math.MaxInt64), "9223372036854775807"},
		{"MaxInt64 micro-dollars", money.FromMicros(math.MaxInt64), "9223372036854775807000000"},
		{"MaxInt64 micro-dollars less a pico-dollar", money.FromParts(math.MaxInt64-1, 999_999), "9223372036854775806999999"},
		{"the largest Sum", money.Max, "9223372036854775807999999"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(Total{Group: "g", Requests: 1, Cost: tt.cost})
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Micro json.Number `json:"cost_micro_usd"`
				Pico  json.Number `json:"cost_pico_usd"`
				USD   string      `json:"cost_usd"`
			}
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			if got.Pico.String() != tt.pico {
				t.Errorf("cost_pico_usd %s, want %s", got.Pico, tt.pico)
			}
			pico, ok := new(big.Int).SetString(got.Pico.String(), 10)
			if !ok {
				t.Fatalf("cost_pico_usd %q is not an integer", got.Pico)
			}
			micro, ok := new(big.Int).SetString(got.Micro.String(), 10)
			if !ok {
				t.Fatalf("cost_micro_usd %q is not an integer", got.Micro)
			}
			if want := ceilMicros(pico); micro.Cmp(want) != 0 {
				t.Errorf("cost_micro_usd %s; cost_pico_usd %s rounded up to the micro-dollar is %s", micro, pico, want)
			}
			whole, frac, ok := strings.Cut(got.USD, ".")
			usdMicro, ok2 := new(big.Int).SetString(whole+frac, 10)
			if !ok || len(frac) != 6 || !ok2 || usdMicro.Cmp(micro) != 0 {
				t.Errorf("cost_usd %q is not cost_micro_usd %s in dollars", got.USD, micro)
			}
		})
	}
}

// TestAttackTotalJSONGroupNames: a group named with quotes, line ends,
// HTML, JSON's own line separators, NUL or bytes that are not UTF-8 is
// written as valid JSON, and reads back as the name (its invalid bytes
// as U+FFFD).
func TestAttackTotalJSONGroupNames(t *testing.T) {
	for _, g := range []string{
		``, `"`, `\`, `"},{"group":"x`, "a\nb\r\n", "\t\x00\x1f\x7f", `<script>&amp;</script>`,
		"\u2028\u2029", "\xff\xfe", "a\xc3", "\xed\xa0\x80", "日本語", strings.Repeat("\U0001F600", 1000),
	} {
		b, err := json.Marshal(Total{Group: g, Requests: 1, Cost: money.FromPico(5)})
		if err != nil {
			t.Errorf("group %q: %v", g, err)
			continue
		}
		if !json.Valid(b) || !utf8.Valid(b) {
			t.Errorf("group %q: invalid JSON %q", g, b)
			continue
		}
		if strings.ContainsAny(string(b), "<>&\u2028\u2029\n") {
			t.Errorf("group %q: written unescaped: %s", g, b)
		}
		var got struct {
			Group string `json:"group"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if want := strings.ToValidUTF8(g, "\uFFFD"); got.Group != want && utf8.ValidString(g) {
			t.Errorf("group %q read back as %q", g, got.Group)
		}
	}
}

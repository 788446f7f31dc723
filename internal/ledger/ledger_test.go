package ledger

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/tokens"
)

func TestValidate(t *testing.T) {
	at := time.Date(2025, 3, 1, 0, 0, 0, 0, time.UTC)
	ok := Record{RequestID: "req_1", StartedAt: at}
	with := func(f func(*Record)) Record {
		r := ok
		f(&r)
		return r
	}
	tests := []struct {
		name string
		err  error
		want string // "" means valid
	}{
		{"minimal record", ok.Validate(), ""},
		{"empty request id", with(func(r *Record) { r.RequestID = "" }).Validate(), "empty request id"},
		{"zero started at", with(func(r *Record) { r.StartedAt = time.Time{} }).Validate(), "request req_1: zero started_at"},
		{"negative tokens", with(func(r *Record) { r.Tokens[tokens.Reasoning] = -3 }).Validate(), "request req_1: reasoning_tokens -3 is negative"},
		{"negative cost", with(func(r *Record) { r.CostPico = -1 }).Validate(), "cost_pico -1 is negative"},
		{"negative ttft", with(func(r *Record) { r.TTFT = -1 }).Validate(), "ttft -1 is negative"},
		{"zero filter", Filter{}.Validate(), ""},
		{"since equals until", Filter{Since: at, Until: at}.Validate(), ""},
		{"until before since", Filter{Since: at, Until: at.Add(-1)}.Validate(), "until 2025-02-28T23:59:59.999999999Z is before since 2025-03-01T00:00:00Z"},
		{"negative limit", Filter{Limit: -1}.Validate(), "limit -1 is negative"},
		{"unknown group by", GroupBy("week").Validate(), `unknown group by "week"`},
		{"empty group by", GroupBy("").Validate(), `unknown group by ""`},
	}
	for _, by := range GroupBys() {
		tests = append(tests, struct {
			name string
			err  error
			want string
		}{"group by " + string(by), by.Validate(), ""})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == "" {
				if tt.err != nil {
					t.Fatalf("error %v; want none", tt.err)
				}
				return
			}
			if !errors.Is(tt.err, ErrInvalid) || !strings.Contains(tt.err.Error(), tt.want) {
				t.Errorf("error %v; want ErrInvalid containing %q", tt.err, tt.want)
			}
		})
	}
}

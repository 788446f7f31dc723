package llmapi

import (
	"math"
	"strings"
	"testing"
	"time"
)

// TestOpenAIDuration: OpenAI's notation at its extremes — zero, below a
// millisecond (rounded up, never "µs"), milliseconds, seconds with a
// fraction, minutes, hours, days (as hours) — and every value parses back
// with time.ParseDuration to at least the duration it stands for.
func TestOpenAIDuration(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{-time.Second, "0s"},
		{time.Nanosecond, "1ms"},
		{999 * time.Microsecond, "1ms"},
		{time.Millisecond, "1ms"},
		{time.Millisecond + time.Nanosecond, "2ms"},
		{20 * time.Millisecond, "20ms"},
		{999 * time.Millisecond, "999ms"},
		{time.Second, "1s"},
		{1500 * time.Millisecond, "1.5s"},
		{8640 * time.Millisecond, "8.64s"},
		{59*time.Second + 999*time.Millisecond + 1, "1m0s"},
		{6 * time.Minute, "6m0s"},
		{time.Hour + 2*time.Minute + 3*time.Second, "1h2m3s"},
		{24 * time.Hour, "24h0m0s"},
		{7*24*time.Hour + 30*time.Minute, "168h30m0s"},
		{math.MaxInt64, "2562047h47m16.854s"},
	} {
		got := OpenAIDuration(tt.d)
		if got != tt.want {
			t.Errorf("OpenAIDuration(%d) = %q, want %q", int64(tt.d), got, tt.want)
		}
		if strings.ContainsAny(got, "µun") {
			t.Errorf("OpenAIDuration(%d) = %q: a unit below milliseconds", int64(tt.d), got)
		}
		back, err := time.ParseDuration(got)
		if err != nil {
			t.Errorf("time.ParseDuration(%q): %v", got, err)
		} else if tt.d > 0 && back < tt.d && tt.d != math.MaxInt64 {
			t.Errorf("OpenAIDuration(%d) = %q parses to %v: earlier than the duration", int64(tt.d), got, back)
		}
	}
}

package llmapi

import "time"

// OpenAIDuration formats d as OpenAI's API writes a duration: in its
// x-ratelimit-reset-requests / -reset-tokens headers ("1s", "6m0s",
// "20ms") and its rate-limit messages ("Please try again in 20s."). That
// is Go's time.Duration notation — the one OpenAI's own Go clients parse
// with time.ParseDuration — at millisecond resolution: d is rounded up to
// a whole millisecond, so a reset is never reported early and no value
// needs a unit other than h, m, s and ms (never Go's "µs", which is not
// ASCII, nor "ns"). Hours do not roll over into days ("49h0m0s"), as Go
// writes them. A zero or negative d is "0s".
func OpenAIDuration(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	if r := d % time.Millisecond; r != 0 {
		if d > maxDuration-time.Millisecond {
			d -= r // rounding up would overflow: the largest whole millisecond
		} else {
			d += time.Millisecond - r
		}
	}
	return d.String()
}

const maxDuration = time.Duration(1<<63 - 1)

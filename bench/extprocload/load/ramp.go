package load

import (
	"context"
	"errors"
	"math"
	"time"
)

// RampRates are the ramp scenario's steps, requests a second: from 250,
// doubling.
var RampRates = []float64{250, 500, 1000, 2000, 4000, 8000}

// RampStep is the JSON line of one step of a ramp.
type RampStep struct {
	Scenario     string  `json:"scenario"`
	Server       string  `json:"server"`
	StepRate     float64 `json:"step_rate"`
	Offered      int     `json:"offered"`
	Served       int     `json:"served"`
	ServedPerSec float64 `json:"served_per_s"`
	Errors       int     `json:"errors"`
	Timeouts     int     `json:"timeouts"`
	NotStarted   int     `json:"not_started"`
	P50Millis    float64 `json:"p50_ms"`
	P99Millis    float64 `json:"p99_ms"`
	CPUMicrosReq float64 `json:"cpu_us_per_req"`
	ServerBusy   float64 `json:"server_cpu_pct"`
	DriverBusy   float64 `json:"driver_cpu_pct"`
	RSSKiB       int64   `json:"rss_kib"`
	Holds        bool    `json:"holds"`
	FirstError   string  `json:"first_error,omitempty"`
}

// RampSummary is the last JSON line of a ramp: the highest step rate
// that held (0: none did).
type RampSummary struct {
	Scenario    string  `json:"scenario"`
	Server      string  `json:"server"`
	MaxHeldRate float64 `json:"max_held_rate"`
}

// holds reports whether a step at rate req/s held: it served at least
// 95% of the rate (servedPerSec, see servedRate) and errors (failed, timed
// out or not started) are under 1% of the offered requests.
func holds(rate, servedPerSec float64, offered, errors int) bool {
	return offered > 0 && servedPerSec*100 >= rate*95 && errors*100 < offered
}

// servedRate is the requests served a second over a step: served over
// the step's length, or over the time to its last request's end when
// that is longer. A server that keeps up (each request done within one
// period of the schedule) serves exactly the rate; one that falls behind
// stretches the time, and the rate drops.
func servedRate(served int, step, elapsed time.Duration) float64 {
	return float64(served) / max(step, elapsed).Seconds()
}

// RunRamp runs cfg.Ramp's steps in order, each an open loop at its rate
// scheduling rate × cfg.Step requests (every started request runs to its
// end before the next step), emits each step's line, stops after the
// first step that does not hold, and emits the summary.
func RunRamp(ctx context.Context, cfg Config, emit func(any) error) error {
	if len(cfg.Ramp) == 0 {
		return errors.New("ramp: no steps")
	}
	d, err := dial(ctx, cfg)
	if err != nil {
		return err
	}
	defer d.close()
	sum := RampSummary{Scenario: cfg.Scenario, Server: cfg.Server}
	for _, rate := range cfg.Ramp {
		n := max(1, int(math.Round(rate*cfg.Step.Seconds())))
		st, err := d.phase(ctx, load{rate: rate, requests: n})
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		step := RampStep{
			Scenario: cfg.Scenario, Server: cfg.Server, StepRate: rate, Offered: n,
			Served: st.served(), Errors: st.errs, Timeouts: st.timeouts, NotStarted: st.notStarted,
			P50Millis: ms(quantile(st.lat, 0.50)), P99Millis: ms(quantile(st.lat, 0.99)),
			CPUMicrosReq: st.cpuPerReq(), ServerBusy: st.busy(st.cpu), DriverBusy: st.busy(st.driverCPU), RSSKiB: st.rss, FirstError: st.firstErr,
			ServedPerSec: servedRate(st.served(), cfg.Step, st.elapsed),
		}
		step.Holds = holds(rate, step.ServedPerSec, n, st.errs)
		if err := emit(step); err != nil {
			return err
		}
		if !step.Holds {
			break
		}
		sum.MaxHeldRate = rate
	}
	return emit(sum)
}

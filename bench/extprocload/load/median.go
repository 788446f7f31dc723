package load

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
)

// A runLine is one JSON line of a results file, kept as its bytes beside
// the fields the median and the table read.
type runLine struct {
	raw  []byte
	kind lineKind
	res  Result
	// maxHeld is a ramp summary's max_held_rate.
	maxHeld float64
}

type lineKind int

const (
	kindRun     lineKind = iota // a scenario's Result
	kindStep                    // a ramp's step
	kindSummary                 // a ramp's summary
)

// readRun reads one results file's JSON lines, skipping blank lines and
// lines that are not JSON objects (a log line).
func readRun(r io.Reader, name string) ([]runLine, error) {
	var out []runLine
	err := eachJSONLine(r, func(n int, b []byte) error {
		var probe struct {
			Result
			StepRate    *float64 `json:"step_rate"`
			MaxHeldRate *float64 `json:"max_held_rate"`
		}
		if err := json.Unmarshal(b, &probe); err != nil {
			return fmt.Errorf("%s:%d: %w", name, n, err)
		}
		if probe.Scenario == "" || probe.Server == "" {
			return fmt.Errorf("%s:%d: a line without scenario and server", name, n)
		}
		l := runLine{raw: slices.Clone(b), res: probe.Result}
		switch {
		case probe.MaxHeldRate != nil:
			l.kind, l.maxHeld = kindSummary, *probe.MaxHeldRate
		case probe.StepRate != nil:
			l.kind = kindStep
		}
		out = append(out, l)
		return nil
	})
	return out, err
}

// A Medians is, of several runs of the same scenarios, the median run of
// each scenario and server.
type Medians struct {
	// Lines are the median runs' JSON lines, in the order the first run
	// printed its scenarios, each as its run printed it; for a ramp, every
	// step and the summary of the run whose highest held rate is the
	// median.
	Lines [][]byte
	// Rows are the median runs of the scenarios other than ramps, in the
	// same order, and Each the CPU µs a request of every run, in the
	// order of the files.
	Rows []Result
	Each map[[2]string][]float64
	// Held is each server's highest held ramp rate in every run.
	Held map[string][]float64
	keys [][2]string
}

// Median picks, from runs (each the lines of one `make bench-service`),
// the median run of every scenario and server: the one whose CPU µs a
// request is the median (of an even number, the lower of the middle
// two). A scenario and server some run lacks, or holds twice, is an
// error: the runs are then not of the same set.
func Median(runs [][]runLine) (*Medians, error) {
	if len(runs) == 0 {
		return nil, errors.New("median: no runs")
	}
	m := &Medians{Each: map[[2]string][]float64{}, Held: map[string][]float64{}}
	type pick struct {
		cpu  float64
		line runLine
		ramp []runLine // a ramp's steps and summary
	}
	picks := map[[2]string][]pick{}
	for i, run := range runs {
		seen := map[[2]string]bool{}
		steps := map[string][]runLine{}
		for _, l := range run {
			k := [2]string{l.res.Scenario, l.res.Server}
			if l.kind == kindStep {
				steps[l.res.Server] = append(steps[l.res.Server], l)
				continue
			}
			if seen[k] {
				return nil, fmt.Errorf("median: run %d holds %s on %s twice", i+1, k[0], k[1])
			}
			seen[k] = true
			if i == 0 {
				m.keys = append(m.keys, k)
			} else if len(picks[k]) != i {
				return nil, fmt.Errorf("median: run %d has %s on %s, run 1 does not", i+1, k[0], k[1])
			}
			p := pick{cpu: l.res.CPUMicrosReq, line: l}
			if l.kind == kindSummary {
				p.cpu = l.maxHeld
				p.ramp = append(steps[l.res.Server], l)
				steps[l.res.Server] = nil
			}
			picks[k] = append(picks[k], p)
		}
		for _, k := range m.keys {
			if !seen[k] {
				return nil, fmt.Errorf("median: run %d lacks %s on %s", i+1, k[0], k[1])
			}
		}
	}
	for _, k := range m.keys {
		ps := picks[k]
		vals := make([]float64, len(ps))
		for i, p := range ps {
			vals[i] = p.cpu
		}
		sorted := slices.Clone(ps)
		slices.SortStableFunc(sorted, func(a, b pick) int {
			switch {
			case a.cpu < b.cpu:
				return -1
			case a.cpu > b.cpu:
				return 1
			}
			return 0
		})
		med := sorted[(len(sorted)-1)/2]
		if med.ramp != nil {
			m.Held[k[1]] = vals
			for _, l := range med.ramp {
				m.Lines = append(m.Lines, l.raw)
			}
			continue
		}
		m.Each[k] = vals
		m.Rows = append(m.Rows, med.line.res)
		m.Lines = append(m.Lines, med.line.raw)
	}
	return m, nil
}

// WriteMarkdown writes the medians as bench/README.md's table, then each
// run's CPU µs a request and the ramps' highest held rates.
func (m *Medians) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("| scenario | server | CPU µs/req | req/s | p50 ms | p99 ms | ttfc p50 ms | errors (of requests) | core % server / driver | RSS MiB (max) | RssAnon MiB (max) |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range m.Rows {
		ttfc := "–"
		if r.TTFCP50Millis > 0 {
			ttfc = fmt.Sprintf("%.2f", r.TTFCP50Millis)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.2f | %.2f | %s | %s (%s) | %.0f / %.0f | %.0f | %.0f |\n",
			r.Scenario, r.Server, thousands(r.CPUMicrosReq), thousands(r.ReqPerSec), r.P50Millis, r.P99Millis, ttfc,
			thousands(float64(r.Errors)), thousands(float64(r.Requests)), r.ServerBusy, r.DriverBusy, float64(r.RSSMaxKiB)/1024, float64(r.RSSAnonMaxKiB)/1024)
	}
	b.WriteString("\nEach run's CPU µs a request:\n\n")
	for _, r := range m.Rows {
		k := [2]string{r.Scenario, r.Server}
		vals := make([]string, len(m.Each[k]))
		for i, v := range m.Each[k] {
			vals[i] = thousands(v)
		}
		fmt.Fprintf(&b, "- %s, %s: %s\n", r.Scenario, r.Server, strings.Join(vals, ", "))
	}
	for _, s := range slices.Sorted(maps.Keys(m.Held)) {
		vals := make([]string, len(m.Held[s]))
		for i, v := range m.Held[s] {
			vals[i] = thousands(v)
		}
		fmt.Fprintf(&b, "- ramp, %s: highest step held %s req/s\n", s, strings.Join(vals, ", "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// thousands rounds v to a whole number written with commas between
// thousands, as the README's tables are.
func thousands(v float64) string {
	neg := v < 0
	if neg {
		v = -v
	}
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func runMedian(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("median", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "write the median runs' JSON lines to this `file` (for chart)")
	md := fs.Bool("markdown", false, "print the medians as a Markdown table rather than JSON lines")
	if err := fs.Parse(args); err != nil || fs.NArg() == 0 {
		if err == nil {
			fmt.Fprintln(stderr, "median: name the results files of the runs (RESULTS of each make bench-service)")
		}
		return ErrUsage
	}
	var runs [][]runLine
	for _, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			return fmt.Errorf("median: %w", err)
		}
		run, err := readRun(f, name)
		f.Close()
		if err != nil {
			return fmt.Errorf("median: %w", err)
		}
		runs = append(runs, run)
	}
	m, err := Median(runs)
	if err != nil {
		return err
	}
	var lines bytes.Buffer
	for _, l := range m.Lines {
		lines.Write(l)
		lines.WriteByte('\n')
	}
	if *out != "" {
		if err := os.WriteFile(*out, lines.Bytes(), 0o644); err != nil {
			return fmt.Errorf("median: %w", err)
		}
	}
	if *md {
		return m.WriteMarkdown(stdout)
	}
	_, err = stdout.Write(lines.Bytes())
	return err
}

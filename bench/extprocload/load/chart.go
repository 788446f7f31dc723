package load

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart sizes, in pixels at chartDPI.
const (
	chartDPI    = 96
	ChartWidth  = 960
	ChartHeight = 540
	// RampHeight is the ramp chart's: two panels, one above the other.
	RampHeight = 800
)

// Chart file names, in the output directory.
const (
	CPUChartFile  = "cpu-per-request.png"
	RampChartFile = "ramp.png"
)

// line is any JSON line run prints; which fields are set says which kind.
type line struct {
	Scenario     string   `json:"scenario"`
	Server       string   `json:"server"`
	CPUMicrosReq *float64 `json:"cpu_us_per_req"`
	StepRate     *float64 `json:"step_rate"`
	ServedPerSec float64  `json:"served_per_s"`
	P99Millis    float64  `json:"p99_ms"`
}

// readLines reads run's JSON lines (blank lines and lines that are not
// JSON objects, e.g. a log line, are skipped).
func readLines(r io.Reader) ([]line, error) {
	var out []line
	err := eachJSONLine(r, func(_ int, b []byte) error {
		var l line
		if err := json.Unmarshal(b, &l); err != nil {
			return fmt.Errorf("results: %w", err)
		}
		if l.Scenario != "" && l.Server != "" {
			out = append(out, l)
		}
		return nil
	})
	return out, err
}

// eachJSONLine calls f with each line of r that holds a JSON object (its
// number from 1, and its bytes, valid until f returns), skipping blank
// lines and others (a log line), until f returns an error.
func eachJSONLine(r io.Reader, f func(n int, b []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] != '{' {
			continue
		}
		if err := f(n, b); err != nil {
			return err
		}
	}
	return sc.Err()
}

// Charts draws, from run's JSON lines in r, into dir: CPUChartFile, CPU
// µs per request of every scenario (the last line of each scenario and
// server; not the ramp's steps), each server's bar beside the other's;
// and, when r holds a ramp, RampChartFile: served/s and p99 against the
// offered rate, one line per server. It returns the files written.
func Charts(r io.Reader, dir string) ([]string, error) {
	lines, err := readLines(r)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	cpu, err := cpuChart(lines)
	if err != nil {
		return nil, err
	}
	if cpu != nil {
		f := filepath.Join(dir, CPUChartFile)
		if err := savePNG(f, ChartHeight, [][]*plot.Plot{{cpu}}); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	served, p99, err := rampCharts(lines)
	if err != nil {
		return nil, err
	}
	if served != nil {
		f := filepath.Join(dir, RampChartFile)
		if err := savePNG(f, RampHeight, [][]*plot.Plot{{served}, {p99}}); err != nil {
			return nil, err
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		return nil, errors.New("results: no scenario lines to chart")
	}
	return files, nil
}

// servers orders server names: sluice, floor, then the rest sorted.
func servers(names map[string]bool) []string {
	var out []string
	for _, n := range []string{"sluice", "floor"} {
		if names[n] {
			out = append(out, n)
		}
	}
	var rest []string
	for n := range names {
		if n != "sluice" && n != "floor" {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}, // sluice: blue
	color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff}, // floor: grey
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
}

func cpuChart(lines []line) (*plot.Plot, error) {
	var scenarios []string
	cpu := map[[2]string]float64{}
	names := map[string]bool{}
	for _, l := range lines {
		if l.StepRate != nil || l.CPUMicrosReq == nil {
			continue
		}
		if !slices.Contains(scenarios, l.Scenario) {
			scenarios = append(scenarios, l.Scenario)
		}
		names[l.Server] = true
		cpu[[2]string{l.Scenario, l.Server}] = *l.CPUMicrosReq
	}
	if len(scenarios) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Server CPU per request"
	p.Y.Label.Text = "CPU µs / request"
	p.Y.Min = 0
	p.Legend.Top = true
	srv := servers(names)
	width := vg.Points(float64(ChartWidth) * 0.6 / float64(len(scenarios)*len(srv)+len(scenarios)))
	for i, s := range srv {
		vals := make(plotter.Values, len(scenarios))
		for j, sc := range scenarios {
			vals[j] = cpu[[2]string{sc, s}]
		}
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, err
		}
		b.Color = palette[i%len(palette)]
		b.LineStyle.Width = 0
		b.Offset = width * vg.Length(float64(i)-float64(len(srv)-1)/2)
		p.Add(b)
		p.Legend.Add(s, b)
	}
	p.NominalX(scenarios...)
	// Room above the tallest bar for the legend, which sits at the top.
	top := 0.0
	for _, v := range cpu {
		top = max(top, v)
	}
	p.Y.Max = top * 1.15
	return p, nil
}

func rampCharts(lines []line) (served, p99 *plot.Plot, err error) {
	pts := map[string][2]plotter.XYs{}
	names := map[string]bool{}
	for _, l := range lines {
		if l.StepRate == nil {
			continue
		}
		names[l.Server] = true
		v := pts[l.Server]
		v[0] = append(v[0], plotter.XY{X: *l.StepRate, Y: l.ServedPerSec})
		v[1] = append(v[1], plotter.XY{X: *l.StepRate, Y: l.P99Millis})
		pts[l.Server] = v
	}
	if len(names) == 0 {
		return nil, nil, nil
	}
	served, p99 = plot.New(), plot.New()
	served.Title.Text = "Ramp: served vs offered"
	served.Y.Label.Text = "served req/s"
	p99.Title.Text = "Ramp: p99 latency vs offered"
	p99.Y.Label.Text = "p99 ms"
	maxRate := 0.0
	for i, s := range servers(names) {
		for k, p := range []*plot.Plot{served, p99} {
			l, sc, err := plotter.NewLinePoints(pts[s][k])
			if err != nil {
				return nil, nil, err
			}
			l.Color, sc.Color = palette[i%len(palette)], palette[i%len(palette)]
			p.Add(l, sc)
			p.Legend.Add(s, l, sc)
		}
		for _, xy := range pts[s][0] {
			maxRate = max(maxRate, xy.X)
		}
	}
	// The offered rate itself: a server that keeps up is on it.
	ideal, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: maxRate, Y: maxRate}})
	if err != nil {
		return nil, nil, err
	}
	ideal.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	ideal.Color = color.Gray{Y: 0x60}
	served.Add(ideal)
	served.Legend.Add("offered", ideal)
	for _, p := range []*plot.Plot{served, p99} {
		p.X.Label.Text = "offered req/s"
		p.X.Min, p.Y.Min = 0, 0
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
	}
	return served, p99, nil
}

// savePNG draws plots (rows of columns) on one ChartWidth × height image.
func savePNG(path string, height int, plots [][]*plot.Plot) error {
	c := vgimg.NewWith(vgimg.UseWH(vg.Length(ChartWidth)*vg.Inch/chartDPI, vg.Length(height)*vg.Inch/chartDPI), vgimg.UseDPI(chartDPI))
	dc := draw.New(c)
	if len(plots) == 1 && len(plots[0]) == 1 {
		plots[0][0].Draw(dc)
	} else {
		t := draw.Tiles{Rows: len(plots), Cols: len(plots[0]), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
			PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
		cs := plot.Align(plots, t, dc)
		for i, row := range plots {
			for j, p := range row {
				p.Draw(cs[i][j])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func runChart(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("chart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "run's JSON lines (`file`; - for standard input)")
	out := fs.String("out", "", "directory the PNG files go to")
	if err := fs.Parse(args); err != nil {
		return ErrUsage
	}
	var errs []error
	if *in == "" {
		errs = append(errs, errors.New("in: required"))
	}
	if *out == "" {
		errs = append(errs, errors.New("out: required"))
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(stderr, err)
		return ErrUsage
	}
	r := io.Reader(os.Stdin)
	if *in != "-" {
		f, err := os.Open(*in)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	files, err := Charts(r, *out)
	if err != nil {
		return err
	}
	for _, f := range files {
		fmt.Fprintln(stderr, "wrote", f)
	}
	return nil
}

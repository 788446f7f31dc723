package load

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// medianRuns are three runs of three scenarios, one a ramp; the median
// CPU of closed-max and closed-streams on sluice is run 3's, of
// closed-max on floor run 1's, and the median highest held ramp rate
// (0, 250, 500) run 1's.
var medianRuns = []string{
	`{"scenario":"closed-max","server":"sluice","requests":100,"errors":1,"cpu_us_per_req":150,"req_per_s":5000,"p50_ms":1.5,"p99_ms":9,"rss_max_kib":102400,"server_cpu_pct":70,"driver_cpu_pct":60}
{"scenario":"closed-streams","server":"sluice","requests":50,"cpu_us_per_req":300,"ttfc_p50_ms":2.5}
{"scenario":"ramp","server":"sluice","step_rate":250,"cpu_us_per_req":900,"holds":true}
{"scenario":"ramp","server":"sluice","max_held_rate":250}
sluice: a log line
{"scenario":"closed-max","server":"floor","cpu_us_per_req":110}`,
	`{"scenario":"closed-max","server":"sluice","cpu_us_per_req":120}
{"scenario":"closed-streams","server":"sluice","cpu_us_per_req":200}
{"scenario":"ramp","server":"sluice","step_rate":250,"cpu_us_per_req":800,"holds":true}
{"scenario":"ramp","server":"sluice","step_rate":500,"cpu_us_per_req":700,"holds":true}
{"scenario":"ramp","server":"sluice","step_rate":1000,"cpu_us_per_req":600,"holds":false}
{"scenario":"ramp","server":"sluice","max_held_rate":500}
{"scenario":"closed-max","server":"floor","cpu_us_per_req":90}`,
	`{"scenario":"closed-max","server":"sluice","cpu_us_per_req":130,"req_per_s":6500}
{"scenario":"closed-streams","server":"sluice","cpu_us_per_req":250}
{"scenario":"ramp","server":"sluice","step_rate":250,"holds":false}
{"scenario":"ramp","server":"sluice","max_held_rate":0}
{"scenario":"closed-max","server":"floor","cpu_us_per_req":140}`,
}

func writeRuns(t *testing.T, runs []string) []string {
	t.Helper()
	dir := t.TempDir()
	var names []string
	for i, r := range runs {
		n := filepath.Join(dir, "run"+string(rune('1'+i))+".jsonl")
		if err := os.WriteFile(n, []byte(r), 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	return names
}

func TestMedian(t *testing.T) {
	names := writeRuns(t, medianRuns)
	out := filepath.Join(t.TempDir(), "median.jsonl")
	var stdout, stderr bytes.Buffer
	if err := Main(t.Context(), append([]string{"median", "--out", out}, names...), &stdout, &stderr); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	want := strings.Join([]string{
		`{"scenario":"closed-max","server":"sluice","cpu_us_per_req":130,"req_per_s":6500}`,
		`{"scenario":"closed-streams","server":"sluice","cpu_us_per_req":250}`,
		`{"scenario":"ramp","server":"sluice","step_rate":250,"cpu_us_per_req":900,"holds":true}`,
		`{"scenario":"ramp","server":"sluice","max_held_rate":250}`,
		`{"scenario":"closed-max","server":"floor","cpu_us_per_req":110}`,
	}, "\n") + "\n"
	if got := stdout.String(); got != want {
		t.Errorf("median lines:\n%s\nwant:\n%s", got, want)
	}
	if b, err := os.ReadFile(out); err != nil || string(b) != want {
		t.Errorf("--out: %q, %v", b, err)
	}
	// The median lines chart as any results file does.
	if files, err := Charts(strings.NewReader(want), t.TempDir()); err != nil || len(files) != 2 {
		t.Errorf("charts of the medians: %v, %v", files, err)
	}

	stdout.Reset()
	if err := Main(t.Context(), append([]string{"median", "--markdown"}, names[:1]...), &stdout, &stderr); err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	md := stdout.String()
	for _, s := range []string{
		"| closed-max | sluice | 150 | 5,000 | 1.50 | 9.00 | – | 1 (100) | 70 / 60 | 100 |",
		"| closed-streams | sluice | 300 | 0 | 0.00 | 0.00 | 2.50 | 0 (50) |",
		"- closed-max, floor: 110\n",
		"- ramp, sluice: highest step held 250 req/s\n",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
	stdout.Reset()
	if err := Main(t.Context(), append([]string{"median", "--markdown"}, names...), &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	if s := "- closed-max, sluice: 150, 120, 130\n"; !strings.Contains(stdout.String(), s) {
		t.Errorf("markdown lacks %q:\n%s", s, stdout.String())
	}
}

// TestMedianRefusesRunsOfOtherSets: runs that do not hold the same
// scenarios and servers are not compared.
func TestMedianRefusesRunsOfOtherSets(t *testing.T) {
	for name, runs := range map[string][]string{
		"a scenario missing": {medianRuns[0], `{"scenario":"closed-max","server":"sluice","cpu_us_per_req":1}`},
		"a scenario added":   {`{"scenario":"closed-max","server":"sluice","cpu_us_per_req":1}`, medianRuns[0]},
		"a scenario twice": {`{"scenario":"closed-max","server":"sluice","cpu_us_per_req":1}
{"scenario":"closed-max","server":"sluice","cpu_us_per_req":2}`},
		"not JSON":     {`{"scenario":`},
		"no scenario":  {`{"server":"sluice"}`},
		"a huge value": {`{"scenario":"closed-max","server":"sluice","requests":1e400}`},
	} {
		var stderr bytes.Buffer
		if err := Main(t.Context(), append([]string{"median"}, writeRuns(t, runs)...), &bytes.Buffer{}, &stderr); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := Main(t.Context(), []string{"median"}, &bytes.Buffer{}, &bytes.Buffer{}); err != ErrUsage {
		t.Errorf("no files: %v, want ErrUsage", err)
	}
	if err := Main(t.Context(), []string{"median", "/nonexistent/run.jsonl"}, &bytes.Buffer{}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("a missing file: %v", err)
	}
}

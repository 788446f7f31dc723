package tokens

import (
	"reflect"
	"regexp"
	"strconv"
	"testing"
)

// TestNames checks that every kind has each of its names, well formed
// and unique among the kinds: a kind added without its names fails here,
// and everything that lists the kinds (the ledger's columns and spool,
// the JSON totals, the pricing keys) is generated from this table.
func TestNames(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	goName := regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	seen := map[string]map[string]Kind{}
	for _, k := range All() {
		n := reflect.ValueOf(k.Names())
		for i := range n.NumField() {
			field, v := n.Type().Field(i).Name, n.Field(i).String()
			if v == "" {
				if field == "Metric" {
					continue // a kind may stay out of the metric
				}
				t.Errorf("kind %d: no %s name", k, field)
				continue
			}
			re := snake
			if field == "Field" {
				re = goName
			}
			if !re.MatchString(v) {
				t.Errorf("kind %d: %s name %q is not %s", k, field, v, re)
			}
			if seen[field] == nil {
				seen[field] = map[string]Kind{}
			}
			if o, dup := seen[field][v]; dup {
				t.Errorf("kinds %d and %d share the %s name %q", o, k, field, v)
			}
			seen[field][v] = k
		}
	}
}

// TestNamesFrozen pins the names of the kinds that exist: each is an API
// (config keys, JSON fields, ledger columns, metric labels).
func TestNamesFrozen(t *testing.T) {
	want := map[Kind]Names{
		Input:        {"input_tokens", "input_tokens", "InputTokens", "input", "input"},
		CachedInput:  {"cached_input_tokens", "cached_input_tokens", "CachedInputTokens", "cached_input", "cached_input"},
		CacheWrite:   {"cache_creation_tokens", "cache_creation_tokens", "CacheCreationTokens", "cache_write", ""},
		Output:       {"output_tokens", "output_tokens", "OutputTokens", "output", "output"},
		Reasoning:    {"reasoning_tokens", "reasoning_tokens", "ReasoningTokens", "reasoning", "reasoning"},
		CacheWrite1h: {"cache_creation_1h_tokens", "cache_creation_1h_tokens", "CacheCreation1hTokens", "cache_write_1h", ""},
		AudioInput:   {"audio_input_tokens", "audio_input_tokens", "AudioInputTokens", "audio_input", ""},
		AudioOutput:  {"audio_output_tokens", "audio_output_tokens", "AudioOutputTokens", "audio_output", ""},
	}
	for k, n := range want {
		if got := k.Names(); got != n {
			t.Errorf("kind %s: names %+v, want %+v", k, got, n)
		}
	}
}

func TestAll(t *testing.T) {
	ks := All()
	for i, k := range ks {
		if int(k) != i {
			t.Fatalf("All()[%d] = %d", i, k)
		}
	}
	if got := Kind(NumKinds).String(); got != "Kind("+strconv.Itoa(NumKinds)+")" {
		t.Errorf("String of a non-kind = %q", got)
	}
	if got := CacheWrite1h.String(); got != "cache_write_1h" {
		t.Errorf("CacheWrite1h.String() = %q", got)
	}
}

func TestCounts(t *testing.T) {
	c := Counts{Input: 10, CachedInput: 4, Output: 3}
	c.Add(Counts{Input: 1, Output: 2, AudioOutput: 1})
	if want := (Counts{Input: 11, CachedInput: 4, Output: 5, AudioOutput: 1}); c != want {
		t.Errorf("Add: %v, want %v", c, want)
	}
	if got := c.Total(); got != 16 {
		t.Errorf("Total = %d, want 16", got)
	}
}

func TestJSONObject(t *testing.T) {
	head := struct {
		Group string `json:"group"`
	}{"a<b"}
	tail := struct {
		Cost int64 `json:"cost"`
	}{7}
	c := Counts{Input: 1, Output: 2, AudioOutput: 3}
	got, err := JSONObject(head, c, func(n Names) string { return n.JSON }, tail)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"group":"a\u003cb","input_tokens":1,"cached_input_tokens":0,"cache_creation_tokens":0,"output_tokens":2,` +
		`"reasoning_tokens":0,"cache_creation_1h_tokens":0,"audio_input_tokens":0,"audio_output_tokens":3,"cost":7}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got, err := JSONObject(nil, Counts{}, func(n Names) string { return n.Field }, nil); err != nil || string(got)[:15] != `{"InputTokens":` {
		t.Errorf("no head or tail: %s, %v", got, err)
	}
	if _, err := JSONObject(3, c, func(n Names) string { return n.JSON }, nil); err == nil {
		t.Error("a head that is not an object was accepted")
	}
}

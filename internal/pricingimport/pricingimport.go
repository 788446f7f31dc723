package pricingimport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DefaultMaxBytes bounds the file Read accepts when Options.MaxBytes is 0:
// LiteLLM's own is about 1.5 MB.
const DefaultMaxBytes = 64 << 20

// The largest prices believed: $1 per token ($1,000,000 per 1M tokens)
// and $1000 per request. Anything above is a mistake in the file.
const (
	maxPerToken   = 1_000_000_000_000 // pico-dollars per token
	maxPerRequest = 1_000_000_000     // micro-dollars
)

// Price is one model's prices in Sluice's units: micro-dollars per 1M
// tokens (pico-dollars per token), PerRequest in micro-dollars. A nil
// field is one the file does not give.
type Price struct {
	Input, CachedInput, CacheWrite, CacheWrite1h, Output *int64
	Reasoning, AudioInput, AudioOutput                   *int64
	PerRequest                                           *int64
	LongContext                                          *LongContext
}

// LongContext is the prices of a request whose input is above
// AboveInputTokens.
type LongContext struct {
	AboveInputTokens                                     int64
	Input, CachedInput, CacheWrite, CacheWrite1h, Output *int64
}

// Model is one imported price: Name is the name it is written under (the
// configured model's, or the file's), Source the file's entry.
type Model struct {
	Name, Source string
	Price        Price
}

// Skip is an entry that was not imported and why: Name is the entry's
// (the configured model's when one was wanted, Source then naming the
// entry). Reason is short and shared by entries skipped alike; Detail
// says what was wrong, if anything more.
type Skip struct {
	Name, Source, Reason, Detail string
}

// Wanted is a model to import: the name it is written under and the
// entry names to try, in order.
type Wanted struct {
	Name   string
	Lookup []string
}

// Options select what Read imports.
type Options struct {
	// Models, if not nil, are the only models imported (what a
	// sluice.yaml declares); nil imports every chat, completion, responses
	// and embedding entry.
	Models []Wanted
	// MaxBytes bounds the file; 0 means DefaultMaxBytes.
	MaxBytes int64
}

// Result is what Read imported and what it did not.
type Result struct {
	// Models are in the order of Options.Models, else sorted by name.
	Models []Model
	// Skipped are the entries (wanted models) not imported, sorted by
	// name.
	Skipped []Skip
	// NotFound are the wanted models that no entry matched.
	NotFound []string
	// Warnings are things imported that deserve a look.
	Warnings []string
	// Entries is the number of entries the file holds.
	Entries int
}

// ErrTooLarge is returned for a file above Options.MaxBytes.
var ErrTooLarge = errors.New("file too large")

// Read reads a price file in LiteLLM's format. Only a file that is not a
// JSON object of entries (or too large) is an error; every entry it cannot
// import is reported in the Result.
func Read(r io.Reader, opts Options) (*Result, error) {
	limit := opts.MaxBytes
	if limit <= 0 {
		limit = DefaultMaxBytes
	}
	lr := &limitReader{r: io.LimitReader(r, limit+1), limit: limit}
	dec := json.NewDecoder(lr)
	fail := func(err error) (*Result, error) {
		if lr.over {
			return nil, fmt.Errorf("%w: more than %d bytes", ErrTooLarge, limit)
		}
		return nil, err
	}
	if tok, err := dec.Token(); err != nil {
		return fail(fmt.Errorf("not JSON: %w", err))
	} else if tok != json.Delim('{') {
		return fail(errors.New("not a LiteLLM price file: the top-level value is not an object"))
	}
	var want map[string]bool
	if opts.Models != nil {
		want = map[string]bool{}
		for _, w := range opts.Models {
			for _, n := range w.Lookup {
				want[n] = true
			}
		}
	}
	type outcome struct {
		price *Price
		skip  *Skip
		warn  []string
	}
	seen := map[string]outcome{}
	var warnings []string
	entries := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return fail(fmt.Errorf("entry %d: %w", entries+1, err))
		}
		name, _ := tok.(string) // object keys are strings
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fail(fmt.Errorf("entry %q: %w", name, err))
		}
		entries++
		if want != nil && !want[name] {
			continue
		}
		if _, dup := seen[name]; dup {
			warnings = append(warnings, fmt.Sprintf("%s: the file holds it more than once; the last one is used", name))
		}
		p, skip, warn := convert(name, raw, want == nil)
		seen[name] = outcome{price: p, skip: skip, warn: warn}
	}
	if _, err := dec.Token(); err != nil {
		return fail(fmt.Errorf("after entry %d: %w", entries, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the top-level object")
		}
		return fail(err)
	}
	res := &Result{Entries: entries}
	if opts.Models == nil {
		names := make([]string, 0, len(seen))
		for n := range seen {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			switch o := seen[n]; {
			case o.price != nil:
				res.Models = append(res.Models, Model{Name: n, Source: n, Price: *o.price})
				res.Warnings = append(res.Warnings, o.warn...)
			case o.skip != nil:
				res.Skipped = append(res.Skipped, *o.skip)
			}
		}
	} else {
		// Each wanted model takes the first entry found among its names,
		// imported or skipped.
		for _, w := range opts.Models {
			i := slices.IndexFunc(w.Lookup, func(n string) bool { _, ok := seen[n]; return ok })
			if i < 0 {
				res.NotFound = append(res.NotFound, w.Name)
				continue
			}
			n := w.Lookup[i]
			switch o := seen[n]; {
			case o.price != nil:
				res.Models = append(res.Models, Model{Name: w.Name, Source: n, Price: *o.price})
				res.Warnings = append(res.Warnings, o.warn...)
			case o.skip != nil:
				sk := *o.skip
				sk.Name = w.Name
				sk.Source = n
				res.Skipped = append(res.Skipped, sk)
			}
		}
		slices.SortFunc(res.Skipped, func(a, b Skip) int { return strings.Compare(a.Name, b.Name) })
	}
	res.Warnings = append(warnings, res.Warnings...)
	return res, nil
}

// limitReader counts what it reads from r (an io.LimitReader of limit+1
// bytes) and fails once that is more than limit.
type limitReader struct {
	r        io.Reader
	n, limit int64
	over     bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.n += int64(n)
	if l.n > l.limit {
		l.over = true
		return n, ErrTooLarge
	}
	return n, err
}

// modes Read imports without a selection.
var modes = map[string]bool{"chat": true, "completion": true, "responses": true, "embedding": true}

// tokenField is a LiteLLM per-token key and the Price field it fills.
type tokenField struct {
	key  string
	base func(*Price) **int64
	long func(*LongContext) **int64 // nil: no long-context price
}

var tokenFields = []tokenField{
	{"input_cost_per_token", func(p *Price) **int64 { return &p.Input }, func(l *LongContext) **int64 { return &l.Input }},
	{"cache_read_input_token_cost", func(p *Price) **int64 { return &p.CachedInput }, func(l *LongContext) **int64 { return &l.CachedInput }},
	{"cache_creation_input_token_cost", func(p *Price) **int64 { return &p.CacheWrite }, func(l *LongContext) **int64 { return &l.CacheWrite }},
	{"cache_creation_input_token_cost_above_1hr", func(p *Price) **int64 { return &p.CacheWrite1h }, func(l *LongContext) **int64 { return &l.CacheWrite1h }},
	{"output_cost_per_token", func(p *Price) **int64 { return &p.Output }, func(l *LongContext) **int64 { return &l.Output }},
	{"output_cost_per_reasoning_token", func(p *Price) **int64 { return &p.Reasoning }, nil},
	{"input_cost_per_audio_token", func(p *Price) **int64 { return &p.AudioInput }, nil},
	{"output_cost_per_audio_token", func(p *Price) **int64 { return &p.AudioOutput }, nil},
}

// requestKeys are the per-request fees, added up into PerRequest.
var requestKeys = []string{"input_cost_per_request", "output_cost_per_request"}

// convert reads one entry. all says no selection was made: the entry's
// mode must then be one Sluice meters.
func convert(name string, raw json.RawMessage, all bool) (*Price, *Skip, []string) {
	skip := func(reason, detail string) (*Price, *Skip, []string) {
		return nil, &Skip{Name: name, Reason: reason, Detail: detail}, nil
	}
	if name == "sample_spec" {
		return skip("the format's sample_spec", "")
	}
	var fields map[string]json.RawMessage
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' || json.Unmarshal(t, &fields) != nil {
		return skip("not an object", "")
	}
	var mode string
	if m, ok := fields["mode"]; ok {
		_ = json.Unmarshal(m, &mode) // a mode that is not a string is no mode
	}
	if all && !modes[mode] {
		if mode == "" {
			return skip("no mode", "")
		}
		return skip("mode "+mode, "")
	}
	var p Price
	var bad []string
	value := func(key string, shift int, limit int64, unit string) (int64, bool) {
		v, ok := fields[key]
		if !ok || string(bytes.TrimSpace(v)) == "null" {
			return 0, false
		}
		n, err := scale(bytes.TrimSpace(v), shift, limit)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s is %s: %s", key, clip(v), why(err, unit)))
			return 0, false
		}
		return n, true
	}
	for _, f := range tokenFields {
		if n, ok := value(f.key, 12, maxPerToken, "token"); ok {
			*f.base(&p) = &n
		}
	}
	var perRequest int64
	hasRequest := false
	for _, k := range requestKeys {
		if n, ok := value(k, 6, maxPerRequest, "request"); ok {
			perRequest, hasRequest = perRequest+n, true
		}
	}
	if hasRequest {
		if perRequest > maxPerRequest {
			bad = append(bad, "input_cost_per_request + output_cost_per_request: "+why(errTooLarge, "request"))
		} else {
			p.PerRequest = &perRequest
		}
	}
	// Long-context bands: <token key>_above_<N>k_tokens.
	bands := map[int64]*LongContext{}
	for key := range fields {
		f, threshold, ok := bandKey(key)
		if !ok {
			continue
		}
		n, ok := value(key, 12, maxPerToken, "token")
		if !ok {
			continue
		}
		b := bands[threshold]
		if b == nil {
			b = &LongContext{AboveInputTokens: threshold}
			bands[threshold] = b
		}
		*f.long(b) = &n
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return skip("bad price", strings.Join(bad, "; "))
	}
	if p.Input == nil {
		return skip("no per-token input price", "")
	}
	if p.Output == nil && mode != "embedding" {
		return skip("no per-token output price", "")
	}
	var warn []string
	if len(bands) > 0 {
		thresholds := make([]int64, 0, len(bands))
		for t := range bands {
			thresholds = append(thresholds, t)
		}
		slices.Sort(thresholds)
		lc := bands[thresholds[0]]
		for _, f := range tokenFields {
			if f.long == nil {
				continue
			}
			if l := f.long(lc); *l == nil && *f.base(&p) != nil {
				v := **f.base(&p)
				*l = &v
			}
		}
		p.LongContext = lc
		if len(thresholds) > 1 {
			var ks []string
			for _, t := range thresholds {
				ks = append(ks, strconv.FormatInt(t/1000, 10)+"k")
			}
			warn = append(warn, fmt.Sprintf("%s: long-context prices above %s input tokens; only those above %s are imported",
				name, strings.Join(ks, ", "), ks[0]))
		}
	}
	return &p, nil, warn
}

// bandKey parses "<token key>_above_<N>k_tokens" (N a whole number, at
// least 1, at most 10^9).
func bandKey(key string) (tokenField, int64, bool) {
	rest, ok := strings.CutSuffix(key, "k_tokens")
	if !ok {
		return tokenField{}, 0, false
	}
	i := strings.LastIndex(rest, "_above_")
	if i < 0 {
		return tokenField{}, 0, false
	}
	digits := rest[i+len("_above_"):]
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || n < 1 || n > 1_000_000_000 || digits[0] == '0' || digits[0] == '+' {
		return tokenField{}, 0, false
	}
	for _, f := range tokenFields {
		if f.key == rest[:i] && f.long != nil {
			return f, n * 1000, true
		}
	}
	return tokenField{}, 0, false
}

// why says what is wrong with a price, per its unit.
func why(err error, unit string) string {
	switch {
	case errors.Is(err, errTooFine) && unit == "token":
		return "finer than 1 pico-dollar per token (Sluice's unit: micro-dollars per 1M tokens)"
	case errors.Is(err, errTooFine):
		return "finer than 1 micro-dollar per request"
	case errors.Is(err, errTooLarge) && unit == "token":
		return "above $1 per token"
	case errors.Is(err, errTooLarge):
		return "above $1000 per request"
	}
	return err.Error()
}

// clip is a raw value as written, short enough for a report.
func clip(raw []byte) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		cut := 37
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

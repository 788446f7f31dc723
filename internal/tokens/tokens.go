package tokens

import "strconv"

// Kind is a kind of token. The kinds partition nothing by themselves:
// Input is every prompt token, and CachedInput, CacheWrite and AudioInput
// are parts of it; CacheWrite1h is the part of CacheWrite written with
// the 1-hour TTL. Output is every output token, and Reasoning and
// AudioOutput are parts of it.
type Kind uint8

// The kinds, in their fixed order: the order of the ledger's columns, as
// migrations added them. It is the order of every encoding that lists
// them (the spool's records, the JSON totals), so a new kind goes last.
const (
	Input        Kind = iota // every prompt token
	CachedInput              // read from the prompt cache
	CacheWrite               // written to the prompt cache (either TTL)
	Output                   // every output token, reasoning included
	Reasoning                // the reasoning part of Output
	CacheWrite1h             // the part of CacheWrite with the 1-hour TTL
	AudioInput               // the audio part of Input
	AudioOutput              // the audio part of Output

	// NumKinds is the number of kinds.
	NumKinds = iota
)

// Names are a kind's names outside Go. Each is an API (a config key, a
// JSON field, a column, a metric label): none may change.
type Names struct {
	// JSON is its field in the JSON totals of the admin API and of
	// sluice spend: "input_tokens".
	JSON string
	// Column is its column in the SQLite ledger's spend table.
	Column string
	// Field is its field in sluice spend records --format json, which
	// writes a record with its Go field names: "InputTokens".
	Field string
	// Price is its key in a pricing entry of sluice.yaml: "input".
	Price string
	// Metric is its kind label in sluice_tokens_total and its field in
	// the usage metadata Envoy's access log reads, or "" for a kind
	// counted in neither (the parts priced apart, which the ledger
	// holds).
	Metric string
}

var names = [NumKinds]Names{
	Input:        {JSON: "input_tokens", Column: "input_tokens", Field: "InputTokens", Price: "input", Metric: "input"},
	CachedInput:  {JSON: "cached_input_tokens", Column: "cached_input_tokens", Field: "CachedInputTokens", Price: "cached_input", Metric: "cached_input"},
	CacheWrite:   {JSON: "cache_creation_tokens", Column: "cache_creation_tokens", Field: "CacheCreationTokens", Price: "cache_write"},
	Output:       {JSON: "output_tokens", Column: "output_tokens", Field: "OutputTokens", Price: "output", Metric: "output"},
	Reasoning:    {JSON: "reasoning_tokens", Column: "reasoning_tokens", Field: "ReasoningTokens", Price: "reasoning", Metric: "reasoning"},
	CacheWrite1h: {JSON: "cache_creation_1h_tokens", Column: "cache_creation_1h_tokens", Field: "CacheCreation1hTokens", Price: "cache_write_1h"},
	AudioInput:   {JSON: "audio_input_tokens", Column: "audio_input_tokens", Field: "AudioInputTokens", Price: "audio_input"},
	AudioOutput:  {JSON: "audio_output_tokens", Column: "audio_output_tokens", Field: "AudioOutputTokens", Price: "audio_output"},
}

// Names are k's names; k must be a kind.
func (k Kind) Names() Names { return names[k] }

// String is k's pricing key ("input", "cache_write_1h").
func (k Kind) String() string {
	if k >= NumKinds {
		return "Kind(" + strconv.Itoa(int(k)) + ")"
	}
	return names[k].Price
}

// All are the kinds in their order, for range loops.
func All() [NumKinds]Kind {
	var ks [NumKinds]Kind
	for i := range ks {
		ks[i] = Kind(i)
	}
	return ks
}

// Counts is a count of tokens of each kind, indexed by Kind:
// Counts{tokens.Input: 10, tokens.Output: 3}. Tokens are int64, never
// floats.
type Counts [NumKinds]int64

// Add adds d to c, kind by kind, as the ledger's totals sum them.
func (c *Counts) Add(d Counts) {
	for k := range c {
		c[k] += d[k]
	}
}

// Total is Input + Output: every token, since each other kind is a part
// of one of them.
func (c Counts) Total() int64 { return c[Input] + c[Output] }

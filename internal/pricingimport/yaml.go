package pricingimport

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/sluicegw/sluice/internal/tokens"
)

// WriteYAML writes models as sluice.yaml's pricing: section, one flow
// mapping per model in Sluice's field order, after a comment naming
// source (the file read). A model imported under another name than its
// entry's says so in a comment.
func WriteYAML(w io.Writer, source string, models []Model) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# Imported by `sluice pricing import` from %s (LiteLLM's price format):\n", oneLine(source))
	fmt.Fprintln(bw, "# integer micro-dollars per 1M tokens; per_request in micro-dollars.")
	if len(models) == 0 {
		fmt.Fprintln(bw, "pricing: {}")
		return bw.Flush()
	}
	fmt.Fprintln(bw, "pricing:")
	for _, m := range models {
		fmt.Fprintf(bw, "  %s: {", yamlKey(m.Name))
		p := m.Price
		sep := writeFields(bw, "", []field{
			{tokens.Input.String(), p.Input}, {tokens.CachedInput.String(), p.CachedInput}, {tokens.CacheWrite.String(), p.CacheWrite},
			{tokens.CacheWrite1h.String(), p.CacheWrite1h}, {tokens.Output.String(), p.Output}, {tokens.Reasoning.String(), p.Reasoning},
			{tokens.AudioInput.String(), p.AudioInput}, {tokens.AudioOutput.String(), p.AudioOutput}, {"per_request", p.PerRequest},
		})
		if lc := p.LongContext; lc != nil {
			above := lc.AboveInputTokens
			fmt.Fprintf(bw, "%slong_context: {", sep)
			writeFields(bw, "", []field{
				{"above_input_tokens", &above}, {tokens.Input.String(), lc.Input}, {tokens.CachedInput.String(), lc.CachedInput},
				{tokens.CacheWrite.String(), lc.CacheWrite}, {tokens.CacheWrite1h.String(), lc.CacheWrite1h}, {tokens.Output.String(), lc.Output},
			})
			bw.WriteString("}")
		}
		bw.WriteString("}")
		if m.Source != m.Name {
			fmt.Fprintf(bw, "   # %s", oneLine(m.Source))
		}
		bw.WriteString("\n")
	}
	return bw.Flush()
}

type field struct {
	name string
	v    *int64
}

// writeFields writes the set fields as "name: v" pairs after sep and
// returns the separator for what follows.
func writeFields(w *bufio.Writer, sep string, fs []field) string {
	for _, f := range fs {
		if f.v == nil {
			continue
		}
		fmt.Fprintf(w, "%s%s: %d", sep, f.name, *f.v)
		sep = ", "
	}
	return sep
}

// plainKey is a model name YAML reads back as the same string when
// written unquoted, in a block mapping key.
var plainKey = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9._/-]*$`)

// yamlKey writes a model name as a mapping key: plain when that reads back
// as the same string, else double-quoted with every character YAML might
// not take literally escaped.
func yamlKey(s string) string {
	switch strings.ToLower(s) {
	case "true", "false", "null", "yes", "no", "on", "off", "y", "n":
		return `"` + s + `"`
	}
	if plainKey.MatchString(s) {
		return s
	}
	return yamlQuote(s)
}

func yamlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s { // an invalid byte is U+FFFD, as encoding/json reads it
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r >= 0x7f && r <= 0x9f || r == 0x2028 || r == 0x2029 || r == 0xfeff || r == 0xfffe || r == 0xffff ||
			r == utf8.RuneError:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// oneLine keeps a text fit for one line of a comment or a report: as it
// is when every character is graphic (or a space), else Go-quoted.
func oneLine(s string) string {
	for _, r := range s {
		if r == utf8.RuneError || r != ' ' && !unicode.IsGraphic(r) {
			return strconv.QuoteToGraphic(s)
		}
	}
	return s
}

// maxNamed is how many names a summary line lists before "and N more".
const maxNamed = 8

// WriteSummary says what Read imported from source and what it did not:
// skipped entries grouped by reason (the most frequent first, each bad
// price on its own line with what is wrong), wanted models not found and
// warnings.
func (r *Result) WriteSummary(w io.Writer, source string) {
	src := oneLine(source)
	fmt.Fprintf(w, "imported %s from %s (%s)", count(len(r.Models), "model"), src, count(r.Entries, "entry"))
	if len(r.Skipped) == 0 {
		fmt.Fprintln(w)
	} else {
		fmt.Fprintf(w, "; skipped %d:\n", len(r.Skipped))
	}
	groups := map[string][]Skip{}
	var reasons []string
	for _, s := range r.Skipped {
		if _, ok := groups[s.Reason]; !ok {
			reasons = append(reasons, s.Reason)
		}
		groups[s.Reason] = append(groups[s.Reason], s)
	}
	slices.SortFunc(reasons, func(a, b string) int {
		if d := len(groups[b]) - len(groups[a]); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	for _, reason := range reasons {
		g := groups[reason]
		if g[0].Detail != "" {
			for _, s := range g {
				fmt.Fprintf(w, "  %s: %s: %s\n", reason, skipName(s), oneLine(s.Detail))
			}
			continue
		}
		names := make([]string, 0, min(len(g), maxNamed))
		for _, s := range g[:min(len(g), maxNamed)] {
			names = append(names, skipName(s))
		}
		more := ""
		if len(g) > maxNamed {
			more = fmt.Sprintf(" and %d more", len(g)-maxNamed)
		}
		fmt.Fprintf(w, "  %d %s: %s%s\n", len(g), reason, strings.Join(names, ", "), more)
	}
	if len(r.NotFound) > 0 {
		names := make([]string, len(r.NotFound))
		for i, n := range r.NotFound {
			names[i] = oneLine(n)
		}
		fmt.Fprintf(w, "not in %s (looked up by model name, then upstream names): %s\n", src, strings.Join(names, ", "))
	}
	for _, s := range r.Warnings {
		fmt.Fprintf(w, "warning: %s\n", oneLine(s))
	}
}

// count is "1 model", "2 models", "0 entries".
func count(n int, noun string) string {
	switch {
	case n == 1:
		return "1 " + noun
	case strings.HasSuffix(noun, "y"):
		return strconv.Itoa(n) + " " + strings.TrimSuffix(noun, "y") + "ies"
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func skipName(s Skip) string {
	if s.Source != "" && s.Source != s.Name {
		return oneLine(s.Name) + " (entry " + oneLine(s.Source) + ")"
	}
	return oneLine(s.Name)
}

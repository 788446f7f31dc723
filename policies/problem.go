package policies

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Problem is one thing wrong with a configuration, addressed by its path in
// the document (for example "providers[2].base_url") and, when the
// configuration came from a file, by its line and column.
//
// Messages carry paths, names and literal values from the file, never the
// value of an expanded ${ENV} reference and never a secret.
type Problem struct {
	File   string // the config file; empty when unknown
	Path   string // the path of the offending value; empty for the whole document
	Line   int    // 1-based; 0 when unknown
	Column int    // 1-based; 0 when unknown
	Msg    string
}

// String formats the problem as FILE:LINE:COL: PATH: MSG, leaving out the
// pieces that are unknown.
func (p Problem) String() string {
	var b strings.Builder
	loc := p.File
	if p.Line > 0 {
		loc += ":" + strconv.Itoa(p.Line)
		if p.Column > 0 {
			loc += ":" + strconv.Itoa(p.Column)
		}
	}
	loc = strings.TrimPrefix(loc, ":")
	if loc != "" {
		b.WriteString(loc)
		b.WriteString(": ")
	}
	if p.Path != "" {
		b.WriteString(p.Path)
		b.WriteString(": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Problems is every problem found in a configuration. It is the error that
// Parse, Load, Compile and Watcher.Load return for an invalid configuration;
// use errors.As to get at the individual problems.
type Problems []Problem

// Error implements error: one problem per line.
func (ps Problems) Error() string {
	if len(ps) == 0 {
		return "no problems"
	}
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// sort orders problems by position (line, column), then by path, comparing
// list indexes numerically so that models[2] comes before models[10].
// Problems at the same place keep the order in which they were found.
func (ps Problems) sort() {
	slices.SortStableFunc(ps, func(a, b Problem) int {
		if c := cmp.Compare(a.Line, b.Line); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Column, b.Column); c != 0 {
			return c
		}
		return comparePaths(a.Path, b.Path)
	})
}

// comparePaths compares two paths, treating runs of digits as numbers.
func comparePaths(a, b string) int {
	for a != "" && b != "" {
		if isDigit(a[0]) && isDigit(b[0]) {
			na, ra := digitRun(a)
			nb, rb := digitRun(b)
			if c := cmp.Compare(len(strings.TrimLeft(na, "0")), len(strings.TrimLeft(nb, "0"))); c != 0 {
				return c
			}
			if c := strings.Compare(strings.TrimLeft(na, "0"), strings.TrimLeft(nb, "0")); c != 0 {
				return c
			}
			a, b = ra, rb
			continue
		}
		if c := cmp.Compare(a[0], b[0]); c != 0 {
			return c
		}
		a, b = a[1:], b[1:]
	}
	return cmp.Compare(len(a), len(b))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digitRun(s string) (run, rest string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

// suggest returns the candidate closest to s, if one is close enough to be
// a plausible typo: an edit distance of at most 2, or at most a third of the
// length of s, and less than the length of s. Ties go to the earliest
// candidate.
func suggest(s string, candidates []string) (string, bool) {
	n := utf8.RuneCountInString(s)
	limit := max(2, n/3)
	best, bestDist := "", limit+1
	for _, c := range candidates {
		if c == s || c == "" {
			continue
		}
		d := levenshtein(strings.ToLower(s), strings.ToLower(c))
		if d < bestDist && d < n {
			best, bestDist = c, d
		}
	}
	return best, best != ""
}

// didYouMean formats the suggestion for s as ` (did you mean "x"?)`, or
// returns "" when there is none.
func didYouMean(s string, candidates []string) string {
	if c, ok := suggest(s, candidates); ok {
		return " (did you mean " + strconv.Quote(c) + "?)"
	}
	return ""
}

// levenshtein is the edit distance between a and b, in runes.
func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// Paths.

// fieldPath appends a struct field (a YAML key of a fixed schema) to a path.
func fieldPath(parent, field string) string {
	if parent == "" {
		return field
	}
	return parent + "." + field
}

// indexPath appends a list index to a path.
func indexPath(parent string, i int) string {
	return parent + "[" + strconv.Itoa(i) + "]"
}

// keyPath appends a free-form map key (a model name under pricing) to a
// path. Keys that would make the path ambiguous, such as "gpt-4.1", are
// written quoted in brackets: pricing["gpt-4.1"].input.
func keyPath(parent, key string) string {
	if !plainKey(key) {
		return parent + "[" + strconv.Quote(key) + "]"
	}
	return fieldPath(parent, key)
}

func plainKey(key string) bool {
	if key == "" {
		return false
	}
	for _, r := range key {
		if r == '.' || r == '[' || r == ']' || r == '"' || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// pathSegment is one step of a path: a key or a list index.
type pathSegment struct {
	key   string
	index int // -1 for a key
}

// splitPath parses a path written by fieldPath, indexPath and keyPath.
func splitPath(path string) ([]pathSegment, bool) {
	var segs []pathSegment
	for path != "" {
		switch path[0] {
		case '.':
			path = path[1:]
		case '[':
			if len(path) > 1 && path[1] == '"' {
				q, err := strconv.QuotedPrefix(path[1:])
				if err != nil {
					return nil, false
				}
				key, err := strconv.Unquote(q)
				if err != nil || !strings.HasPrefix(path[1+len(q):], "]") {
					return nil, false
				}
				segs = append(segs, pathSegment{key: key, index: -1})
				path = path[1+len(q)+1:]
				continue
			}
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return nil, false
			}
			i, err := strconv.Atoi(path[1:end])
			if err != nil || i < 0 {
				return nil, false
			}
			segs = append(segs, pathSegment{index: i})
			path = path[end+1:]
			continue
		}
		end := strings.IndexAny(path, ".[")
		if end < 0 {
			end = len(path)
		}
		if end == 0 {
			return nil, false
		}
		segs = append(segs, pathSegment{key: path[:end], index: -1})
		path = path[end:]
	}
	return segs, true
}

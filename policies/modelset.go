package policies

import (
	"fmt"
	"slices"
	"strings"
)

// ModelSet is a compiled model allow-list: exact model names and patterns
// in which '*' matches any run of characters, '/' included. The zero value
// (no patterns) allows every model. A ModelSet is immutable and safe for
// concurrent use.
type ModelSet struct {
	patterns []string
	exact    map[string]struct{}
	globs    []glob
	all      bool // a pattern is "*" (or only stars)
}

// NewModelSet compiles an allow-list. Every pattern must be non-empty and
// made of the characters allowed in model names (letters, digits and
// -_.:/@) plus '*'. No patterns means every model.
func NewModelSet(patterns []string) (ModelSet, error) {
	if len(patterns) == 0 {
		return ModelSet{}, nil
	}
	m := ModelSet{patterns: slices.Clone(patterns), exact: make(map[string]struct{})}
	for i, p := range patterns {
		if msg := checkPattern(p); msg != "" {
			return ModelSet{}, fmt.Errorf("model pattern %d: %s", i, msg)
		}
		switch {
		case strings.Trim(p, "*") == "":
			m.all = true
		case !strings.Contains(p, "*"):
			m.exact[p] = struct{}{}
		default:
			m.globs = append(m.globs, compileGlob(p))
		}
	}
	return m, nil
}

// Allows reports whether model is on the list. It does not allocate.
func (m ModelSet) Allows(model string) bool {
	if len(m.patterns) == 0 || m.all {
		return true
	}
	if _, ok := m.exact[model]; ok {
		return true
	}
	for i := range m.globs {
		if m.globs[i].match(model) {
			return true
		}
	}
	return false
}

// Patterns returns the patterns the set was compiled from.
func (m ModelSet) Patterns() []string { return slices.Clone(m.patterns) }

// Unrestricted reports whether the set allows every model: it has no
// patterns, or one of them is "*".
func (m ModelSet) Unrestricted() bool { return len(m.patterns) == 0 || m.all }

// glob is a pattern with at least one '*': the text before the first star,
// after the last one, and the non-empty pieces in between.
type glob struct {
	prefix, suffix string
	middle         []string
}

func compileGlob(p string) glob {
	parts := strings.Split(p, "*")
	g := glob{prefix: parts[0], suffix: parts[len(parts)-1]}
	for _, part := range parts[1 : len(parts)-1] {
		if part != "" {
			g.middle = append(g.middle, part)
		}
	}
	return g
}

func (g *glob) match(s string) bool {
	if len(s) < len(g.prefix)+len(g.suffix) || !strings.HasPrefix(s, g.prefix) || !strings.HasSuffix(s, g.suffix) {
		return false
	}
	s = s[len(g.prefix) : len(s)-len(g.suffix)]
	for _, part := range g.middle {
		i := strings.Index(s, part)
		if i < 0 {
			return false
		}
		s = s[i+len(part):]
	}
	return true
}

// checkPattern returns why p is not a valid allow-list pattern, or "".
func checkPattern(p string) string {
	if p == "" {
		return "must not be empty"
	}
	for _, r := range p {
		if r != '*' && !modelNameRune(r) {
			return fmt.Sprintf("may contain only letters, digits, -_.:/@ and the wildcard *, got %q", p)
		}
	}
	return ""
}

// modelNameRune reports whether r may appear in a model name or alias.
func modelNameRune(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-_.:/@", r)
}

// checkModelName returns why s is not a valid model name or alias, or "".
func checkModelName(s string) string {
	for _, r := range s {
		if !modelNameRune(r) {
			return fmt.Sprintf("may contain only letters, digits and -_.:/@, got %q", s)
		}
	}
	return ""
}

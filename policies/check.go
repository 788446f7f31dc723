package policies

// CheckLimits checks limits set at runtime (by the admin API) exactly as
// Validate checks the limits of a key, team or org in sluice.yaml, against
// this snapshot's models, and returns every problem, each addressed from
// path ("limits.budgets[0].period"). Nil means valid.
func (s *Snapshot) CheckLimits(path string, l Limits) Problems {
	v, _ := s.validator()
	v.limits(path, l)
	return v.problems()
}

// CheckModels checks a model allow-list set at runtime as Validate checks
// one in sluice.yaml: every entry is a valid name or pattern that matches
// at least one configured model or alias. Nil means valid.
func (s *Snapshot) CheckModels(path string, patterns []string) Problems {
	v, known := s.validator()
	v.allowList(path, patterns, v.owners, known)
	return v.problems()
}

// validator returns a validator that knows the snapshot's models, and
// their names and aliases in config order.
func (s *Snapshot) validator() (*validator, []string) {
	owners := make(map[string]int)
	var known []string
	for i, m := range s.cfg.Models {
		for _, n := range append([]string{m.Name}, m.Aliases...) {
			owners[n] = i
			known = append(known, n)
		}
	}
	return &validator{owners: owners, modelList: s.cfg.Models}, known
}

func (v *validator) problems() Problems {
	var ps Problems
	for _, is := range v.issues {
		ps = append(ps, is.Problem)
	}
	ps.sort()
	return ps
}

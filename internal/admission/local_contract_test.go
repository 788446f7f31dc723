package admission_test

import (
	"testing"

	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/admission/admissiontest"
	"github.com/sluicegw/sluice/internal/limits"
)

// TestLocalContract runs the contract suite against Local, made as serve
// makes it: with a spend index behind its budgets.
func TestLocalContract(t *testing.T) {
	admissiontest.Run(t, func(t *testing.T, cfg admissiontest.Config) admission.Backend {
		idx := admission.NewSpendIndex(nil, nil)
		return admission.NewLocal(limits.New(limits.Options{}), admission.LocalOptions{TimeZone: cfg.TimeZone, Spent: idx.Spent, Record: idx.Add})
	})
}

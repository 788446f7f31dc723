package app

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicegw/sluice/extproc"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/apierr"
	"github.com/sluicegw/sluice/internal/ledger/hold"
)

// ledgerFaultKey carries WithLedgerFault's function.
type ledgerFaultKey struct{}

// WithLedgerFault returns ctx carrying fault, for tests: the spend ledger
// that Run opens under it calls fault before every write of records (see
// ledgersqlite.Options.Fault), so a test can make the ledger slow, or
// fail its writes as a full disk does. Nothing in Sluice sets it.
func WithLedgerFault(ctx context.Context, fault func(op string) error) context.Context {
	return context.WithValue(ctx, ledgerFaultKey{}, fault)
}

func ledgerFault(ctx context.Context) func(op string) error {
	f, _ := ctx.Value(ledgerFaultKey{}).(func(op string) error)
	return f
}

// gatedAdmitter refuses every request while the spend ledger cannot take
// records (hold.Ledger.Unavailable): a request admitted then could not be
// recorded. The refusal is a 503 ledger_unavailable in the API's dialect.
type gatedAdmitter struct {
	extproc.Admitter
	ledger *hold.Ledger
}

var _ extproc.Admitter = gatedAdmitter{}

func (g gatedAdmitter) Admit(ctx context.Context, c admission.Claim) (admission.Grant, error) {
	if g.ledger.Unavailable() != nil {
		return admission.Grant{}, apierr.New(503, apierr.CodeLedgerUnavailable, "the gateway cannot record spend right now; retry later")
	}
	return g.Admitter.Admit(ctx, c)
}

// registerHold registers the series of the held records.
func registerHold(reg prometheus.Registerer, h *hold.Ledger) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_ledger_unavailable",
			Help: "1 while the spend ledger cannot take records (records held in memory, new requests refused with ledger_unavailable), else 0."},
			func() float64 {
				if h.Unavailable() != nil {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sluice_ledger_held_records",
			Help: "Spend records of answered requests held in memory until the ledger takes them."},
			func() float64 { return float64(h.Held()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sluice_ledger_lost_records_total",
			Help: "Spend records lost: held beyond the bound, or still held when the ledger stopped (each logged at error level with its id)."},
			func() float64 { return float64(h.Lost()) }),
	)
}

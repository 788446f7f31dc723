// Package admissiontest is the contract suite every admission backend
// (admission.Backend) must pass — admission.Local now, a Redis backend
// shared by a fleet later — in the manner of net/http/httptest: a
// backend's tests call Run with a function that makes a fresh, empty
// backend.
//
// The suite pins down what ext_authz, ext_proc and the admin API rely on,
// exactly: request and token windows that slide in buckets and never
// admit more than their limit in any window, rolling, calendar and
// lifetime budgets counted to the pico-dollar, admission all or nothing
// across the key, team and org and their per-model limits, reservations
// settled to the actual use in the bucket and period they went to, the
// refusals' codes, messages and retry-after values, and no overshoot
// under concurrent calls (run it with -race). It asserts nothing about a
// backend's internals and touches nothing but the backends it is given.
package admissiontest

package ledger

import (
	"fmt"
	"time"
)

// Nanos is t as every ledger backend and the spool store it: Unix
// nanoseconds, 0 for the zero time. A time an int64 of nanoseconds cannot
// hold (before 1678 or after 2262), or the epoch itself (0 means unset),
// is ErrInvalid, named by field.
func Nanos(field string, t time.Time) (int64, error) {
	if t.IsZero() {
		return 0, nil
	}
	n := t.UnixNano()
	if n == 0 || !time.Unix(0, n).Equal(t) {
		return 0, fmt.Errorf("%s: %s cannot be stored (Unix nanoseconds, 1678 to 2262, not the epoch): %w",
			field, t.Format(time.RFC3339Nano), ErrInvalid)
	}
	return n, nil
}

// FromNanos is the inverse of Nanos: the UTC time, the zero time for 0.
func FromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

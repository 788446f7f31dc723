package app

import (
	"strings"
	"testing"
)

// TestKeysCreateExpiryRange: an expiry past what the key store holds is a
// usage error at --expires naming the range, found before the store is
// opened, whether written as a time, a date or a duration from now; the
// largest duration Go parses is among them.
func TestKeysCreateExpiryRange(t *testing.T) {
	config := quickstart(t)
	for _, expires := range []string{"2262-04-11T23:47:17Z", "2263-01-01", "9999-12-31T23:59:59Z", "2562047h47m16s", "2100000h"} {
		_, _, err := run(t, "keys", "create", "--config", config, "--team", "demo", "--expires", expires)
		want := "--expires: must be no later than 2262-04-11T23:47:16Z (the latest time the key store holds), got " + expires
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "create key") {
			t.Errorf("--expires %s: err = %v, want %q", expires, err, want)
		}
	}
	if _, _, err := run(t, "keys", "create", "--config", config, "--team", "demo", "--expires", "2262-04-11T23:47:16Z"); err != nil {
		t.Errorf("--expires at the last second the store holds: %v", err)
	}
}

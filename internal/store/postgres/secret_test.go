package postgres

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestErrorsNeverShowThePassword: the connection URL holds the database
// password; no error Open or Migrate returns — a URL that does not parse,
// a server that is not there, a password refused — shows it.
func TestErrorsNeverShowThePassword(t *testing.T) {
	const pw = "hunter2-secret-pw"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, url := range []string{
		"postgres://sluice:" + pw + "@127.0.0.1:notaport/db",
		"postgres://sluice:" + pw + "@127.0.0.1:1/db?sslmode=disable&connect_timeout=2",
		"postgres://sluice:" + pw + "@127.0.0.1:1/db?sslmode=bogus",
		"postgres://sluice:" + pw + "@[::1/db",
	} {
		_, err := Open(ctx, url, Options{})
		if err == nil {
			t.Errorf("Open(%s) succeeded", strings.ReplaceAll(url, pw, "…"))
			continue
		}
		if strings.Contains(err.Error(), pw) {
			t.Errorf("Open's error shows the password: %v", err)
		}
		if _, _, err := Migrate(ctx, url, nil); err == nil || strings.Contains(err.Error(), pw) {
			t.Errorf("Migrate's error %v: want one, without the password", err)
		}
	}
}

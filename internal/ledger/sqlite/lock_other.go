//go:build !unix

package sqlite

import "os"

// lockFile: without flock, no Ledger owns a spool; each commits to SQLite
// directly.
func lockFile(*os.File) (bool, error) { return false, nil }

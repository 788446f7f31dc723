//go:build !linux

package spool

import "os"

// syncData is a full sync where fdatasync is not available.
func syncData(f *os.File) error { return f.Sync() }

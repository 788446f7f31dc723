package sqlite

import (
	"os"
	"syscall"
)

// syncData is fdatasync: the data, and only the metadata needed to read
// it back (the spool's size changes only in grow, which syncs fully).
func syncData(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

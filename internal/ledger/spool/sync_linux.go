package spool

import (
	"os"
	"syscall"
	_ "unsafe" // go:linkname
)

// syncData is fdatasync: the data, and only the metadata needed to read
// it back (the spool's size changes only in grow, which syncs fully).
//
// The call blocks for as long as the device takes (a tenth of a
// millisecond to a few), and it is on the reply path: the committer
// makes each batch durable before its requests are answered. A goroutine
// in an ordinary system call keeps its P until sysmon has seen it there
// on two of its ticks (runtime/proc.go, retake), which are 20 µs apart
// at best and up to 10 ms when the process was idle. With GOMAXPROCS=1 —
// one CPU, or a container limited to one — nothing else runs meanwhile:
// no request is decoded or answered, so no batch forms behind the one
// being synced, and the next sync carries as few records as this one.
//
// So the call tells the runtime it will block, as the runtime's own
// blocking waits do: entersyscallblock hands the P to another thread
// before the call, and exitsyscall takes one back after. That costs about
// 10 µs of CPU a sync when nothing else is waiting (BenchmarkSyncData,
// against about 60 µs for the sync itself), and under load it lets the
// next batch form during the sync: a third as many syncs for the same
// requests (bench/README.md, "The spool's sync hands off its P").
func syncData(f *os.File) error {
	if e := fdatasyncBlocking(f.Fd()); e != 0 {
		return &os.PathError{Op: "fdatasync", Path: f.Name(), Err: e}
	}
	return nil
}

// fdatasyncBlocking runs fdatasync(fd) with the P handed off. Between
// the two runtime calls the goroutine has no P: nothing here may grow
// the stack, allocate or be instrumented (nosplit, norace; it is one
// basic block, so a coverage counter, if any, comes before the handoff),
// and the system call is the raw one, which does not enter the
// scheduler again.
//
//go:nosplit
//go:norace
func fdatasyncBlocking(fd uintptr) syscall.Errno {
	entersyscallblock()
	_, _, e := syscall.RawSyscall(syscall.SYS_FDATASYNC, fd, 0, 0)
	exitsyscall()
	return e
}

// The runtime keeps these two callable from outside it (their comments in
// runtime/proc.go: "Do not remove or change the type signature",
// go.dev/issue/67401).
//
//go:linkname entersyscallblock runtime.entersyscallblock
func entersyscallblock()

//go:linkname exitsyscall runtime.exitsyscall
func exitsyscall()

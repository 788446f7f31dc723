package spool

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkSyncData measures one spool sync of a small write, handing
// off the P, beside a plain fdatasync, in wall time and in the process's
// CPU time per sync (cpu-µs/op): with nothing else to run, the handoff's
// cost is the thread switches it adds. Run it with -cpu 1 to see
// GOMAXPROCS=1, where the handoff matters.
func BenchmarkSyncData(b *testing.B) {
	for _, way := range []struct {
		name string
		sync func(*os.File) error
	}{
		{"fdatasync", func(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }},
		{"syncData", syncData},
	} {
		b.Run(way.name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "spool"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			frame := make([]byte, 200)
			cpu0 := processCPU(b)
			b.ResetTimer()
			for i := range b.N {
				if _, err := f.WriteAt(frame, int64(i%64)*int64(len(frame))); err != nil {
					b.Fatal(err)
				}
				if err := way.sync(f); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

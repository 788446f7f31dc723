package exepages

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Release unmaps the resident pages of the executable's read-only,
// private mappings that hold no page of their own, and returns how many
// bytes of mappings it released.
func Release() (uint64, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("exepages: %w", err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("exepages: %w", err)
	}
	var released uint64
	for _, m := range readOnlyMappings(smaps, exe) {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("exepages: madvise %#x-%#x: %w", m.start, m.end, errno)
		}
		released += uint64(m.end - m.start)
	}
	return released, nil
}

// mapping is an address range of /proc/self/smaps.
type mapping struct{ start, end uintptr }

// readOnlyMappings are the mappings of smaps (the text of
// /proc/<pid>/smaps) of the file path that are private, not writable, and
// hold no anonymous (copy-on-write) page: those whose pages are the
// file's, unchanged.
func readOnlyMappings(smaps []byte, path string) []mapping {
	var (
		out  []mapping
		cur  mapping
		keep bool // cur is a candidate so far
	)
	flush := func() {
		if keep {
			out = append(out, cur)
		}
		keep = false
	}
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		f := bytes.Fields(line)
		if len(f) == 0 {
			continue
		}
		if m, ok := parseRange(f[0]); ok && len(f) >= 5 {
			// A mapping's header: range perms offset dev inode [path].
			flush()
			perms := f[1]
			cur = m
			keep = len(perms) == 4 && perms[1] == '-' && perms[3] == 'p' &&
				len(f) >= 6 && bytes.HasSuffix(line, []byte(" "+path))
			continue
		}
		if keep && string(f[0]) == "Anonymous:" && (len(f) < 2 || string(f[1]) != "0") {
			keep = false
		}
	}
	flush()
	return out
}

// parseRange reads "start-end" in hex.
func parseRange(b []byte) (mapping, bool) {
	i := bytes.IndexByte(b, '-')
	if i <= 0 {
		return mapping{}, false
	}
	start, err1 := strconv.ParseUint(string(b[:i]), 16, 64)
	end, err2 := strconv.ParseUint(string(b[i+1:]), 16, 64)
	if err1 != nil || err2 != nil || end <= start {
		return mapping{}, false
	}
	return mapping{uintptr(start), uintptr(end)}, true
}

package load

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat:
// 100 on every Linux architecture Go supports (`getconf CLK_TCK` says
// 100 on this machine); the kernel keeps it fixed whatever CONFIG_HZ is.
const clockTick = 10 * time.Millisecond

// cpuTime is the user+system CPU time the process pid has used
// (proc(5): fields 14 utime and 15 stime of /proc/<pid>/stat, counted
// after the parenthesised command name, which may hold spaces).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime is field 14, stime 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime/stime %q %q", pid, f[11], f[12])
	}
	return time.Duration(u+s) * clockTick, nil
}

// rssKiB is VmRSS of /proc/<pid>/status, in KiB.
func rssKiB(pid int) (int64, error) { return statusKiB(pid, "VmRSS:") }

// anonKiB is RssAnon of /proc/<pid>/status, in KiB.
func anonKiB(pid int) (int64, error) { return statusKiB(pid, "RssAnon:") }

// statusKiB is the field of /proc/<pid>/status named by its prefix, in KiB.
func statusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, strings.TrimSuffix(field, ":"))
}

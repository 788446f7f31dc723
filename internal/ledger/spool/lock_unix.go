//go:build unix

package spool

import (
	"bufio"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// canLock: files can be locked (flock), so one Ledger of a file owns its
// spool and another writer is refused.
const canLock = true

// lockFile takes an exclusive flock on f without waiting; false means
// another open file description (another Ledger) holds it.
func lockFile(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}

// lockHolder returns the pid of the process holding the flock on f, as
// Linux's /proc/locks tells it (in this process's pid namespace), or 0
// where there is no /proc/locks or it names no holder. It is for an error
// message: a wrong guess costs nothing.
func lockHolder(f *os.File) int {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0
	}
	locks, err := os.Open("/proc/locks")
	if err != nil {
		return 0
	}
	defer locks.Close()
	// "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; a waiter's line
	// has "->" after the number. The device is major:minor in hex.
	dev := uint64(st.Dev)
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	want := strconv.FormatUint(major, 16) + ":" + strconv.FormatUint(minor, 16) + ":" + strconv.FormatUint(uint64(st.Ino), 10)
	sc := bufio.NewScanner(locks)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		id := strings.Split(fields[5], ":")
		if len(id) != 3 || !sameDevice(id, want) {
			continue
		}
		if pid, err := strconv.Atoi(fields[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}

// sameDevice compares /proc/locks's major:minor:inode, whose major and
// minor are zero-padded hex, with want's unpadded form.
func sameDevice(id []string, want string) bool {
	major, err1 := strconv.ParseUint(id[0], 16, 64)
	minor, err2 := strconv.ParseUint(id[1], 16, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	return strconv.FormatUint(major, 16)+":"+strconv.FormatUint(minor, 16)+":"+id[2] == want
}

package exepages

import (
	"bytes"
	"crypto/sha256"
	"io"
	"os"
	"strconv"
	"testing"
)

const exe = "/usr/local/bin/sluice"

// sample is /proc/<pid>/smaps's text, shortened, for a binary's three
// mappings, its bss, and mappings Release must leave alone: one with a
// page of its own, a shared one, another file's, a replaced binary's and
// the vDSO.
const sample = `00400000-010c2000 r-xp 00000000 08:01 1234                               /usr/local/bin/sluice
Size:              13064 kB
Rss:               12100 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
010c2000-02961000 r--p 00cc2000 08:01 1234                               /usr/local/bin/sluice
Size:              25212 kB
Rss:               11324 kB
Anonymous:             0 kB
VmFlags: rd mr mw me
02961000-02a1f000 rw-p 02561000 08:01 1234                               /usr/local/bin/sluice
Size:                760 kB
Anonymous:           120 kB
02a1f000-04a71000 rw-p 00000000 00:00 0
Size:              32072 kB
Anonymous:           236 kB
05000000-05001000 r-xp 00000000 08:01 1234                               /usr/local/bin/sluice
Size:                  4 kB
Anonymous:             4 kB
06000000-06001000 r--s 00000000 08:01 1234                               /usr/local/bin/sluice
Size:                  4 kB
Anonymous:             0 kB
07000000-07001000 r--p 00000000 08:01 99                                 /usr/local/bin/sluice.old
Size:                  4 kB
Anonymous:             0 kB
08000000-08001000 r--p 00000000 08:01 1234                               /usr/local/bin/sluice (deleted)
Size:                  4 kB
Anonymous:             0 kB
7ffd0000-7ffd1000 r-xp 00000000 00:00 0                                  [vdso]
Anonymous:             0 kB
`

func TestReadOnlyMappingsAreTheUnchangedPrivateOnes(t *testing.T) {
	got := readOnlyMappings([]byte(sample), exe)
	want := []mapping{{0x00400000, 0x010c2000}, {0x010c2000, 0x02961000}}
	if len(got) != len(want) {
		t.Fatalf("mappings %#v, want %#v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d is %#x-%#x, want %#x-%#x", i, got[i].start, got[i].end, want[i].start, want[i].end)
		}
	}
}

func TestReadOnlyMappingsOfNoHeaderAreNone(t *testing.T) {
	for _, in := range []string{"", "\n\n", "Anonymous: 0 kB\n", "zz-yy r-xp 0 0 0 " + exe + "\n", "0000-0000 r-xp 0 0 0 " + exe + "\n", "1000-0fff r-xp 0 0 0 " + exe + "\n"} {
		if got := readOnlyMappings([]byte(in), exe); len(got) != 0 {
			t.Errorf("readOnlyMappings(%q) = %#v, want none", in, got)
		}
	}
}

// ownMappings reads this process's smaps and the mappings of it that
// Release would release.
func ownMappings(t *testing.T) ([]byte, []mapping) {
	t.Helper()
	path, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	ms := readOnlyMappings(smaps, path)
	if len(ms) == 0 {
		t.Fatalf("no read-only mapping of %s in /proc/self/smaps", path)
	}
	return smaps, ms
}

// residentKiB is the Rss of this process's mappings of its executable
// that readOnlyMappings would release.
func residentKiB(t *testing.T) int {
	t.Helper()
	smaps, ms := ownMappings(t)
	total := 0
	var in bool
	for _, line := range bytes.Split(smaps, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 0 {
			continue
		}
		if m, ok := parseRange(f[0]); ok {
			in = false
			for _, r := range ms {
				in = in || r == m
			}
			continue
		}
		if in && string(f[0]) == "Rss:" {
			n, err := strconv.Atoi(string(f[1]))
			if err != nil {
				t.Fatal(err)
			}
			total += n
		}
	}
	return total
}

// contents hashes what the process reads at the mappings Release would
// release, through /proc/self/mem (which maps back any page not mapped).
func contents(t *testing.T) [sha256.Size]byte {
	t.Helper()
	_, ms := ownMappings(t)
	mem, err := os.Open("/proc/self/mem")
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	h := sha256.New()
	for _, m := range ms {
		if _, err := io.Copy(h, io.NewSectionReader(mem, int64(m.start), int64(m.end-m.start))); err != nil {
			t.Fatalf("reading %#x-%#x: %v", m.start, m.end, err)
		}
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

func TestReleaseUnmapsTheBinarysPagesAndTheyComeBackTheSame(t *testing.T) {
	want := contents(t) // maps every page in
	before := residentKiB(t)
	n, err := Release()
	if err != nil {
		t.Fatal(err)
	}
	after := residentKiB(t)
	if n == 0 || after >= before {
		t.Fatalf("released %d bytes of mappings; resident %d KiB before, %d after", n, before, after)
	}
	if got := contents(t); got != want {
		t.Fatalf("the binary's read-only pages read %x after Release, %x before", got, want)
	}
	t.Logf("released %d MiB of mappings: resident %d KiB before, %d after", n>>20, before, after)
}

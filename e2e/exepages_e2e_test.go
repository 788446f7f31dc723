package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/bench/mockllm"
)

// TestServingHandsBackTheBinarysStartUpPages: once ready, serve unmaps
// the pages of its binary's code and read-only data that start-up
// touched (internal/exepages), so what stays resident of them is what
// serving touches again; and it goes on serving from pages mapped back
// in.
//
// The child is this test binary serving; the reference is this process,
// the same binary, which has run its own initialisation and tests and
// released nothing.
func TestServingHandsBackTheBinarysStartUpPages(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a sluice subprocess; not in -short")
	}
	cmd, s := startLimitsChild(t, mockllm.Options{Words: 10})
	mine := exeResidentKiB(t, os.Getpid())
	var theirs int
	deadline := time.Now().Add(20 * time.Second)
	for theirs = exeResidentKiB(t, cmd.Process.Pid); theirs*2 > mine; theirs = exeResidentKiB(t, cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("20 s after ready, the server has %d KiB of its binary's read-only pages resident; this process, the same binary, %d", theirs, mine)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("server: %d KiB of the binary's read-only pages resident; this process: %d", theirs, mine)

	// It serves on: a key made through the admin API, and a request with
	// it through the emulator.
	_, key := s.createKey(t, "t")
	url := emulatorFor(t, s, "exepages-1")
	req, _ := http.NewRequest("POST", url+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"go"}]}`))
	req.Header.Set("authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(body), `"usage"`) {
		t.Fatalf("after the release, a request was answered %d %q (%v)", resp.StatusCode, body, err)
	}
}

// exeResidentKiB is the resident size of pid's private, read-only
// mappings of its executable: its code and read-only data.
func exeResidentKiB(t *testing.T, pid int) int {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		t.Fatal(err)
	}
	total, in := 0, false
	sc := bufio.NewScanner(bytes.NewReader(smaps))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		switch {
		case len(f) >= 6 && bytes.IndexByte(f[0], '-') > 0 && !bytes.HasSuffix(f[0], []byte(":")):
			in = (string(f[1]) == "r-xp" || string(f[1]) == "r--p") && bytes.HasSuffix(sc.Bytes(), []byte(" "+exe))
		case in && len(f) >= 2 && string(f[0]) == "Rss:":
			n, err := strconv.Atoi(string(f[1]))
			if err != nil {
				t.Fatalf("smaps of %d: %q: %v", pid, sc.Text(), err)
			}
			total += n
		}
	}
	if total == 0 {
		t.Fatalf("no resident read-only mapping of %s in /proc/%d/smaps", exe, pid)
	}
	return total
}

package sqlite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/ledger"
	"github.com/sluicegw/sluice/internal/ledger/spool"
)

const (
	crashEnv      = "SLUICE_LEDGER_TEST_CRASH"
	crashSpoolEnv = "SLUICE_LEDGER_TEST_CRASH_SPOOL"
	crashLagEnv   = "SLUICE_LEDGER_TEST_CRASH_LAG"
)

// In the child of the lagging crash, the spool is rewound past
// lagRewindAt, and the ingester waits lagIngest before each transaction:
// it lags far behind the committer, and the spool grows past its rewind
// point while SQLite is behind.
const (
	lagRewindAt = 16 << 10
	lagIngest   = 250 * time.Millisecond
)

// TestCrashLosesNothing kills a process that is appending as fast as it
// can, in the middle of its work, and checks that every record whose
// Append had returned in that process is in the file, and that the
// aggregates are the sums of the records there. The child prints a
// RequestID only after its Append returned, so what the parent read is a
// lower bound of what was acknowledged.
//
// With a spool, the kill finds acknowledged records that are only in the
// spool; Open replays them.
//
// With the ingester lagging (a small rewind point, a slow ingester), the
// kill finds the spool grown past its rewind point with records SQLite
// does not have yet: a spool rewound while SQLite was behind would have
// dropped them.
func TestCrashLosesNothing(t *testing.T) {
	for _, spooled := range []bool{false, true} {
		t.Run(fmt.Sprintf("spool=%v", spooled), func(t *testing.T) { crashLosesNothing(t, spooled, false) })
	}
	t.Run("spool=true,ingester behind", func(t *testing.T) { crashLosesNothing(t, true, true) })
}

func crashLosesNothing(t *testing.T, spooled, lag bool) {
	const want = 3000 // acknowledged records to see before the kill
	path := filepath.Join(t.TempDir(), "ledger.sqlite")

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+path, fmt.Sprintf("%s=%v", crashSpoolEnv, spooled), fmt.Sprintf("%s=%v", crashLagEnv, lag))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	sc := bufio.NewScanner(stdout)
	killed := false
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 4 || line[:4] != "req_" {
			continue // go test's own output
		}
		acked[line] = true
		if len(acked) == want && !killed {
			// SIGKILL: no deferred function, no Close, no drain.
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	// The lines written before the kill are still in the pipe: read to
	// EOF, then reap.
	waitErr := cmd.Wait()
	if !killed {
		t.Fatalf("child ended before %d appends (saw %d): %v\nstderr:\n%s", want, len(acked), waitErr, stderr.String())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}

	inSQLite := 0
	if spooled { // what SQLite held before the spool's replay
		direct := openTest(t, path, Options{})
		before, err := direct.Records(t.Context(), ledger.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		inSQLite = len(before)
		if err := direct.Close(); err != nil {
			t.Fatal(err)
		}
	}
	l := openTest(t, path, Options{Spool: spooled})
	recs, err := l.Records(t.Context(), ledger.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for _, r := range recs {
		stored[r.RequestID] = true
	}
	lost := 0
	for id := range acked {
		if !stored[id] {
			lost++
			if lost <= 10 {
				t.Errorf("acknowledged %s is not in the ledger", id)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("lost %d of %d acknowledged records", lost, len(acked))
	}
	// The kill fell between the statements of some transaction, or
	// before its WAL sync: recovery kept records and aggregates together.
	checkAggregates(t, l)
	t.Logf("killed after %d acknowledged appends; the file holds %d records, none lost", len(acked), len(recs))
	if spooled {
		t.Logf("%d of them were replayed from the spool", len(recs)-inSQLite)
	}
	if lag {
		// The records only the spool held were more than its rewind
		// point's worth: the kill found SQLite behind a spool grown past
		// it, which is what this case is for.
		r := record("req_00_000000")
		r.KeyID, r.CostPico = "key_0", 1000
		frame := int64(spool.FrameBytes(&r))
		if replayed := int64(len(recs) - inSQLite); replayed*frame <= lagRewindAt {
			t.Errorf("only %d records (%d bytes of frames) were in the spool alone at the kill; want more than its rewind point, %d bytes",
				replayed, replayed*frame, lagRewindAt)
		}
	}
}

// TestCrashChild is the process TestCrashLosesNothing kills; it does
// nothing when run directly. It appends from 32 goroutines until killed
// (or for 20 s, if its parent is gone).
func TestCrashChild(t *testing.T) {
	path := os.Getenv(crashEnv)
	if path == "" {
		t.Skip("child process of TestCrashLosesNothing")
	}
	opts := Options{Spool: os.Getenv(crashSpoolEnv) == "true"}
	if os.Getenv(crashLagEnv) == "true" {
		opts.tune = func(o *spool.Options) { o.RewindAt, o.RewindWait = lagRewindAt, time.Millisecond }
		opts.Fault = func(op string) error {
			if op == "commit" {
				time.Sleep(lagIngest)
			}
			return nil
		}
	}
	l := openTest(t, path, opts)
	start(t, l)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				r := record(fmt.Sprintf("req_%02d_%06d", g, i))
				r.KeyID, r.CostPico = fmt.Sprintf("key_%d", g%8), int64(i%1000+1)
				if err := l.Append(ctx, r); err != nil {
					if ctx.Err() == nil {
						t.Errorf("Append(%s): %v", r.RequestID, err)
					}
					return
				}
				// One write per line: lines of goroutines do not mix.
				if _, err := os.Stdout.WriteString(r.RequestID + "\n"); err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
}

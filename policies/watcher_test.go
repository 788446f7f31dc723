package policies

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/logbuf"
)

// watcherFile is a config whose only model is name; its content (and so
// its version) changes with name.
func watcherFile(model string) string {
	return `providers:
  - name: openai
    kind: openai
    base_url: https://api.openai.com
    api_key: ${OPENAI_API_KEY}
models:
  - name: ` + model + `
    provider: openai
`
}

const badWatcherFile = `providers:
  - name: openai
    kind: opneai
    base_url: https://api.openai.com
    api_key: ${OPENAI_API_KEY}
models:
  - name: gpt-4o
    provider: openai
`

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer = logbuf.Buffer

type reload struct {
	s   *Snapshot
	err error
}

// watcherTest runs a Watcher on a file in a temporary directory.
type watcherTest struct {
	t       *testing.T
	dir     string
	path    string
	w       *Watcher
	logs    *syncBuffer
	reloads chan reload
}

func newWatcherTest(t *testing.T, content string) *watcherTest {
	t.Helper()
	wt := &watcherTest{t: t, dir: t.TempDir(), logs: &syncBuffer{}, reloads: make(chan reload, 100)}
	wt.path = filepath.Join(wt.dir, "sluice.yaml")
	wt.write(content)
	wt.w = NewWatcher(wt.path, WatcherOptions{
		Interval: 10 * time.Millisecond,
		Env:      lookupTestEnv,
		Logger:   slog.New(slog.NewTextHandler(wt.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		OnReload: func(s *Snapshot, err error) { wt.reloads <- reload{s, err} },
	})
	return wt
}

func (wt *watcherTest) write(content string) {
	wt.t.Helper()
	if err := os.WriteFile(wt.path, []byte(content), 0o644); err != nil {
		wt.t.Fatal(err)
	}
}

// replace writes content to a new file and renames it over the config,
// as editors and `kubectl cp`-style tools do.
func (wt *watcherTest) replace(content string) {
	wt.t.Helper()
	tmp := filepath.Join(wt.dir, ".sluice.yaml.tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		wt.t.Fatal(err)
	}
	if err := os.Rename(tmp, wt.path); err != nil {
		wt.t.Fatal(err)
	}
}

// run starts Run and stops it when the test ends, checking that it
// returns nil.
func (wt *watcherTest) run() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- wt.w.Run(ctx) }()
	wt.t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				wt.t.Errorf("Run = %v, want nil", err)
			}
		case <-time.After(5 * time.Second):
			wt.t.Error("Run did not return after its context ended")
		}
	})
}

// next waits for the next OnReload call.
func (wt *watcherTest) next() reload {
	wt.t.Helper()
	select {
	case r := <-wt.reloads:
		return r
	case <-time.After(3 * time.Second):
		wt.t.Fatal("no reload within 3s")
		return reload{}
	}
}

// quiet asserts that OnReload is not called for a while (long enough for
// many polls).
func (wt *watcherTest) quiet() {
	wt.t.Helper()
	select {
	case r := <-wt.reloads:
		wt.t.Fatalf("unexpected reload: snapshot %v, error %v", r.s != nil, r.err)
	case <-time.After(300 * time.Millisecond):
	}
}

func (wt *watcherTest) load() *Snapshot {
	wt.t.Helper()
	s, err := wt.w.Load()
	if err != nil {
		wt.t.Fatal(err)
	}
	return s
}

func modelOf(s *Snapshot) string { return s.ModelNames()[0] }

func TestWatcherReloads(t *testing.T) {
	wt := newWatcherTest(t, watcherFile("gpt-4o"))
	if wt.w.Current() != nil {
		t.Fatal("Current() before Load is not nil")
	}
	first := wt.load()
	if wt.w.Current() != first || modelOf(first) != "gpt-4o" {
		t.Fatalf("Current() = %v after Load returned %v", wt.w.Current(), first)
	}
	wt.run()

	wt.write(watcherFile("gpt-4.1"))
	r := wt.next()
	if r.err != nil || r.s == nil || modelOf(r.s) != "gpt-4.1" {
		t.Fatalf("OnReload(%v, %v), want the new snapshot", r.s, r.err)
	}
	if wt.w.Current() != r.s {
		t.Error("Current() is not the snapshot passed to OnReload")
	}
	if r.s.Version() == first.Version() {
		t.Error("the new snapshot has the old version")
	}
	if logs := wt.logs.String(); !strings.Contains(logs, "policies reloaded") || !strings.Contains(logs, "version="+r.s.Version()) {
		t.Errorf("logs lack the reload and its version:\n%s", logs)
	}
}

func TestWatcherKeepsLastGoodOnBadReload(t *testing.T) {
	wt := newWatcherTest(t, watcherFile("gpt-4o"))
	good := wt.load()
	wt.run()

	// Written by rename, never truncated in place: a test goroutine that
	// stalls for over a second between truncating and writing (a loaded
	// CI machine) would leave an empty file that has settled, and the
	// watcher would rightly report that instead.
	wt.replace(badWatcherFile)
	r := wt.next()
	var ps Problems
	if r.s != nil || !errors.As(r.err, &ps) {
		t.Fatalf("OnReload(%v, %v), want nil and Problems", r.s, r.err)
	}
	want := wt.path + `:3:11: providers[0].kind: unknown kind "opneai" (did you mean "openai"?)`
	if r.err.Error() != want {
		t.Errorf("error = %q, want %q", r.err, want)
	}
	if wt.w.Current() != good {
		t.Error("a bad reload replaced the snapshot")
	}
	logs := wt.logs.String()
	if !strings.Contains(logs, "policy reload failed") || !strings.Contains(logs, `unknown kind \"opneai\"`) {
		t.Errorf("logs lack the failure and its problem:\n%s", logs)
	}
	assertNoEnvValues(t, logs)
	wt.quiet() // the same bad content is not reported again

	wt.replace(watcherFile("gpt-4.1"))
	if r := wt.next(); r.err != nil || modelOf(r.s) != "gpt-4.1" {
		t.Fatalf("OnReload(%v, %v) after fixing the file, want the new snapshot", r.s, r.err)
	}
}

func TestWatcherIgnoresUnchangedContent(t *testing.T) {
	wt := newWatcherTest(t, watcherFile("gpt-4o"))
	first := wt.load()
	wt.run()

	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(wt.path, later, later); err != nil {
		t.Fatal(err)
	}
	wt.replace(watcherFile("gpt-4o")) // a new inode with the same content
	wt.quiet()
	if wt.w.Current() != first {
		t.Error("unchanged content replaced the snapshot")
	}
}

// TestWatcherPollsOfAnUnchangedFileAreSmall: a file changed less than
// settleTime ago is read again on every poll; while its content is the
// one in force, a poll reads it in pieces to hash it and allocates far
// less than the file, however large it is.
func TestWatcherPollsOfAnUnchangedFileAreSmall(t *testing.T) {
	// About 4 MiB: the config with a long comment at its end.
	content := watcherFile("gpt-4o") + "\n#" + strings.Repeat(" padding", 512<<10) + "\n"
	wt := newWatcherTest(t, content)
	first := wt.load()
	var before, after runtime.MemStats
	const polls = 8
	runtime.ReadMemStats(&before)
	for range polls {
		now := time.Now() // young: every poll reads it again
		if err := os.Chtimes(wt.path, now, now); err != nil {
			t.Fatal(err)
		}
		wt.w.poll()
	}
	runtime.ReadMemStats(&after)
	if wt.w.Current() != first {
		t.Fatal("an unchanged file replaced the snapshot")
	}
	if per := (after.TotalAlloc - before.TotalAlloc) / polls; per > uint64(len(content))/16 {
		t.Errorf("a poll of an unchanged %d-byte file allocated %d bytes", len(content), per)
	}

	// A change is still seen, though the size and time stay the same.
	changed := strings.Replace(content, "gpt-4o", "gpt-4.1", 1)
	changed = changed[:len(changed)-2] + "\n" // the same size
	fi, err := os.Stat(wt.path)
	if err != nil {
		t.Fatal(err)
	}
	wt.write(changed)
	if err := os.Chtimes(wt.path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	wt.w.poll()
	if modelOf(wt.w.Current()) != "gpt-4.1" {
		t.Errorf("after a same-size change, the model is %q", modelOf(wt.w.Current()))
	}
}

func TestWatcherRenameReplace(t *testing.T) {
	wt := newWatcherTest(t, watcherFile("gpt-4o"))
	wt.load()
	wt.run()
	wt.replace(watcherFile("o3"))
	if r := wt.next(); r.err != nil || modelOf(r.s) != "o3" {
		t.Fatalf("OnReload(%v, %v), want the renamed-in file", r.s, r.err)
	}
}

// TestWatcherConfigMapSwap follows the layout of a Kubernetes ConfigMap
// volume: sluice.yaml -> ..data/sluice.yaml, ..data -> ..<timestamp>, and
// an update swaps the ..data symlink.
func TestWatcherConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	writeVersion := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name, "sluice.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeVersion("..v1", watcherFile("gpt-4o"))
	if err := os.Symlink("..v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/sluice.yaml", filepath.Join(dir, "sluice.yaml")); err != nil {
		t.Fatal(err)
	}
	reloads := make(chan reload, 10)
	w := NewWatcher(filepath.Join(dir, "sluice.yaml"), WatcherOptions{
		Interval: 10 * time.Millisecond, Env: lookupTestEnv,
		OnReload: func(s *Snapshot, err error) { reloads <- reload{s, err} },
	})
	wt := &watcherTest{t: t, w: w, reloads: reloads}
	wt.load()
	wt.run()

	writeVersion("..v2", watcherFile("gpt-5"))
	if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..v1")); err != nil {
		t.Fatal(err)
	}
	if r := wt.next(); r.err != nil || modelOf(r.s) != "gpt-5" {
		t.Fatalf("OnReload(%v, %v), want the swapped-in file", r.s, r.err)
	}
}

func TestWatcherFileDisappears(t *testing.T) {
	wt := newWatcherTest(t, watcherFile("gpt-4o"))
	first := wt.load()
	wt.run()

	if err := os.Remove(wt.path); err != nil {
		t.Fatal(err)
	}
	r := wt.next()
	if r.s != nil || !errors.Is(r.err, os.ErrNotExist) {
		t.Fatalf("OnReload(%v, %v), want nil and an error wrapping os.ErrNotExist", r.s, r.err)
	}
	wt.quiet() // reported once, not on every poll
	if wt.w.Current() != first {
		t.Error("a missing file replaced the snapshot")
	}
	if n := strings.Count(wt.logs.String(), "policy file unavailable"); n != 1 {
		t.Errorf("logged the missing file %d times, want once:\n%s", n, wt.logs.String())
	}

	wt.write(watcherFile("gpt-4o")) // back, unchanged: nothing to reload
	wt.quiet()
	wt.write(watcherFile("gpt-4.1"))
	if r := wt.next(); r.err != nil || modelOf(r.s) != "gpt-4.1" {
		t.Fatalf("OnReload(%v, %v), want the new snapshot", r.s, r.err)
	}
}

// TestWatcherSameSizeSameTime changes the file without changing its size
// or modification time, as two quick writes within one tick of a coarse
// file system clock do.
func TestWatcherSameSizeSameTime(t *testing.T) {
	wt := newWatcherTest(t, watcherFile("gpt-4o"))
	wt.load()
	fi, err := os.Stat(wt.path)
	if err != nil {
		t.Fatal(err)
	}
	wt.run()
	wt.write(watcherFile("gpt-4a"))
	if err := os.Chtimes(wt.path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	if r := wt.next(); r.err != nil || modelOf(r.s) != "gpt-4a" {
		t.Fatalf("OnReload(%v, %v), want the new snapshot", r.s, r.err)
	}
}

// TestWatcherHalfWrittenFile catches the file between a truncation and
// the rest of the write: the invalid half is not reported as a failure.
func TestWatcherHalfWrittenFile(t *testing.T) {
	wt := newWatcherTest(t, watcherFile("gpt-4o"))
	wt.load()
	wt.run()
	full := watcherFile("gpt-4.1")
	wt.write(full[:len(full)/2])
	time.Sleep(100 * time.Millisecond) // several polls see the half file
	wt.write(full)
	if r := wt.next(); r.err != nil || modelOf(r.s) != "gpt-4.1" {
		t.Fatalf("OnReload(%v, %v), want the complete file's snapshot", r.s, r.err)
	}
	if logs := wt.logs.String(); strings.Contains(logs, "reload failed") {
		t.Errorf("the half-written file was reported:\n%s", logs)
	}
}

func TestWatcherLoadErrors(t *testing.T) {
	wt := newWatcherTest(t, badWatcherFile)
	_, err := wt.w.Load()
	var ps Problems
	if !errors.As(err, &ps) || len(ps) != 1 {
		t.Fatalf("Load = %v, want one problem", err)
	}
	if wt.w.Current() != nil {
		t.Error("Current() is set after a failed Load")
	}

	w := NewWatcher(filepath.Join(t.TempDir(), "missing.yaml"), WatcherOptions{})
	if _, err := w.Load(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load of a missing file = %v, want an error wrapping os.ErrNotExist", err)
	}
}

// TestWatcherRunWithoutLoad loads the file on the first poll.
func TestWatcherRunWithoutLoad(t *testing.T) {
	wt := newWatcherTest(t, watcherFile("gpt-4o"))
	wt.run()
	if r := wt.next(); r.err != nil || modelOf(r.s) != "gpt-4o" {
		t.Fatalf("OnReload(%v, %v), want the first snapshot", r.s, r.err)
	}
	if wt.w.Current() == nil {
		t.Error("Current() is nil after the first poll")
	}
}

func TestWatcherDefaults(t *testing.T) {
	w := NewWatcher("x.yaml", WatcherOptions{})
	if w.opts.Interval != 250*time.Millisecond {
		t.Errorf("default interval = %v, want 250ms", w.opts.Interval)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Run(ctx); err != nil {
		t.Errorf("Run with an ended context = %v, want nil", err)
	}
}

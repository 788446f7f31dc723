package policies

import (
	"context"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	// Interval is how often the file is stat'ed; 0 means 250ms.
	Interval time.Duration
	// Env expands ${NAME} references; nil has no variables.
	Env LookupEnv
	// Logger receives reload logs; nil discards them.
	Logger *slog.Logger
	// OnReload, if set, is called after each reload attempt of Run: with
	// the new snapshot, now in force, on success; with the error, the
	// previous snapshot staying in force, on failure. A success comes
	// within one Interval of the change; an invalid file is reported once
	// it has stood unchanged for a second (see settleTime), and a file that
	// cannot be read, at once. It is called from Run's goroutine and must
	// not call Load.
	OnReload func(s *Snapshot, err error)
}

// settleTime is how long after its last modification a file is read again
// on every poll. File systems keep modification times with a coarse clock,
// so two writes close together can leave the same size and time; reading
// a recently changed file until it settles catches the second one. A
// reload that fails before the file settles is retried rather than
// reported, so that a file caught half-written raises no false alarm.
const settleTime = time.Second

// Watcher keeps the Snapshot of a config file current. Load reads the file
// once; Run polls it and swaps in a new Snapshot whenever its content
// changes to a valid configuration. A bad change is logged and reported,
// and the last good snapshot stays in force.
//
// Polling stat (which follows symlinks) and comparing content hashes
// handles editors that write a new file and rename it over the old one,
// and Kubernetes ConfigMap volumes that swap a symlink.
type Watcher struct {
	path string
	opts WatcherOptions
	log  *slog.Logger
	cur  atomic.Pointer[Snapshot]

	mu   sync.Mutex  // guards the fields below
	seen os.FileInfo // the stat of the content last read; nil to read on the next poll
	// sum is the hash of the content last loaded or reported, to tell
	// the next content read from it. Only this process compares them, so
	// a seeded 64-bit hash does (16 MB in 1.5 ms, where SHA-256 takes 9).
	seed    maphash.Seed
	sum     uint64
	hasSum  bool
	missing bool // the file could not be read at the last poll (reported once)
}

// NewWatcher returns a watcher for the config file at path. It starts
// nothing and reads nothing: call Load, then Run.
func NewWatcher(path string, opts WatcherOptions) *Watcher {
	if opts.Interval <= 0 {
		opts.Interval = 250 * time.Millisecond
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Watcher{path: path, opts: opts, log: logger.With("component", "policies"), seed: maphash.MakeSeed()}
}

// Load reads, validates and compiles the file and puts the snapshot in
// force. An invalid file returns Problems.
func (w *Watcher) Load() (*Snapshot, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fi, err := os.Stat(w.path)
	if err != nil {
		return nil, fmt.Errorf("load policies: %w", err)
	}
	data, err := os.ReadFile(w.path)
	if err != nil {
		return nil, fmt.Errorf("load policies: %w", err)
	}
	w.remember(fi)
	w.sum, w.hasSum = maphash.Bytes(w.seed, data), true
	s, err := w.build(data)
	if err != nil {
		return nil, err
	}
	w.cur.Store(s)
	// Not the version: Load's caller starts up while it is made (see
	// newSnapshot), and logs it once serving.
	w.log.Info("policies loaded", "file", w.path)
	return s, nil
}

// Current returns the snapshot in force, or nil before a successful Load.
func (w *Watcher) Current() *Snapshot { return w.cur.Load() }

// Run polls the file every Interval until ctx ends, then returns nil.
// Without a prior Load, the first poll loads the file.
func (w *Watcher) Run(ctx context.Context) error {
	t := time.NewTicker(w.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			w.poll()
		}
	}
}

// poll reloads the file if its content changed.
func (w *Watcher) poll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	fi, err := os.Stat(w.path)
	if err != nil {
		w.unavailable(err)
		return
	}
	if w.seen != nil && sameStat(w.seen, fi) {
		return
	}
	// The content is hashed as it is read, in small pieces, and read
	// whole only if it changed: a file of many keys is read again on
	// every poll until it settles, and each whole read was as large as
	// the file, garbage the heap kept long after.
	sum, n, err := w.hashFile()
	if err != nil {
		w.unavailable(err)
		return
	}
	// A writer may have been truncating or filling the file between the
	// stat and the read: if the file moved on, or what was read is not
	// the size the stat saw, read again on the next poll.
	if !w.unmoved(fi, n) {
		return
	}
	if w.missing {
		w.missing = false
		w.log.Info("policy file readable again", "file", w.path)
	}
	if w.hasSum && sum == w.sum {
		w.remember(fi)
		return // same content: a touch, or a rewrite with no change
	}
	data, err := os.ReadFile(w.path)
	if err != nil {
		w.unavailable(err)
		return
	}
	if !w.unmoved(fi, int64(len(data))) {
		return
	}
	settled := w.remember(fi)
	sum = maphash.Bytes(w.seed, data)
	if w.hasSum && sum == w.sum {
		return // changed back between the two reads
	}
	old := w.cur.Load()
	s, err := w.build(data)
	if err != nil && !settled {
		// The file changed moments ago and may still be being written
		// (truncated, then filled): try again on the next poll, and report
		// the failure only if it outlasts settleTime.
		return
	}
	w.sum, w.hasSum = sum, true
	if err != nil {
		w.log.Error("policy reload failed; keeping the current policies",
			"file", w.path, "version", old.versionOrNone(), "error", err.Error())
		w.report(nil, err)
		return
	}
	w.cur.Store(s)
	w.log.Info("policies reloaded", "file", w.path, "version", s.Version(), "previous", old.versionOrNone())
	w.report(s, nil)
}

// hashFile hashes the file's content as it reads it (maphash hashes
// pieces written one after another as it hashes them joined) and returns
// the hash and how many bytes it read.
func (w *Watcher) hashFile() (sum uint64, n int64, err error) {
	f, err := os.Open(w.path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var h maphash.Hash
	h.SetSeed(w.seed)
	buf := make([]byte, 64<<10)
	for {
		k, err := f.Read(buf)
		h.Write(buf[:k])
		n += int64(k)
		if err == io.EOF {
			return h.Sum64(), n, nil
		}
		if err != nil {
			return 0, 0, err
		}
	}
}

// unmoved reports whether the file still has the stat fi after n bytes
// of it were read, and the stat's size is n; if not, the next poll reads
// it again.
func (w *Watcher) unmoved(fi os.FileInfo, n int64) bool {
	if again, err := os.Stat(w.path); err != nil || !sameStat(fi, again) || n != again.Size() {
		w.seen = nil
		return false
	}
	return true
}

// sameStat reports whether two stats describe the same file content
// (same file, modification time and size).
func sameStat(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.ModTime().Equal(b.ModTime()) && a.Size() == b.Size()
}

// remember records the stat of the content just read and reports whether
// the file has settled. A file changed less than settleTime ago is read
// again on every poll.
func (w *Watcher) remember(fi os.FileInfo) (settled bool) {
	// A modification time far in the future (a skewed clock on a network
	// file system) counts as settled, so failures are still reported.
	age := time.Since(fi.ModTime())
	settled = age >= settleTime || age < -settleTime
	w.seen = fi
	if !settled {
		w.seen = nil
	}
	return settled
}

// unavailable reports a file that cannot be read, once until it can be
// read again.
func (w *Watcher) unavailable(err error) {
	w.seen = nil
	if w.missing {
		return
	}
	w.missing = true
	err = fmt.Errorf("reload policies: %w", err)
	w.log.Error("policy file unavailable; keeping the current policies",
		"file", w.path, "version", w.cur.Load().versionOrNone(), "error", err.Error())
	w.report(nil, err)
}

func (w *Watcher) report(s *Snapshot, err error) {
	if w.opts.OnReload != nil {
		w.opts.OnReload(s, err)
	}
}

func (w *Watcher) build(data []byte) (*Snapshot, error) {
	cfg, err := Parse(data, w.path, w.opts.Env)
	if err != nil {
		return nil, err
	}
	return newSnapshot(cfg, w.path)
}

func (s *Snapshot) versionOrNone() string {
	if s == nil {
		return "none"
	}
	return s.Version()
}

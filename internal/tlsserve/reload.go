package tlsserve

import (
	"context"
	"errors"
	"slices"
	"time"
)

// Run polls the files every Interval until ctx ends, then returns nil.
// When their content changed, it loads them together and puts the new
// set in force; a set that does not load (a missing file, bad PEM, a key
// that does not match the certificate, an expired certificate) is logged
// at warn, counted in sluice_tls_reloads_total{result="failed"}, and the
// last good set keeps serving.
//
// Files are stat'ed through symlinks, and a change of device, inode, size
// or modification time is confirmed by a content hash, so both a file
// renamed over the old one and a Kubernetes secret volume's ..data
// symlink swap are seen, and a touch is not a reload. A set read while a
// file changed is read again at the next poll; a set changed less than a
// second ago that does not load is retried rather than reported, so a
// certificate and key replaced one after the other raise no alarm.
func (r *Reloader) Run(ctx context.Context) error {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			r.poll()
		}
	}
}

// poll reloads the files if their content changed.
func (r *Reloader) poll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	stats, err := stat(r.files)
	if err != nil {
		r.unavailable(err)
		return
	}
	if r.seen != nil && slices.EqualFunc(r.seen, stats, sameStat) {
		return
	}
	s, err := read(r.files, stats)
	if errors.Is(err, errMoved) {
		r.seen = nil
		return
	}
	if err != nil {
		r.unavailable(err)
		return
	}
	if r.missing {
		r.missing = false
		r.log.Info("TLS files readable again")
	}
	sums := s.sums()
	if slices.Equal(sums, r.sums) {
		r.remember(s) // a touch, or a rewrite with no change
		return
	}
	now := time.Now()
	settled := s.settled(now)
	b, err := build(r.files, s, now)
	if err != nil && !settled {
		r.seen = nil // may still be being written: try again next poll
		return
	}
	r.sums = sums
	r.remember(s)
	if err != nil {
		r.failed(err)
		return
	}
	r.cur.Store(b)
	r.m.reloads.WithLabelValues(r.server, resultOK).Inc()
	r.m.expiry.WithLabelValues(r.server).Set(float64(b.cert.Leaf.NotAfter.Unix()))
	r.log.Info("TLS files reloaded; new connections use them", r.loadedAttrs(b)...)
}

// remember records the stats of the set just read, so that the next poll
// reads it again only if a stat changes; a set changed less than
// settleTime ago is read on every poll until it settles.
func (r *Reloader) remember(s *set) {
	r.seen = s.stats
	if !s.settled(time.Now()) {
		r.seen = nil
	}
}

// failed reports a set that did not load.
func (r *Reloader) failed(err error) {
	r.m.reloads.WithLabelValues(r.server, resultFailed).Inc()
	attrs := []any{"error", err.Error()}
	var fe *FileError
	if errors.As(err, &fe) {
		attrs = append([]any{"file", fe.Path}, attrs...)
	}
	leaf := r.cur.Load().cert.Leaf
	attrs = append(attrs, "serving_subject", leaf.Subject.String(), "serving_not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	r.log.Warn("TLS reload failed; still serving the previous certificate", attrs...)
}

// unavailable reports a file that cannot be read, once until the files
// can be read again.
func (r *Reloader) unavailable(err error) {
	r.seen = nil
	if r.missing {
		return
	}
	r.missing = true
	r.failed(err)
}

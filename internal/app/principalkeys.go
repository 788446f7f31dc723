package app

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sluicegw/sluice/internal/principal"
	"github.com/sluicegw/sluice/policies"
)

// principalSource gives authz and extproc the keys that sign and verify
// principals and handoffs: security.principal_keys as the current config
// has them, else a random key this process makes once, which no other
// process accepts. When a reload changes them, what the keys in force
// before signed still verifies for a while — as long as a principal or a
// handoff signed just before may still be read (the longer of
// security.principal_max_age and gateway.reservation_ttl) — so that a
// rotation breaks no request in flight.
type principalSource struct {
	own *principal.Keys
	log *slog.Logger
	now func() time.Time

	// cur is read on every request (get) without a lock; reloaded, on
	// the config watcher's goroutine alone, replaces it.
	cur atomic.Pointer[keySet]
}

// keySet is the keys in force: inForce, the keys of the last snapshot
// seen, and what get returns until graceEnd — inForce also accepting the
// keys before it (zero graceEnd: inForce alone).
type keySet struct {
	inForce, during *principal.Keys
	graceEnd        time.Time
}

func newPrincipalSource(snap *policies.Snapshot, log *slog.Logger, now func() time.Time) (*principalSource, error) {
	own, err := principal.Generate()
	if err != nil {
		return nil, err
	}
	s := &principalSource{own: own, log: log, now: now}
	k, err := s.of(snap)
	if err != nil {
		return nil, err
	}
	s.cur.Store(&keySet{inForce: k, during: k})
	return s, nil
}

// of is the keys snap asks for: new keys over its
// security.principal_keys, else the process's own. The snapshot holds
// the secrets and checked their length; the keys are made here, by their
// user.
func (s *principalSource) of(snap *policies.Snapshot) (*principal.Keys, error) {
	secrets := snap.PrincipalSecrets()
	if len(secrets) == 0 {
		return s.own, nil
	}
	bs := make([][]byte, len(secrets))
	for i, sec := range secrets {
		bs[i] = []byte(sec.Reveal())
	}
	return principal.New(bs)
}

// get returns the keys in force now.
func (s *principalSource) get() *principal.Keys {
	c := s.cur.Load()
	if c.graceEnd.IsZero() || s.now().Before(c.graceEnd) {
		return c.during
	}
	return c.inForce
}

// reloaded takes the keys of a reloaded snapshot. Only the config
// watcher calls it, one reload at a time.
func (s *principalSource) reloaded(snap *policies.Snapshot) {
	next, err := s.of(snap)
	if err != nil {
		// Not expected: the snapshot admits only secrets long enough.
		s.log.Error("the reloaded security.principal_keys make no signing keys; the keys in force stay", "err", err)
		return
	}
	prev := s.cur.Load().inForce
	if next == prev {
		return
	}
	if next == s.own && prev != s.own {
		s.log.Warn("the reloaded config has no security.principal_keys: this process now signs with a random key of its own, which other replicas refuse; what the previous keys signed verifies for a while")
	}
	grace := max(snap.PrincipalMaxAge(), snap.Gateway().ReservationTTL)
	s.cur.Store(&keySet{inForce: next, during: next.AlsoAccepting(prev), graceEnd: s.now().Add(grace)})
}

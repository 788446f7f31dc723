package app

import (
	"log/slog"
	"sync"
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

	mu      sync.Mutex
	inForce *principal.Keys // the keys of the last snapshot seen
	// keys is what keys() returns: inForce, or inForce also accepting the
	// keys before it until graceEnd.
	keys     *principal.Keys
	graceEnd time.Time
}

func newPrincipalSource(snap *policies.Snapshot, log *slog.Logger, now func() time.Time) (*principalSource, error) {
	own, err := principal.Generate()
	if err != nil {
		return nil, err
	}
	s := &principalSource{own: own, log: log, now: now}
	s.inForce = s.of(snap)
	s.keys = s.inForce
	return s, nil
}

// of is the keys snap asks for.
func (s *principalSource) of(snap *policies.Snapshot) *principal.Keys {
	if k := snap.PrincipalKeys(); k != nil {
		return k
	}
	return s.own
}

// get returns the keys in force now.
func (s *principalSource) get() *principal.Keys {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.graceEnd.IsZero() && !s.now().Before(s.graceEnd) {
		s.keys, s.graceEnd = s.inForce, time.Time{}
	}
	return s.keys
}

// reloaded takes the keys of a reloaded snapshot.
func (s *principalSource) reloaded(snap *policies.Snapshot) {
	next := s.of(snap)
	s.mu.Lock()
	defer s.mu.Unlock()
	prev := s.inForce
	if next == prev {
		return
	}
	if next == s.own && prev != s.own {
		s.log.Warn("the reloaded config has no security.principal_keys: this process now signs with a random key of its own, which other replicas refuse; what the previous keys signed verifies for a while")
	}
	grace := max(snap.PrincipalMaxAge(), snap.Gateway().ReservationTTL)
	s.inForce, s.keys, s.graceEnd = next, next.AlsoAccepting(prev), s.now().Add(grace)
}

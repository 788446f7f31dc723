package keyring

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/internal/limits"
	"github.com/sluicegw/sluice/policies"
)

// keyRec is one key as the replica keeps it: its own fields only, with
// what many keys share (the team, an allow-list, simple limits) held once
// and pointed to. It is immutable once in a table.
type keyRec struct {
	hash [32]byte
	// names is the key's id, prefix and name one after the other (one
	// allocation, one string header); idEnd and prefixEnd end the first
	// two. See setNames.
	names            string
	idEnd, prefixEnd uint32
	team             string           // interned
	models           *models          // nil: unrestricted at key level
	limits           *policies.Limits // nil: no limits of its own
	times            keyTimes
	// rev is the store revision of a stored key plus one; 0 for a
	// declared key.
	rev int64
}

func (k *keyRec) declared() bool { return k.rev == 0 }

func (k *keyRec) id() string     { return k.names[:k.idEnd] }
func (k *keyRec) prefix() string { return k.names[k.idEnd:k.prefixEnd] }
func (k *keyRec) name() string   { return k.names[k.prefixEnd:] }

// setNames gives id, prefix and name one backing array.
func (k *keyRec) setNames(id, prefix, name string) {
	k.names = id + prefix + name
	k.idEnd, k.prefixEnd = uint32(len(id)), uint32(len(id)+len(prefix))
}

// keyTimes are a key's expiry and revocation instants in 24 bytes, where
// two time.Time take 48: seconds and nanoseconds since the Unix epoch.
// They read back in UTC, which is how they are shown; the zero time reads
// back as the zero time.
type keyTimes struct {
	expSec, revSec   int64
	expNsec, revNsec int32
}

func newKeyTimes(expires, revoked time.Time) keyTimes {
	return keyTimes{expires.Unix(), revoked.Unix(), int32(expires.Nanosecond()), int32(revoked.Nanosecond())}
}

func (t keyTimes) expires() time.Time { return time.Unix(t.expSec, int64(t.expNsec)).UTC() }
func (t keyTimes) revoked() time.Time { return time.Unix(t.revSec, int64(t.revNsec)).UTC() }

// models is a compiled allow-list and its metadata value, shared by every
// key with the same patterns.
type models struct {
	set policies.ModelSet
	md  *structpb.Value
}

// teamInfo is what a key's principal takes from its team and org, built
// once per team for every key of it.
type teamInfo struct {
	name, org         string
	models            policies.ModelSet
	limits, orgLimits policies.Limits
	demands           []limits.Demand // the team's request-rate demands
	// The metadata values every key of the team shares.
	mdTeam, mdOrg, mdModels *structpb.Value
}

// table is an immutable set of keys indexed by hash and by id with open
// addressing: two []int32 of slots (index+1, 0 empty) at most half full,
// probed linearly. SHA-256 hashes are uniform, so their first 8 bytes are
// the slot hash; ids are hashed with a per-table maphash seed.
type table struct {
	recs   []keyRec
	byHash []int32
	byID   []int32
	seed   maphash.Seed
}

func slots(n int) int {
	if n < 4 {
		return 8
	}
	return 1 << bits.Len(uint(2*n-1)) // the power of two ≥ 2n
}

// newTable indexes recs. A rec whose hash or id is already taken by an
// earlier one is left out of the indexes and reported through dup.
func newTable(recs []keyRec, dup func(r *keyRec, by *keyRec)) *table {
	t := &table{
		recs:   recs,
		byHash: make([]int32, slots(len(recs))),
		byID:   make([]int32, slots(len(recs))),
		seed:   maphash.MakeSeed(),
	}
	kept := recs[:0]
	for i := range recs {
		r := &recs[i]
		if j := t.findHash(r.hash); j >= 0 {
			dup(r, &kept[j])
			continue
		}
		if j := t.findID(r.id()); j >= 0 {
			dup(r, &kept[j])
			continue
		}
		kept = append(kept, *r)
		t.insert(int32(len(kept)))
	}
	t.recs = kept
	return t
}

// declared is the table's records of declared keys, which come first:
// publishTable indexes the ring's policy's declared keys before any
// other, and the policy refuses two with one hash or name.
func (t *table) declared() []keyRec {
	n := 0
	for n < len(t.recs) && t.recs[n].declared() {
		n++
	}
	return t.recs[:n:n]
}

func (t *table) insert(slot int32) {
	r := &t.recs[slot-1]
	m := uint64(len(t.byHash) - 1)
	for i := hashSlot(r.hash) & m; ; i = (i + 1) & m {
		if t.byHash[i] == 0 {
			t.byHash[i] = slot
			break
		}
	}
	for i := maphash.String(t.seed, r.id()) & m; ; i = (i + 1) & m {
		if t.byID[i] == 0 {
			t.byID[i] = slot
			break
		}
	}
}

func hashSlot(h [32]byte) uint64 { return binary.LittleEndian.Uint64(h[:8]) }

// findHash is the index in recs of the key with hash h, or -1.
func (t *table) findHash(h [32]byte) int {
	m := uint64(len(t.byHash) - 1)
	for i := hashSlot(h) & m; ; i = (i + 1) & m {
		s := t.byHash[i]
		if s == 0 {
			return -1
		}
		if t.recs[s-1].hash == h {
			return int(s - 1)
		}
	}
}

// findID is the index in recs of the key with that id, or -1.
func (t *table) findID(id string) int {
	m := uint64(len(t.byID) - 1)
	for i := maphash.String(t.seed, id) & m; ; i = (i + 1) & m {
		s := t.byID[i]
		if s == 0 {
			return -1
		}
		if t.recs[s-1].id() == id {
			return int(s - 1)
		}
	}
}

// overRec is a stored key changed since the table was built, with its
// principal once made.
type overRec struct {
	rec keyRec
	p   atomic.Pointer[Principal]
}

// view is what readers see: a table, the stored keys changed since it was
// built (which win over the table's), and the teams. Principals are made
// on first use and kept for the life of the view's teams.
type view struct {
	base   *table
	cache  []atomic.Pointer[Principal] // parallel to base.recs
	byID   map[string]*overRec
	byHash map[[32]byte]*overRec
	teams  map[string]*teamInfo
	n      int
}

func (v *view) resolve(h [32]byte) *Principal {
	if o := v.byHash[h]; o != nil {
		return v.principal(&o.rec, &o.p)
	}
	i := v.base.findHash(h)
	if i < 0 {
		return nil
	}
	r := &v.base.recs[i]
	if _, changed := v.byID[r.id()]; changed {
		return nil // its newer record has another hash
	}
	return v.principal(r, &v.cache[i])
}

func (v *view) byKeyID(id string) *Principal {
	if o := v.byID[id]; o != nil {
		return v.principal(&o.rec, &o.p)
	}
	i := v.base.findID(id)
	if i < 0 {
		return nil
	}
	return v.principal(&v.base.recs[i], &v.cache[i])
}

// principal returns r's principal, making it on first use.
func (v *view) principal(r *keyRec, slot *atomic.Pointer[Principal]) *Principal {
	if p := slot.Load(); p != nil {
		return p
	}
	p := newPrincipal(r, v.teams[r.team])
	if slot.CompareAndSwap(nil, p) {
		return p
	}
	return slot.Load()
}

// newPrincipal makes the principal of r in team t (nil: the team exists
// neither in the config nor in the store).
func newPrincipal(r *keyRec, t *teamInfo) *Principal {
	p := &Principal{
		KeyID: r.id(), KeyName: r.name(), KeyPrefix: r.prefix(), Team: r.team,
		ExpiresAt: r.times.expires(), RevokedAt: r.times.revoked(),
		team: t,
	}
	if r.models != nil {
		p.KeyModels, p.keyModelsMD = r.models.set, r.models.md
	}
	if r.limits != nil {
		p.KeyLimits = *r.limits
	}
	if t == nil {
		p.TeamMissing = true
	} else {
		p.Org, p.TeamModels, p.TeamLimits, p.OrgLimits = t.org, t.models, t.limits, t.orgLimits
	}
	p.Requests = keyDemands(p.KeyID, p.KeyLimits.Requests)
	if t != nil && len(t.demands) > 0 {
		if p.Requests == nil {
			p.Requests = t.demands // shared: demands are only read
		} else {
			p.Requests = append(p.Requests, t.demands...)
		}
	}
	return p
}

package keyring

import (
	"encoding/binary"
	"hash/maphash"
	"math"
	"math/bits"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicegw/sluice/policies"
)

// keyRec is one key as the ring handles it outside a table (an overlay,
// the shadowed keys, a key being added): its own fields only, with what
// many keys share (the team, an allow-list, simple limits) held once and
// pointed to. A table keeps it as a row.
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
	// The metadata values every key of the team shares.
	mdTeam, mdOrg, mdModels *structpb.Value
}

// row is one key as a table holds it: fixed-size and free of pointers,
// so that a table is a few flat arrays which the garbage collector never
// scans, however many keys it holds. Its strings are ranges of the
// table's names; what many keys share (the team, an allow-list, limits)
// are indexes into the table's shared values.
type row struct {
	hash  [32]byte
	times keyTimes
	rev   int64
	// names[off:off+end] is the key's id, prefix and name one after the
	// other; idEnd and prefixEnd end the first two.
	off, idEnd, prefixEnd, end uint32
	// Indexes into table.teams, .models and .limits; 0 is "" or nil.
	team, models, limits uint32
}

// table is an immutable set of keys indexed by hash and by id with open
// addressing: two []int32 of slots (index+1, 0 empty) at most half full,
// probed linearly. SHA-256 hashes are uniform, so their first 8 bytes are
// the slot hash; ids are hashed with a per-table maphash seed.
type table struct {
	rows   []row
	names  string
	teams  []string
	models []*models
	limits []*policies.Limits
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

func (t *table) len() int { return len(t.rows) }

func (t *table) id(i int) string {
	r := &t.rows[i]
	return t.names[r.off : r.off+r.idEnd]
}

func (t *table) declaredAt(i int) bool { return t.rows[i].rev == 0 }

// rec is the record of row i. Its strings are t's, so it allocates
// nothing.
func (t *table) rec(i int) keyRec {
	r := &t.rows[i]
	return keyRec{
		hash: r.hash, names: t.names[r.off : r.off+r.end], idEnd: r.idEnd, prefixEnd: r.prefixEnd,
		team: t.teams[r.team], models: t.models[r.models], limits: t.limits[r.limits],
		times: r.times, rev: r.rev,
	}
}

// declared is how many of the table's rows are declared keys, which come
// first: a ring's builders take its policy's declared keys before any
// other, and the policy refuses two with one hash or name.
func (t *table) declared() int {
	n := 0
	for n < len(t.rows) && t.declaredAt(n) {
		n++
	}
	return n
}

func (t *table) insert(slot int32) {
	r := &t.rows[slot-1]
	m := uint64(len(t.byHash) - 1)
	for i := hashSlot(r.hash) & m; ; i = (i + 1) & m {
		if t.byHash[i] == 0 {
			t.byHash[i] = slot
			break
		}
	}
	for i := maphash.String(t.seed, t.id(int(slot-1))) & m; ; i = (i + 1) & m {
		if t.byID[i] == 0 {
			t.byID[i] = slot
			break
		}
	}
}

func hashSlot(h [32]byte) uint64 { return binary.LittleEndian.Uint64(h[:8]) }

// findHash is the index in rows of the key with hash h, or -1.
func (t *table) findHash(h [32]byte) int {
	m := uint64(len(t.byHash) - 1)
	for i := hashSlot(h) & m; ; i = (i + 1) & m {
		s := t.byHash[i]
		if s == 0 {
			return -1
		}
		if t.rows[s-1].hash == h {
			return int(s - 1)
		}
	}
}

// findID is the index in rows of the key with that id, or -1.
func (t *table) findID(id string) int {
	m := uint64(len(t.byID) - 1)
	for i := maphash.String(t.seed, id) & m; ; i = (i + 1) & m {
		s := t.byID[i]
		if s == 0 {
			return -1
		}
		if t.id(int(s-1)) == id {
			return int(s - 1)
		}
	}
}

// builder collects the rows of a table: each record's strings are copied
// into one growing array of names and its shared values are numbered, so
// a record costs its row and its bytes of names, and the records given to
// add can go at once.
type builder struct {
	rows    []row
	names   strings.Builder // only appended to: its strings stay valid
	teams   []string
	teamAt  map[string]uint32
	models  []*models
	modelAt map[*models]uint32
	limits  []*policies.Limits
	limitAt map[*policies.Limits]uint32
	// full counts the records left out because the names passed 4 GiB.
	full int
}

// newBuilder returns a builder with room for n rows.
func newBuilder(n int) *builder {
	return &builder{
		rows:  make([]row, 0, n),
		teams: []string{""}, teamAt: map[string]uint32{"": 0},
		models: []*models{nil}, modelAt: map[*models]uint32{nil: 0},
		limits: []*policies.Limits{nil}, limitAt: map[*policies.Limits]uint32{nil: 0},
	}
}

func (b *builder) len() int { return len(b.rows) }

// add appends r's row.
func (b *builder) add(r *keyRec) {
	off := b.names.Len()
	if uint64(off)+uint64(len(r.names)) > math.MaxUint32 {
		b.full++
		return
	}
	b.names.WriteString(r.names)
	b.rows = append(b.rows, row{
		hash: r.hash, times: r.times, rev: r.rev,
		off: uint32(off), idEnd: r.idEnd, prefixEnd: r.prefixEnd, end: uint32(len(r.names)),
		team:   number(&b.teams, b.teamAt, r.team),
		models: number(&b.models, b.modelAt, r.models),
		limits: number(&b.limits, b.limitAt, r.limits),
	})
}

// number is v's index in *vals, appending it the first time.
func number[V comparable](vals *[]V, at map[V]uint32, v V) uint32 {
	if i, ok := at[v]; ok {
		return i
	}
	i := uint32(len(*vals))
	*vals = append(*vals, v)
	at[v] = i
	return i
}

// rec is the record of row i so far.
func (b *builder) rec(i int) keyRec {
	t := table{rows: b.rows, names: b.names.String(), teams: b.teams, models: b.models, limits: b.limits}
	return t.rec(i)
}

// build indexes the rows into a table; b must not be used after. A row
// whose hash or id an earlier one has is left out of the table and
// reported through dup (may be nil).
func (b *builder) build(dup func(r, by *keyRec)) *table {
	names := b.names.String()
	if b.names.Cap() > len(names)+len(names)/8 {
		// The array grew by doubling: hold the names alone.
		names = strings.Clone(names)
	}
	t := &table{
		rows: b.rows, names: names, teams: b.teams, models: b.models, limits: b.limits,
		byHash: make([]int32, slots(len(b.rows))),
		byID:   make([]int32, slots(len(b.rows))),
		seed:   maphash.MakeSeed(),
	}
	// The rows kept are moved down in place: row n-1 and all before it
	// are indexed, row i and all after it not yet looked at.
	n := 0
	for i := range t.rows {
		j := t.findHash(t.rows[i].hash)
		if j < 0 {
			j = t.findID(t.id(i))
		}
		if j >= 0 {
			if dup != nil {
				r, by := t.rec(i), t.rec(j)
				dup(&r, &by)
			}
			continue
		}
		t.rows[n] = t.rows[i]
		n++
		t.insert(int32(n))
	}
	t.rows = t.rows[:n]
	return t
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
	cache  []atomic.Pointer[Principal] // parallel to base.rows
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
	if _, changed := v.byID[v.base.id(i)]; changed {
		return nil // its newer record has another hash
	}
	return v.basePrincipal(i)
}

func (v *view) byKeyID(id string) *Principal {
	if o := v.byID[id]; o != nil {
		return v.principal(&o.rec, &o.p)
	}
	i := v.base.findID(id)
	if i < 0 {
		return nil
	}
	return v.basePrincipal(i)
}

// basePrincipal returns the principal of the table's row i.
func (v *view) basePrincipal(i int) *Principal {
	if p := v.cache[i].Load(); p != nil {
		return p
	}
	r := v.base.rec(i)
	return v.principal(&r, &v.cache[i])
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
	return p
}

package policies

import (
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// declaredKeys are a snapshot's declared keys, compiled into rows that
// hold no pointers: a config may declare a great many keys, and as
// DeclaredKey structs (five strings, the hash in hex, a slice, limits
// and a pointer) with their strings they took about 300 bytes a key,
// every one an object the collector marks. A row is 60 bytes; the names
// share one string, and what few keys have (their own allow-list,
// limits, an expiry) is a table beside, numbered from 1 in the row.
type declaredKeys struct {
	rows    []declaredRow
	names   string // each row's name and prefix, one after another
	models  [][]string
	limits  []Limits
	expires []time.Time
}

type declaredRow struct {
	hash [32]byte
	// name and prefix are names[nameOff:nameOff+nameLen] and the
	// prefixLen bytes after it.
	nameOff   uint32
	nameLen   uint32
	prefixLen uint32
	team      uint32 // index into Snapshot.teams
	models    uint32 // 0: the team's allow-list; else models[models-1]
	limits    uint32 // 0: none; else limits[limits-1]
	expires   uint32 // 0: never; else expires[expires-1]
}

// compileDeclared compiles c's keys, which Validate has checked: each
// names a declared team (teamIndex) and a 64-character hex hash. An error
// names the key at fault.
func compileDeclared(keys []DeclaredKey, teamIndex map[string]int) (declaredKeys, error) {
	d := declaredKeys{rows: make([]declaredRow, len(keys))}
	n := 0
	for i := range keys {
		n += len(keys[i].Name) + len(keys[i].Prefix)
	}
	var names strings.Builder
	names.Grow(n)
	var lists map[string]uint32 // allow-lists already numbered, joined by NUL
	for i := range keys {
		k, r := &keys[i], &d.rows[i]
		if len(k.SHA256) != hex.EncodedLen(len(r.hash)) {
			return declaredKeys{}, fmt.Errorf("%s.sha256: must be 64 hex characters", indexPath("keys", i))
		}
		if _, err := hex.Decode(r.hash[:], []byte(k.SHA256)); err != nil {
			return declaredKeys{}, fmt.Errorf("%s.sha256: %w", indexPath("keys", i), err)
		}
		t, ok := teamIndex[k.Team]
		if !ok {
			return declaredKeys{}, fmt.Errorf("%s.team: unknown team %q", indexPath("keys", i), k.Team)
		}
		r.team = uint32(t)
		r.nameOff, r.nameLen, r.prefixLen = uint32(names.Len()), uint32(len(k.Name)), uint32(len(k.Prefix))
		names.WriteString(k.Name)
		names.WriteString(k.Prefix)
		if len(k.Models) > 0 {
			joined := strings.Join(k.Models, "\x00")
			if lists == nil {
				lists = make(map[string]uint32)
			}
			// A list is checked once, when first seen.
			if r.models = lists[joined]; r.models == 0 {
				if _, err := NewModelSet(k.Models); err != nil {
					return declaredKeys{}, fmt.Errorf("%s.models: %w", indexPath("keys", i), err)
				}
				d.models = append(d.models, k.Models)
				r.models = uint32(len(d.models))
				lists[joined] = r.models
			}
		}
		// Only the zero value is left out (nil slices and maps), so a key
		// gives back exactly the limits it was declared with.
		if !reflect.ValueOf(&k.Limits).Elem().IsZero() {
			d.limits = append(d.limits, k.Limits)
			r.limits = uint32(len(d.limits))
		}
		if k.ExpiresAt != nil {
			d.expires = append(d.expires, *k.ExpiresAt)
			r.expires = uint32(len(d.expires))
		}
	}
	d.names = names.String()
	return d, nil
}

func (d *declaredKeys) name(r *declaredRow) string {
	return d.names[r.nameOff : r.nameOff+r.nameLen]
}

// policy fills kp with row r's key, its allow-list set (compiled by the
// caller, so keys with the same list may share it).
func (d *declaredKeys) policy(s *Snapshot, r *declaredRow, set ModelSet, kp *KeyPolicy) {
	name := d.name(r)
	end := r.nameOff + r.nameLen
	*kp = KeyPolicy{
		ID:     "config:" + name,
		Name:   name,
		Team:   s.teams[r.team].Name,
		Prefix: d.names[end : end+r.prefixLen],
		Hash:   r.hash,
		Models: set,
	}
	if r.limits > 0 {
		kp.Limits = d.limits[r.limits-1]
	}
	if r.expires > 0 {
		kp.ExpiresAt = d.expires[r.expires-1]
	}
}

// set compiles row r's allow-list.
func (d *declaredKeys) set(r *declaredRow) ModelSet {
	if r.models == 0 {
		return ModelSet{}
	}
	set, _ := NewModelSet(d.models[r.models-1]) // compileDeclared checked it
	return set
}

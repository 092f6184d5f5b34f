package keyspace

import (
	"errors"
	"fmt"

	"github.com/cellserver/cellserver/keyslot"
)

// CheckInvariants checks that every shard's table agrees with itself and
// with the keyspace's figures: its live entries are the ones its slots
// point to, each found again by its key; the entry count, the count of
// slots in use and the accounted memory match what the table records; the
// shards' memory adds up to Memory().Used; and, with Config.SlotIndex,
// each slot's list holds exactly the shard's keys of that slot and the
// database's per-slot counts add up. It returns every violation found
// (errors.Join), nil if none. It holds every shard lock (LockAll)
// meanwhile: it is a check for tests, as bbolt's Tx.Check is.
func (ks *Keyspace) CheckInvariants() error {
	ks.LockAll()
	defer ks.UnlockAll()
	var errs []error
	var used int64
	for _, db := range ks.dbs {
		var slotCounts []int64
		if db.slotCounts != nil {
			slotCounts = make([]int64, keyslot.Slots)
		}
		for i := range db.shards {
			s := &db.shards[i]
			where := fmt.Sprintf("db %d shard %d", db.index, i)
			errs = append(errs, s.t.check(where, ks, s.bytes, slotCounts)...)
			used += s.bytes
		}
		for slot, n := range slotCounts {
			if c := int64(db.slotCounts[slot].Load()); c != n {
				errs = append(errs, fmt.Errorf("db %d slot %d: count %d, %d keys linked", db.index, slot, c, n))
			}
		}
	}
	if u := ks.used.Load(); u != used {
		errs = append(errs, fmt.Errorf("keyspace: used %d bytes, the shards' sum %d", u, used))
	}
	return errors.Join(errs...)
}

// check returns the table's violations (see CheckInvariants); bytes is
// its shard's accounted memory; slotCounts, nil without the slot index,
// gets the number of entries linked per slot added.
func (t *table) check(where string, ks *Keyspace, bytes int64, slotCounts []int64) []error {
	var errs []error
	fail := func(format string, args ...any) {
		if len(errs) < 10 {
			errs = append(errs, fmt.Errorf(where+": "+format, args...))
		}
	}
	live, size := 0, int64(0)
	for j := uint32(0); j < t.next; j++ {
		e := t.at(j)
		if e.meta == 0 {
			continue
		}
		live++
		size += t.size(e)
		key := t.key(e)
		if idx, _, found := t.find(key, ks.Hash(key)); !found || idx != j {
			fail("entry %d (key %q) not found by its key (found %v at %d)", j, key, found, idx)
		}
	}
	inUse, filled := 0, 0
	for _, v := range t.slots {
		if v == 0 {
			continue
		}
		filled++
		if v&idxMask == tombstone {
			continue
		}
		inUse++
		if idx := v&idxMask - 1; idx >= t.next || t.at(idx).meta == 0 {
			fail("a slot points to entry %d, not in use", idx)
		}
	}
	if live != t.live || inUse != t.live || filled != t.filled {
		fail("%d entries in use, %d slots point to entries, %d slots filled; the table records %d live, %d filled",
			live, inUse, filled, t.live, t.filled)
	}
	if size != bytes {
		fail("entries' memory %d bytes, the shard records %d", size, bytes)
	}
	if t.sx == nil {
		return errs
	}
	linked := 0
	t.sx.heads.each(func(slot uint16) {
		prev := uint32(0)
		for i := t.sx.heads.get(slot); i != 0; i = t.sx.link(i - 1).next {
			if linked++; linked > live {
				fail("slot %d: its list does not end", slot)
				return
			}
			e := t.at(i - 1)
			if e.meta == 0 || keyslot.Of(t.key(e)) != slot {
				fail("slot %d: its list holds entry %d, not a key of that slot", slot, i-1)
			}
			if p := t.sx.link(i - 1).prev; p != prev {
				fail("slot %d: entry %d's previous is %d, want %d", slot, i-1, p, prev)
			}
			prev = i
			slotCounts[slot]++
		}
	})
	if linked != live {
		fail("%d entries linked in the slot index, %d in use", linked, live)
	}
	return errs
}

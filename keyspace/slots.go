package keyspace

import (
	"sync/atomic"

	"github.com/cellserver/cellserver/keyslot"
)

// The slot index (Config.SlotIndex) lets cluster mode count, list and
// delete the keys of one hash slot (keyslot.Of) without a scan.
//
// Keys stay in the shard their seeded hash picks, so a slot's keys are
// spread over every shard of a database. Each shard threads its entries
// of one slot on a doubly linked list: the links live in chunks parallel
// to the entries' (8 bytes per entry; entries never move, so rehashing
// and page compaction leave them alone), and a small hash table from
// slot to the list's head (slotheads.go) holds the slots present in the
// shard. The
// database keeps an atomic count per slot, which makes CountKeysInSlot
// one load. An entry's slot is not stored: removal recomputes it from
// the key (CRC16), which is cheaper than two more bytes per entry.
//
// Without the index (the default) a table's sx is nil and the only cost
// is that nil check on insert and remove.

// SlotIndexOverhead is the estimated memory the slot index adds per key
// (its links and a share of the shards' slot tables: 17.0 bytes per key
// measured with 1M keys over 16384 slots by BenchmarkSlotIndexMemory),
// counted in each entry's accounted memory when the index is on.
const SlotIndexOverhead = 17

// slotLink links an entry to the previous and next entries of its slot
// in the same shard (index+1; 0: none).
type slotLink struct{ prev, next uint32 }

// slotIndex is a table's part of the slot index.
type slotIndex struct {
	links  []*[chunkLen]slotLink // parallel to table.chunks, allocated as needed
	heads  slotHeads             // the first entry (index+1) of each slot present
	counts *[keyslot.Slots]atomic.Int32
}

func newSlotIndex(counts *[keyslot.Slots]atomic.Int32) *slotIndex {
	return &slotIndex{counts: counts}
}

func (x *slotIndex) link(i uint32) *slotLink {
	return &x.links[i>>chunkBits][i&(chunkLen-1)]
}

// add puts entry idx at the head of slot's list.
func (x *slotIndex) add(idx uint32, slot uint16) {
	for int(idx>>chunkBits) >= len(x.links) {
		x.links = append(x.links, new([chunkLen]slotLink))
	}
	head := x.heads.get(slot)
	*x.link(idx) = slotLink{next: head}
	if head != 0 {
		x.link(head - 1).prev = idx + 1
	}
	x.heads.set(slot, idx+1)
	x.counts[slot].Add(1)
}

// remove takes entry idx off slot's list; the map is touched only when
// idx is the list's head.
func (x *slotIndex) remove(idx uint32, slot uint16) {
	lk := x.link(idx)
	switch {
	case lk.prev != 0:
		x.link(lk.prev - 1).next = lk.next
	case lk.next != 0:
		x.heads.set(slot, lk.next)
	default:
		x.heads.del(slot)
	}
	if lk.next != 0 {
		x.link(lk.next - 1).prev = lk.prev
	}
	*lk = slotLink{}
	x.counts[slot].Add(-1)
}

// reset forgets every entry: the table was emptied. The database's
// counts are the caller's (DB.Flush and Keyspace.FlushAll zero them).
func (x *slotIndex) reset() {
	x.heads.reset()
	x.links = nil
}

// zeroSlotCounts sets every slot count of db to 0; all of db's shard
// locks are held, and every shard was cleared.
func (db *DB) zeroSlotCounts() {
	if db.slotCounts != nil {
		for i := range db.slotCounts {
			db.slotCounts[i].Store(0)
		}
	}
}

// SlotIndex reports whether the keyspace keeps the slot index
// (Config.SlotIndex).
func (ks *Keyspace) SlotIndex() bool { return ks.slotIndex }

// CountKeysInSlot returns the number of keys of database db in hash slot
// slot (keyslot.Of), counting like DBSIZE (expired keys not yet removed
// included), as CLUSTER COUNTKEYSINSLOT. It takes no lock: O(1). Without
// the slot index it is a full scan, one shard lock at a time.
func (ks *Keyspace) CountKeysInSlot(db int, slot uint16) int {
	d := ks.dbs[db]
	if slot >= keyslot.Slots {
		return 0
	}
	if d.slotCounts != nil {
		return int(d.slotCounts[slot].Load())
	}
	n := 0
	d.scanSlot(slot, func(s *Shard, idx uint32) bool { n++; return true })
	return n
}

// KeysInSlot returns up to max keys (copies) of database db in hash slot
// slot, as CLUSTER GETKEYSINSLOT (expired keys not yet removed
// included). It locks one shard at a time; with the slot index it looks
// only at the slot's keys (plus one map lookup per shard). Keys written
// meanwhile may or may not be seen.
func (ks *Keyspace) KeysInSlot(db int, slot uint16, max int) [][]byte {
	d := ks.dbs[db]
	if max <= 0 || slot >= keyslot.Slots {
		return nil
	}
	if d.slotCounts != nil && d.slotCounts[slot].Load() == 0 {
		return nil
	}
	var out [][]byte
	if d.slotCounts == nil {
		d.scanSlot(slot, func(s *Shard, idx uint32) bool {
			out = append(out, append([]byte(nil), s.t.key(s.t.at(idx))...))
			return len(out) < max
		})
		return out
	}
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		x := s.t.sx
		for j := x.heads.get(slot); j != 0 && len(out) < max; j = x.link(j - 1).next {
			out = append(out, append([]byte(nil), s.t.key(s.t.at(j-1))...))
		}
		s.mu.Unlock()
		if len(out) >= max {
			break
		}
	}
	return out
}

// DeleteSlot removes every key of database db in hash slot slot and
// returns how many it removed. Each removal is journaled as Delete's, so
// persistence and replicas follow. It locks one shard at a time, and
// lets go of it every deleteBatch keys so that commands on the shard
// wait for a bounded time: a key of the slot written meanwhile into a
// shard it has already passed stays (callers stop writes to the slot
// first, as cluster mode does when it gives a slot away). With the slot
// index it costs O(keys in the slot) plus a map lookup per shard;
// without, a full scan. It deletes in replica mode too: whether to call
// it on a replica is the caller's decision.
func (ks *Keyspace) DeleteSlot(db int, slot uint16) int {
	if slot >= keyslot.Slots {
		return 0
	}
	var set [keyslot.Slots]bool
	set[slot] = true
	return ks.DeleteSlots(db, &set)
}

// deleteBatch is the most keys DeleteSlots removes under one shard lock.
const deleteBatch = 256

// DeleteSlots is DeleteSlot for every slot set in slots, in one pass over
// the shards.
func (ks *Keyspace) DeleteSlots(db int, slots *[keyslot.Slots]bool) int {
	d := ks.dbs[db]
	n := 0
	var set, mine []uint16
	for slot, ok := range slots {
		if ok {
			set = append(set, uint16(slot))
		}
	}
	if len(set) == 0 {
		return 0
	}
	for i := range d.shards {
		if d.slotCounts != nil && len(set) <= 16 && !d.anyKeys(set) {
			break
		}
		s := &d.shards[i]
		for more := true; more; {
			more = false
			batch := 0
			s.mu.Lock()
			if d.slotCounts == nil {
				for j := uint32(0); j < s.t.next && batch < deleteBatch; j++ {
					if e := s.t.at(j); e.meta != 0 && slots[keyslot.Of(s.t.key(e))] {
						s.removeEntry(j)
						batch++
					}
				}
			} else {
				// The shard's slots to empty: found from the shorter of
				// the two lists.
				mine = mine[:0]
				if len(set) <= s.t.sx.heads.n {
					for _, slot := range set {
						if s.t.sx.heads.get(slot) != 0 {
							mine = append(mine, slot)
						}
					}
				} else {
					s.t.sx.heads.each(func(slot uint16) {
						if slots[slot] {
							mine = append(mine, slot)
						}
					})
				}
				for _, slot := range mine {
					for batch < deleteBatch {
						head := s.t.sx.heads.get(slot)
						if head == 0 {
							break
						}
						s.removeEntry(head - 1)
						batch++
					}
				}
			}
			s.mu.Unlock()
			n += batch
			more = batch == deleteBatch
			if batch > 0 && ks.room != nil {
				ks.room.WaitRoom()
			}
		}
	}
	return n
}

// anyKeys reports whether one of slots holds a key (with the index).
func (d *DB) anyKeys(slots []uint16) bool {
	for _, slot := range slots {
		if d.slotCounts[slot].Load() != 0 {
			return true
		}
	}
	return false
}

// scanSlot calls fn for every entry of slot, a shard lock at a time,
// until fn returns false: the fallback without the index.
func (d *DB) scanSlot(slot uint16, fn func(s *Shard, idx uint32) bool) {
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		for j := uint32(0); j < s.t.next; j++ {
			if e := s.t.at(j); e.meta != 0 && keyslot.Of(s.t.key(e)) == slot {
				if !fn(s, j) {
					s.mu.Unlock()
					return
				}
			}
		}
		s.mu.Unlock()
	}
}

// RangeSlots calls fn for every entry of the shard whose hash slot is set
// in slots (expired entries not yet removed included: their expiry goes
// with them), until fn returns false. With the slot index it visits only
// those slots' entries; without it, every entry. v is the shard's view
// (see Lookup); fn must not modify the shard. s.mu must be held.
func (s *Shard) RangeSlots(slots *[keyslot.Slots]bool, fn func(key []byte, v *Value) bool) {
	if x := s.t.sx; x != nil {
		for slot := range slots {
			if !slots[slot] {
				continue
			}
			for j := x.heads.get(uint16(slot)); j != 0; j = x.link(j - 1).next {
				if !fn(s.t.key(s.t.at(j-1)), s.load(j-1)) {
					return
				}
			}
		}
		return
	}
	for j := uint32(0); j < s.t.next; j++ {
		e := s.t.at(j)
		if e.meta == 0 {
			continue
		}
		if k := s.t.key(e); slots[keyslot.Of(k)] {
			if !fn(k, s.load(j)) {
				return
			}
		}
	}
}

package cluster

import (
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/keyspace"
)

// NaiveStore is a stand-in SlotStore over a Keyspace until the keyspace
// offers the slot API itself: every call scans all of a database's keys,
// one shard lock at a time. Deletes go through Shard.Delete, so the
// keyspace journal (persistence, replication) sees each one. On a replica
// keyspace DeleteSlot deletes nothing: its primary's deletions arrive
// through replication.
type NaiveStore struct {
	KS *keyspace.Keyspace
	// Now returns the time in ms since the Unix epoch (expiry checks).
	Now func() int64
}

// CountKeysInSlot counts the live keys of slot in database db.
func (n NaiveStore) CountKeysInSlot(db int, slot uint16) int {
	c := 0
	n.scan(db, func(sh *keyspace.Shard, now int64) {
		sh.Range(now, func(key string, _ *keyspace.Value) bool {
			if keyslot.Of([]byte(key)) == slot {
				c++
			}
			return true
		})
	})
	return c
}

// KeysInSlot returns up to max live keys of slot in database db.
func (n NaiveStore) KeysInSlot(db int, slot uint16, max int) [][]byte {
	var out [][]byte
	n.scan(db, func(sh *keyspace.Shard, now int64) {
		sh.Range(now, func(key string, _ *keyspace.Value) bool {
			if len(out) >= max {
				return false
			}
			if keyslot.Of([]byte(key)) == slot {
				out = append(out, []byte(key))
			}
			return true
		})
	})
	return out
}

// DeleteSlot deletes every key of slot in database db (journaled) and
// returns how many it deleted.
func (n NaiveStore) DeleteSlot(db int, slot uint16) int {
	var set [keyslot.Slots]bool
	set[slot] = true
	return n.DeleteSlots(db, &set)
}

// DeleteSlots deletes every key of the slots set in database db, in one
// pass, and returns how many it deleted.
func (n NaiveStore) DeleteSlots(db int, slots *[keyslot.Slots]bool) int {
	if n.KS.Replica() {
		return 0
	}
	c := 0
	n.scan(db, func(sh *keyspace.Shard, now int64) {
		var keys []string
		sh.Range(now, func(key string, _ *keyspace.Value) bool {
			if slots[keyslot.Of([]byte(key))] {
				keys = append(keys, key)
			}
			return true
		})
		for _, k := range keys {
			sh.Delete([]byte(k), now)
			c++
		}
	})
	return c
}

// scan calls fn for each shard of db with its lock held.
func (n NaiveStore) scan(db int, fn func(sh *keyspace.Shard, now int64)) {
	d := n.KS.DB(db)
	for i := 0; i < d.NumShards(); i++ {
		sh := d.ShardAt(i)
		sh.Lock()
		fn(sh, n.Now())
		sh.Unlock()
	}
}

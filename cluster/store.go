package cluster

import (
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/keyspace"
)

// KeyspaceStore is the SlotStore of a keyspace with its slot index
// (keyspace.Config.SlotIndex): counting and listing a slot's keys cost
// only those keys. A replica deletes nothing itself: its primary's
// deletions arrive through replication.
type KeyspaceStore struct{ *keyspace.Keyspace }

// DeleteSlot implements SlotStore.
func (k KeyspaceStore) DeleteSlot(db int, slot uint16) int {
	if k.Replica() {
		return 0
	}
	return k.Keyspace.DeleteSlot(db, slot)
}

// DeleteSlots deletes the keys of every slot set in one pass.
func (k KeyspaceStore) DeleteSlots(db int, slots *[keyslot.Slots]bool) int {
	if k.Replica() {
		return 0
	}
	return k.Keyspace.DeleteSlots(db, slots)
}

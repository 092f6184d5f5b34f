// Package keyspace is cellserver's in-memory store: numbered databases, each a
// sharded hash table from key bytes to a typed Value with an absolute expiry.
//
// # Model
//
// A Keyspace holds Databases (16 by default, as Redis). A DB splits its keys
// over a power-of-two number of shards chosen by a seeded hash of the key; each
// shard is a compact open-addressing table (table.go: 56-byte entries without
// pointers, holding a key of up to 23 bytes themselves, longer keys packed in
// pages; about 64 bytes per limiter key plus the key, EntryOverhead) guarded
// by its own mutex. Callers take the shard lock for a whole read
// -> decide -> write sequence (Shard.Lock, then Lookup, then Replace or
// Changed, then Unlock), so a limiter decision is never split by another
// client.
//
// Lookup and Peek return a pointer to the shard's view of one entry, a copy
// of its fields: it is valid until the next Lookup, Peek or Range on the
// same shard or the Unlock (which drops its object, so that a view keeps
// no removed value alive past maxmemory), and a change to it is kept only
// through Changed or Replace.
//
// Every Value carries its Kind (a plain string, a CL.THROTTLE TAT, ...), its
// scalar state and its absolute expiry in milliseconds since the Unix epoch
// (0 means none). Expiry is lazy: Lookup reports an expired key as absent and
// removes it. Sweep removes expired keys that nobody reads, a bounded number
// per shard per call, so idle keys do not pin memory.
//
// Each entry also records its accesses (Lookup and Peek; Inspect reads
// without counting one) in 24 bits beside its Kind: the last access time,
// or under AllKeysLFU Redis's logarithmic access counter (access.go). The
// eviction policies and OBJECT IDLETIME and FREQ read them; they cost no
// byte per key.
//
// # Hash slots
//
// With Config.SlotIndex (cluster mode) each database also indexes its keys
// by Redis Cluster hash slot (keyslot.Of), so that CountKeysInSlot is one
// atomic load and KeysInSlot and DeleteSlot(s) touch only the slot's keys
// (slots.go). Without it those methods scan.
//
// # Journal
//
// Everything that follows the keyspace's changes (WATCH and client-side
// caching, persistence's write queue, the replication backlog) is told
// about each one through a Journal, called with the changed key's shard
// lock held right after the change (journal.go). A keyspace has one
// Journal: its owner composes the consumers with Chain, which tells them
// in turn, and sets the chain with SetJournal. server.New does so in one
// statement, where the chain's order and its reasons are written. Restore
// and the other loading methods tell no journal.
//
// # Concurrency
//
// Keyspace, DB and Shard are safe for concurrent use as long as the shard
// methods documented "s.mu must be held" are called between Lock and Unlock.
// Locks over several shards must be taken in increasing (database, shard
// index) order (see LockAll), which rules out deadlocks.
//
// # Time
//
// The keyspace never reads a clock: every call that cares about expiry takes
// now, in milliseconds since the Unix epoch.
package keyspace

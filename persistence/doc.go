// Package persistence keeps cellserver's keyspace on disk.
//
// The contract is write-through: every change to a key becomes an Op, and
// Ops are applied to a Store in batches (Store.Write), each batch atomically
// and in order. At start the keyspace is rebuilt from Store.Load. There is
// no snapshot at stop: what the store holds after the last Write is the
// state.
//
// A Store is a small interface with three implementations: Memory, the
// reference used by tests; pebblestore.Store (package
// persistence/pebblestore), built on github.com/cockroachdb/pebble; and
// changelog.Store (package persistence/changelog), what cmd/cellserver
// runs: a change log of its own in front of pebblestore, which appends
// every batch and writes to pebble only checkpoints of the keys changed,
// read from the keyspace (a Checkpointer; keyspace.Config.TrackChanges).
// The Writer hands it each change already encoded as a log record (a
// RecordStore). All three pass one conformance suite
// (internal/storetest). This package does not import pebble: a program
// links it only if it imports pebblestore, and a server is given its store
// through an Opener (server.Config.OpenStore).
//
// Durability is chosen per batch: Write(ops, false) leaves the batch in the
// OS page cache when Write returns (pebble.NoSync: it survives a crash of
// the process but not of the machine); Write(ops, true) returns once it is
// on disk (pebble.Sync: the WAL is fsynced before Write returns).
// Store.Sync makes every earlier NoSync batch durable at once, which lets a
// writer batch many changes and pay for one fsync per interval.
//
// Values are stored in a versioned binary encoding (EncodeValue,
// DecodeValue; the layout is described in codec.go). Keys on disk are the
// database number and the key's hash slot (keyslot.Of), each as 2
// big-endian bytes, followed by the raw key, so that pebble's byte order is
// (db, slot, key) order, FLUSHDB and FLUSHALL are range deletions and one
// slot's records are one range (store format 2; pebblestore/pebble.go
// describes the layout, and how a directory of format 1 is migrated when
// opened).
//
// Info reports the Writer, the store and the startup load as the lines of
// INFO persistence.
package persistence

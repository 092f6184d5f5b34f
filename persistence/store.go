package persistence

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cellserver/cellserver/keyspace"
)

// OpKind says what an Op does.
type OpKind uint8

// The kinds of Op.
const (
	// OpPut stores Op.Value under (Op.DB, Op.Key), replacing any value.
	OpPut OpKind = iota + 1
	// OpDelete removes (Op.DB, Op.Key); removing a missing key is not an
	// error.
	OpDelete
	// OpDeleteDB removes every key of Op.DB (FLUSHDB). Op.Key is ignored.
	OpDeleteDB
	// OpDeleteAll removes every key of every database (FLUSHALL). Op.DB and
	// Op.Key are ignored.
	OpDeleteAll
)

// String returns the kind's name.
func (k OpKind) String() string {
	switch k {
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpDeleteDB:
		return "deletedb"
	case OpDeleteAll:
		return "deleteall"
	}
	return fmt.Sprintf("OpKind(%d)", uint8(k))
}

// MaxDB is the largest database number a Store accepts: the number is
// stored in 2 bytes, as keyspace allows at most 65536 databases.
const MaxDB = 1<<16 - 1

// Op is one change: OpPut stores Value (an EncodeValue result) under
// (DB, Key); OpDelete removes (DB, Key); OpDeleteDB removes every key of DB
// (FLUSHDB); OpDeleteAll removes everything (FLUSHALL). Write does not keep
// Key or Value after it returns, so the caller may reuse their memory.
type Op struct {
	Kind  OpKind
	DB    int
	Key   []byte
	Value []byte
}

// Store is durable key/value state. Implementations are safe for concurrent
// use. After Close every method but Close returns ErrStoreClosed.
type Store interface {
	// Write applies ops in order as one atomic batch: after a crash either
	// all of them or none are found. With sync, the batch is durable when
	// Write returns. Invalid ops (unknown kind, DB outside 0..MaxDB) make
	// Write fail before anything is applied.
	Write(ops []Op, sync bool) error
	// Sync makes every completed Write durable.
	Sync() error
	// Load calls fn for every stored record, in (db, slot, key) order
	// (slot: keyslot.Of(key), as the disk layout files them), from a
	// consistent snapshot; fn must copy key/value to keep them, and must
	// not call the Store's methods. An error from fn stops Load and is
	// returned.
	Load(fn func(db int, key, value []byte) error) error
	// DiskUsage returns the bytes the store uses on disk (0 for the memory
	// store).
	DiskUsage() int64
	// Close releases the store. Closing a closed store returns nil.
	Close() error
}

// The errors a Store returns; test them with errors.Is.
var (
	// ErrLocked: a store found its directory open, by another process or
	// by this one.
	ErrLocked = errors.New("persistence: data directory is in use by another process")
	// ErrCorrupt: stored data cannot be read (a damaged value, manifest or
	// table).
	ErrCorrupt = errors.New("persistence: corrupt data")
	// ErrFormat: the data directory or a value was written in a format
	// version this build does not know.
	ErrFormat = errors.New("persistence: unknown data format version")
	// ErrStoreClosed: the Store was used after Close.
	ErrStoreClosed = errors.New("persistence: store is closed")
)

// CheckOps reports the first invalid op, so that Write can refuse a batch
// before applying any of it.
func CheckOps(ops []Op) error {
	for i, op := range ops {
		switch op.Kind {
		case OpPut, OpDelete, OpDeleteDB:
			if op.DB < 0 || op.DB > MaxDB {
				return fmt.Errorf("persistence: op %d (%s): db %d outside 0..%d", i, op.Kind, op.DB, MaxDB)
			}
		case OpDeleteAll:
		default:
			return fmt.Errorf("persistence: op %d: unknown kind %d", i, uint8(op.Kind))
		}
	}
	return nil
}

// OpenOptions are the settings a server hands an Opener.
type OpenOptions struct {
	// Logger receives the store's messages; nil means slog.Default().
	Logger *slog.Logger
	// LoadDamagedWAL opens a directory whose newest write-ahead log is
	// damaged before its end, dropping the changes after the damage (see
	// WALDamage). False refuses such a directory with ErrCorrupt.
	LoadDamagedWAL bool
}

// An Opener opens (creating it if needed) the Store kept in directory dir.
// pebblestore.OpenStore is the one cmd/cellserver uses.
type Opener func(dir string, opts OpenOptions) (Store, error)

// A Checkpointer is a Store that writes checkpoints of the keys changed in
// the keyspace, read from the keyspace itself (changelog.Store): the
// keyspace in front of it must have keyspace.Config.TrackChanges on, and be
// attached once it holds what the store holds (after Load, before
// serving).
type Checkpointer interface {
	Store
	Attach(ks *keyspace.Keyspace) error
	CheckpointStats() CheckpointStats
}

// CheckpointStats are a Checkpointer's figures (INFO persistence, metrics).
type CheckpointStats struct {
	Checkpoints     int64         // completed checkpoints
	Failed          int64         // checkpoints that failed
	LastDuration    time.Duration // how long the last completed one took
	LastKeys        int           // the keys it wrote
	LogBytes        int64         // bytes logged since the last checkpoint began
	CheckpointBytes int64         // the log size that starts a checkpoint
	Err             error         // the last checkpoint's error, nil after a success
	LastOK          time.Time     // when the last checkpoint succeeded (zero: none yet)
}

// A Saver is a Store that writes a checkpoint on demand (SAVE, BGSAVE,
// SHUTDOWN: changelog.Store) and can be closed without its last one
// (SHUTDOWN NOSAVE).
type Saver interface {
	Checkpoint() error
	SkipFinalCheckpoint()
}

// A Flusher is a Store that can write what it buffers in memory to its
// tables (pebblestore.Store), so that its next open has no log to replay.
type Flusher interface {
	Flush() error
}

// An InfoReporter is a Store with lines of its own for INFO persistence.
type InfoReporter interface {
	Info() []string
}

// A Replayer is a Store that keeps a log of changes beside its base
// (changelog.Store). Load into a keyspace that tracks changes reads the
// base with LoadBase and applies the log with Replay (each change as a
// tracked change of the keyspace), instead of having the store write the
// log into its base first: the next checkpoint stores each replayed key
// once.
type Replayer interface {
	LoadBase(fn func(db int, key, value []byte) error) error
	Replay(fn func(op Op) error) error
}

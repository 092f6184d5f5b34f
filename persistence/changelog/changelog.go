// Package changelog is cellserver's write path to disk: a Store in front
// of another one (pebblestore) that appends every change to a log of its
// own, and writes only checkpoints to the wrapped store.
//
//   - Write appends a batch's changes to the current log segment with one
//     write(2) (each record: length, CRC32C, kind, db, key, value) and,
//     when asked (fsync always), fdatasyncs it before returning. Sync
//     fdatasyncs the segment (fsync everysec: once a second).
//   - A checkpoint starts once the log written since the previous one
//     passes Options.CheckpointBytes (and at Close). It rotates to a new
//     segment, then writes to the wrapped store the keys changed since the
//     previous checkpoint, read from the keyspace (Attach;
//     keyspace.CollectChanges) with their values as they are now, syncs
//     the wrapped store and deletes the segments before the new one. A key
//     written a thousand times between two checkpoints is written to the
//     wrapped store once, so the store's cost follows the number of keys
//     changed, not the number of changes.
//   - Recovery: Open replays the remaining segments, in order, into the
//     wrapped store, syncs it and deletes them. This is exact because a
//     change is a key's whole new value (or its removal): replaying a
//     change the checkpoint already holds, or one older than the value the
//     checkpoint took, ends at the key's last logged state, in the order
//     the changes happened. A torn last record (a crash in the middle of a
//     write) is the end of the log; damage followed by intact records is
//     refused with ErrCorrupt unless OpenOptions.LoadDamagedWAL.
//
// Without a keyspace attached (tests, a store used only to load), a
// checkpoint replays the rotated segments' records into the wrapped store
// instead.
//
// Why a checkpoint may read values newer than the log position it starts
// from: every change is marked in the keyspace under the shard lock, before
// the Writer hands it to Write. A change whose record lies in a segment
// the checkpoint deletes was made before the rotation, so before the
// collection; it is either collected now (its key is still marked) or was
// collected by an earlier checkpoint after it was made. Either way the
// wrapped store holds that key at a state at least as new. Changes made
// after the rotation are in the kept segments.
package changelog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
)

// Subdir is the change log's directory inside the data directory.
const Subdir = "changelog"

// segMagic starts every segment file.
var segMagic = []byte("CSCLOG01")

const (
	recHeader  = 8 // uint32 payload length, uint32 CRC32C of the payload (little-endian)
	minPayload = 4 // kind, db (2 bytes), key length (uvarint, >= 1 byte)
	// maxPayload bounds a record: a whole value, which for a stream
	// (logged whole when it is new to its key: made, renamed, copied)
	// can be large; streams are capped below it (stream.MaxSize).
	maxPayload = 1 << 30
	segSuffix  = ".clog"
	// chunkBytes: a checkpoint hands the wrapped store its changes in
	// batches of about this many bytes, so that no single batch holds the
	// CPU long (the event loops share it) or holds much memory.
	chunkBytes = 128 << 10
	// retryEvery: after a failed checkpoint, the next attempt.
	retryEvery = time.Second
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// DefaultCheckpointBytes is the default Options.CheckpointBytes.
const DefaultCheckpointBytes = 64 << 20

// Options tune a Store; zero fields take the defaults.
type Options struct {
	// CheckpointBytes: a checkpoint starts once the log written since the
	// previous one takes more bytes (DefaultCheckpointBytes). The log on
	// disk, and the changes replayed after a crash, stay about this size
	// (twice it while a checkpoint runs).
	CheckpointBytes int64
	// CheckpointInterval, when positive, also starts a checkpoint this
	// long after the previous one if anything was logged since (tests use
	// it to land crashes in and around checkpoints). Default: none.
	CheckpointInterval time.Duration
}

func (o Options) withDefaults() Options {
	if o.CheckpointBytes <= 0 {
		o.CheckpointBytes = DefaultCheckpointBytes
	}
	return o
}

// Opener returns an Opener that opens inner's store in the data directory
// and a change log in front of it.
func Opener(inner persistence.Opener, o Options) persistence.Opener {
	return func(dir string, opts persistence.OpenOptions) (persistence.Store, error) {
		return Open(dir, inner, opts, o)
	}
}

// Store is the change log in front of a wrapped Store.
type Store struct {
	inner persistence.Store
	dir   string // the segments' directory
	log   *slog.Logger
	o     Options

	noFinal atomic.Bool // Close makes no last checkpoint (SkipFinalCheckpoint)

	mu      sync.Mutex // guards the fields below
	f       *os.File
	seg     uint64
	off     int64  // the current segment's size
	logged  int64  // bytes of records written since the last rotation
	buf     []byte // Write's encoding buffer
	suspect bool   // an fdatasync failed: only a checkpoint makes the log's state durable again
	closed  bool
	kicked  bool // the loop was told the log passed CheckpointBytes

	rotMu sync.Mutex // held by Sync and by a rotation: Sync covers every completed Write

	ckMu sync.Mutex // one checkpoint at a time; guards the fields below
	src  *keyspace.Keyspace
	// preopen: the segments found at Open, not yet replayed (by Replay,
	// or by a checkpoint without a keyspace); loadDamaged is
	// OpenOptions.LoadDamagedWAL, for that replay.
	preopen     []uint64
	loadDamaged bool
	col         collector
	ckErr       error     // the last checkpoint's error; nil after a success
	lastCk      time.Time // when the last checkpoint ended (or the Store opened)

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	stats struct {
		sync.Mutex
		checkpoints, failed, replayed int64
		lastOK                        time.Time // when the last checkpoint succeeded (LASTSAVE)
		lastKeys                      int
		lastDur                       time.Duration
		damage                        persistence.WALDamage
	}
}

// Open opens inner's store in dir (which locks the directory), replays
// the change log found in dir/changelog into it and starts a new one.
func Open(dir string, inner persistence.Opener, opts persistence.OpenOptions, o Options) (_ *Store, err error) {
	st, err := inner(dir, opts)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			st.Close()
		}
	}()
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Store{inner: st, dir: filepath.Join(dir, Subdir), log: log, o: o.withDefaults(), lastCk: time.Now(),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.col.s = s
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("persistence: change log directory: %w", err)
	}
	segs, err := segments(s.dir)
	if err != nil {
		return nil, err
	}
	next := uint64(1)
	if len(segs) > 0 {
		// Replayed by Replay (into the keyspace, at the startup load) or
		// by the first checkpoint (into the wrapped store).
		s.preopen, s.loadDamaged = segs, opts.LoadDamagedWAL
		next = segs[len(segs)-1] + 1
	}
	if err := s.newSegment(next); err != nil {
		return nil, err
	}
	go s.loop()
	return s, nil
}

// Attach makes checkpoints read the changed keys from ks, which must have
// keyspace.Config.TrackChanges on and hold what the store holds (call it
// after the startup load, before serving). Without it, a checkpoint
// replays the logged records instead.
//
// Everything logged before must be in the keyspace's tracking (see
// persistence.Load: it applies the log found at Open with Replay and
// notes the expired records it drops): the first checkpoint deletes those
// segments. If the log found at Open was not replayed, Attach replays it
// into the wrapped store first. A checkpoint then starts at once when that
// log was replayed into the keyspace, so that it does not stay on disk
// beside the new one.
func (s *Store) Attach(ks *keyspace.Keyspace) error {
	s.ckMu.Lock()
	pending := len(s.preopen) > 0
	s.ckMu.Unlock()
	if pending {
		if err := s.Checkpoint(); err != nil {
			return err
		}
	}
	s.ckMu.Lock()
	s.src = ks
	s.ckMu.Unlock()
	s.stats.Lock()
	replayed := s.stats.replayed > 0
	s.stats.Unlock()
	if replayed {
		s.kickCheckpointer()
	}
	return nil
}

// kickCheckpointer asks the checkpointer for a checkpoint, unless one is
// asked for already.
func (s *Store) kickCheckpointer() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// LoadBase implements persistence.Replayer: the wrapped store's records,
// without the log found at Open (Replay applies it).
func (s *Store) LoadBase(fn func(db int, key, value []byte) error) error {
	return s.inner.Load(fn)
}

// Replay implements persistence.Replayer: it calls fn for every change of
// the log found at Open, in order (a torn last record is the end of the
// log; damage is refused or, with LoadDamagedWAL, cut, as at Open).
// Those segments stay until the first checkpoint from the keyspace that
// fn applied them to. Op's key and value are valid only during the call.
func (s *Store) Replay(fn func(op persistence.Op) error) error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	if len(s.preopen) == 0 {
		return nil
	}
	start := time.Now()
	total, err := s.scan(s.preopen, s.loadDamaged, fn)
	if err != nil {
		return err
	}
	s.log.Info("persistence: replayed change log", "segments", len(s.preopen), "changes", total, "duration", time.Since(start).String())
	s.stats.Lock()
	s.stats.replayed = int64(total)
	s.stats.Unlock()
	s.preopen = nil
	return nil
}

// TracksChanges is true: a keyspace in front of this store should keep
// keyspace.Config.TrackChanges on and be Attach'ed.
func (s *Store) TracksChanges() bool { return true }

// scan calls fn for every record of segs (segment numbers, in order). A
// torn last record (a crash in the middle of a write) ends the log and is
// cut off the file, so that the segment reads whole once a later one
// follows; damage followed by intact records fails with ErrCorrupt, or
// with loadDamaged is logged, cut off with the segments after it, and
// counted (WALDamage). It returns the changes read.
func (s *Store) scan(segs []uint64, loadDamaged bool, fn func(op persistence.Op) error) (int, error) {
	total := 0
	for i, n := range segs {
		name := segName(s.dir, n)
		data, err := os.ReadFile(name)
		if err != nil {
			return 0, fmt.Errorf("persistence: change log: %w", err)
		}
		end, perr := Parse(name, data, func(op persistence.Op) error {
			total++
			return fn(op)
		})
		var dmg *Damage
		lastSeg := i == len(segs)-1
		switch {
		case errors.As(perr, &dmg):
			if !loadDamaged {
				return 0, fmt.Errorf("%w: %s (start with --load-damaged-wal yes to load what precedes the damage and drop the rest)", persistence.ErrCorrupt, dmg)
			}
			s.log.Warn("persistence: loading a damaged change log: the changes after the damage are dropped",
				"file", name, "offset", dmg.Offset, "reason", dmg.Reason, "dropped_records", dmg.Dropped, "dropped_segments", len(segs)-1-i)
			s.stats.Lock()
			s.stats.damage = persistence.WALDamage{File: name, Offset: dmg.Offset, Reason: dmg.Reason,
				DroppedBytes: int64(len(data)) - dmg.Offset, DroppedRecords: int64(dmg.Dropped), DroppedChanges: int64(dmg.Dropped)}
			s.stats.Unlock()
			for _, later := range segs[i+1:] {
				if err := os.Remove(segName(s.dir, later)); err != nil && !errors.Is(err, fs.ErrNotExist) {
					return 0, fmt.Errorf("persistence: change log: %w", err)
				}
			}
			return total, cut(name, dmg.Offset, s.dir)
		case perr != nil:
			return 0, perr
		case end < int64(len(data)) && !lastSeg:
			// A torn tail before a later segment: a rotation syncs a
			// segment before the next one is written, so this is damage.
			return 0, fmt.Errorf("%w: change log %s ends in a torn record at offset %d, but later segments follow", persistence.ErrCorrupt, name, end)
		case end < int64(len(data)):
			s.log.Info("persistence: change log ends in a torn record (a crash during a write); it is the end of the log", "file", name, "offset", end)
			return total, cut(name, end, s.dir)
		}
	}
	return total, nil
}

// cut truncates a segment at off, durably.
func cut(name string, off int64, dir string) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("persistence: change log: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(max(off, int64(len(segMagic)))); err != nil {
		return fmt.Errorf("persistence: change log: %w", err)
	}
	if err := syncData(f); err != nil {
		return fmt.Errorf("persistence: change log sync: %w", err)
	}
	return syncDir(dir)
}

// replay applies segs to the wrapped store (scan), syncs it and deletes
// the segment files; it returns the changes applied.
func (s *Store) replay(segs []uint64, loadDamaged bool) (int, error) {
	var batch []persistence.Op
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.inner.Write(batch, false)
		batch = batch[:0]
		return err
	}
	// deltas holds the keys whose log holds a delta (a stream's change),
	// from the first one on: a delta applies to the value as it stands,
	// so such a key's value is read from the wrapped store once (after
	// the batch before it is written), kept here while the rest of the
	// log is applied to it, and written whole at the end.
	deltas := make(map[dbKey]*keyspace.Value)
	total, err := s.scan(segs, loadDamaged, func(op persistence.Op) error {
		switch op.Kind {
		case persistence.OpPut, persistence.OpDelete:
			dk := dbKey{op.DB, string(op.Key)}
			cur, held := deltas[dk]
			if !held && op.Kind == persistence.OpPut && persistence.IsDelta(op.Value) {
				if err := flush(); err != nil {
					return err
				}
				v, err := s.innerValue(op.DB, op.Key)
				if err != nil {
					return err
				}
				cur, held = v, true
			}
			if held {
				nv, err := replayHeld(cur, op)
				if err != nil {
					return fmt.Errorf("change log: key %q in database %d: %w", op.Key, op.DB, err)
				}
				deltas[dk] = nv
				return nil
			}
		case persistence.OpDeleteDB:
			for dk := range deltas {
				if dk.db == op.DB {
					deltas[dk] = nil
				}
			}
		case persistence.OpDeleteAll:
			for dk := range deltas {
				deltas[dk] = nil
			}
		}
		batch = append(batch, op)
		if len(batch) >= 4096 {
			return flush()
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for dk, v := range deltas {
		op := persistence.Op{Kind: persistence.OpDelete, DB: dk.db, Key: []byte(dk.key)}
		if v != nil {
			op.Kind, op.Value = persistence.OpPut, persistence.EncodeValue(nil, *v)
		}
		batch = append(batch, op)
		if len(batch) >= 4096 {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := flush(); err != nil {
		return 0, err
	}
	if err := s.inner.Sync(); err != nil {
		return 0, err
	}
	for _, n := range segs {
		if err := os.Remove(segName(s.dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, fmt.Errorf("persistence: change log: %w", err)
		}
	}
	return total, syncDir(s.dir)
}

// dbKey names a key of a database.
type dbKey struct {
	db  int
	key string
}

// innerValue reads one key's value from the wrapped store (nil: absent),
// with a scan of the store: replay calls it once per key whose log holds
// a delta, which only streams write.
func (s *Store) innerValue(db int, key []byte) (*keyspace.Value, error) {
	var found *keyspace.Value
	err := s.inner.Load(func(d int, k, value []byte) error {
		if d != db || !bytes.Equal(k, key) {
			return nil
		}
		v, err := persistence.DecodeValue(value)
		if err != nil {
			return fmt.Errorf("key %q in database %d: %w", k, d, err)
		}
		found = &v
		return nil
	})
	return found, err
}

// replayHeld applies op, a put or a removal, to a value replay holds (nil:
// absent). A delta the value already holds, or that starts from another
// incarnation of the key (a later record makes the key whole again), is
// skipped.
func replayHeld(cur *keyspace.Value, op persistence.Op) (*keyspace.Value, error) {
	if op.Kind == persistence.OpDelete {
		return nil, nil
	}
	v, applied, err := persistence.ApplyChange(cur, op.Value)
	switch {
	case errors.Is(err, persistence.ErrNotBase):
		return cur, nil
	case err != nil:
		return nil, err
	case !applied:
		return cur, nil
	}
	if d, ok := v.Obj.(keyspace.DeltaValue); ok {
		d.ResetDelta() // what it records here is written whole at the end
	}
	return &v, nil
}

// Write implements persistence.Store: one write(2) of the batch's records
// to the current segment, fdatasynced with sync.
func (s *Store) Write(ops []persistence.Op, sync bool) error {
	if err := persistence.CheckOps(ops); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return persistence.ErrStoreClosed
	}
	buf := s.buf[:0]
	for _, op := range ops {
		buf = appendRecord(buf, op)
	}
	if cap(buf) <= 8<<20 {
		s.buf = buf
	} else {
		s.buf = nil
	}
	return s.writeLocked(buf, sync)
}

// AppendRecord implements persistence.RecordStore: it appends the record
// of one change to dst (v nil for a removal or a flush).
func (s *Store) AppendRecord(dst []byte, kind persistence.OpKind, db int, key []byte, v *keyspace.Value) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0, byte(kind), byte(db>>8), byte(db))
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	if v != nil {
		dst = persistence.EncodeChange(dst, *v)
	}
	return sealRecord(dst, start)
}

// WriteRecords implements persistence.RecordStore: Write of records that
// AppendRecord made.
func (s *Store) WriteRecords(recs []byte, n int, sync bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return persistence.ErrStoreClosed
	}
	return s.writeLocked(recs, sync)
}

// writeLocked writes buf (whole records) to the current segment, with
// s.mu held; it unlocks it.
func (s *Store) writeLocked(buf []byte, sync bool) error {
	if len(buf) > 0 {
		if _, err := s.f.Write(buf); err != nil {
			// Cut what part of the batch reached the file, so that the
			// retry's records follow the last intact one.
			if terr := s.f.Truncate(s.off); terr != nil {
				err = errors.Join(err, terr)
			}
			_, _ = s.f.Seek(s.off, io.SeekStart)
			s.mu.Unlock()
			return fmt.Errorf("persistence: change log write: %w", err)
		}
		s.off += int64(len(buf))
		s.logged += int64(len(buf))
	}
	if sync {
		if err := syncData(s.f); err != nil {
			// The records are in the file; a retry appends them again,
			// which replays to the same state.
			s.suspect = true
			s.mu.Unlock()
			return fmt.Errorf("persistence: change log sync: %w", err)
		}
	}
	kick := s.logged >= s.o.CheckpointBytes && !s.kicked
	if kick {
		s.kicked = true
	}
	s.mu.Unlock()
	if kick {
		s.kickCheckpointer()
	}
	return nil
}

// Sync implements persistence.Store: it fdatasyncs the current segment
// (the rotated ones were synced by their rotation). After a failed
// fdatasync the kernel may have dropped pages it could not write, and a
// later one that succeeds says nothing about them: then Sync runs a
// checkpoint instead, which stores the keyspace's state in the wrapped
// store and drops the suspect segments.
func (s *Store) Sync() error {
	s.mu.Lock()
	suspect, closed := s.suspect, s.closed
	s.mu.Unlock()
	if closed {
		return persistence.ErrStoreClosed
	}
	if suspect {
		s.ckMu.Lock()
		attached := s.src != nil
		s.ckMu.Unlock()
		if attached {
			return s.Checkpoint()
		}
	}
	s.rotMu.Lock()
	defer s.rotMu.Unlock()
	s.mu.Lock()
	f := s.f
	s.mu.Unlock()
	if err := syncData(f); err != nil {
		s.mu.Lock()
		s.suspect = true
		s.mu.Unlock()
		return fmt.Errorf("persistence: change log sync: %w", err)
	}
	return nil
}

// loop runs the checkpoints: when Write says the log passed
// CheckpointBytes, every CheckpointInterval if set, and every retryEvery
// after a failure.
func (s *Store) loop() {
	defer close(s.done)
	tick := retryEvery
	if s.o.CheckpointInterval > 0 {
		tick = min(tick, s.o.CheckpointInterval)
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if !s.due() {
				continue
			}
		case <-s.kick:
		}
		if err := s.Checkpoint(); err != nil {
			s.log.Error("persistence: checkpoint failed; the change log is kept, and the checkpoint tried again", "err", err, "retry_in", retryEvery.String())
		}
	}
}

// due reports whether the ticker should start a checkpoint.
func (s *Store) due() bool {
	s.mu.Lock()
	logged, kicked := s.logged, s.kicked
	s.mu.Unlock()
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	switch {
	case s.ckErr != nil || len(s.col.ops) > 0:
		return time.Since(s.lastCk) >= retryEvery
	case kicked:
		return true
	case s.o.CheckpointInterval > 0 && logged > 0:
		return time.Since(s.lastCk) >= s.o.CheckpointInterval
	}
	return false
}

// Checkpoint rotates to a new segment, writes the changes since the
// previous checkpoint to the wrapped store (from the attached keyspace,
// or else from the rotated segments), syncs it and deletes the segments
// before the new one. If it fails, the segments stay, and so does what it
// collected from the keyspace but could not write: the next checkpoint
// writes that first.
func (s *Store) Checkpoint() (err error) {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	defer func() {
		s.ckErr, s.lastCk = err, time.Now()
		s.stats.Lock()
		if err != nil {
			s.stats.failed++
		} else {
			s.stats.lastOK = s.lastCk
		}
		s.stats.Unlock()
	}()
	start := time.Now()
	old, err := s.rotate()
	if err != nil {
		return err
	}
	if len(old) == 0 && s.src == nil {
		return nil
	}
	keys := 0
	if s.src == nil {
		// No keyspace: the rotated segments' records are the changes.
		// replay applies them, syncs the wrapped store and deletes them.
		if keys, err = s.replay(old, s.loadDamaged); err != nil {
			return err
		}
		s.preopen = nil
	} else {
		// What a failed checkpoint collected goes first: it is older.
		if err := s.col.write(); err != nil {
			return err
		}
		s.col.keys = 0
		s.src.CollectChanges(&s.col)
		if err := s.col.write(); err != nil {
			return err
		}
		keys = s.col.keys
		if keys == 0 && len(old) == 0 {
			return nil // nothing logged or changed since the last one
		}
		if err := s.inner.Sync(); err != nil {
			return err
		}
		for _, n := range old {
			if err := os.Remove(segName(s.dir, n)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("persistence: change log: %w", err)
			}
		}
		if err := syncDir(s.dir); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.suspect = false
	s.mu.Unlock()
	s.stats.Lock()
	s.stats.checkpoints++
	s.stats.lastKeys, s.stats.lastDur = keys, time.Since(start)
	s.stats.Unlock()
	return nil
}

// rotate starts a new segment, unless nothing was written since the last
// one, and returns the segments before the current one (those the
// checkpoint covers). The old segment is fdatasynced before any write
// reaches the new one, so a torn record can only end the newest segment.
// A failed fdatasync leaves the segment current.
func (s *Store) rotate() ([]uint64, error) {
	s.rotMu.Lock()
	defer s.rotMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, persistence.ErrStoreClosed
	}
	f, empty := s.f, s.off <= int64(len(segMagic))
	s.mu.Unlock()
	if !empty {
		// Most of the segment is synced without blocking Write; the rest
		// under s.mu, with the swap.
		if err := syncData(f); err != nil {
			return nil, fmt.Errorf("persistence: change log sync: %w", err)
		}
		s.mu.Lock()
		if err := syncData(s.f); err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("persistence: change log sync: %w", err)
		}
		old, oldSeg := s.f, s.seg
		if err := s.newSegment(oldSeg + 1); err != nil {
			s.mu.Unlock()
			return nil, err
		}
		s.logged, s.kicked = 0, false
		s.mu.Unlock()
		old.Close()
		if err := syncDir(s.dir); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	cur := s.seg
	s.mu.Unlock()
	all, err := segments(s.dir)
	if err != nil {
		return nil, err
	}
	var old []uint64
	for _, n := range all {
		if n < cur {
			old = append(old, n)
		}
	}
	return old, nil
}

// collector is the keyspace.ChangeSink of a checkpoint: it encodes the
// changes into ops and hands them to the wrapped store about every
// chunkBytes. Once a write fails it keeps the rest in memory (held for
// the next checkpoint, which writes them first).
type collector struct {
	s     *Store
	ops   []persistence.Op
	arena []byte
	keys  int
	err   error
}

func (c *collector) FlushedDB(db int) {
	c.ops = append(c.ops, persistence.Op{Kind: persistence.OpDeleteDB, DB: db})
	c.keys++
}

func (c *collector) Removed(db int, key []byte) {
	start := len(c.arena)
	c.arena = append(c.arena, key...)
	c.ops = append(c.ops, persistence.Op{Kind: persistence.OpDelete, DB: db, Key: c.arena[start:len(c.arena):len(c.arena)]})
	c.keys++
}

func (c *collector) Changed(db int, key []byte, v *keyspace.Value) {
	start := len(c.arena)
	c.arena = append(c.arena, key...)
	k := c.arena[start:len(c.arena):len(c.arena)]
	vs := len(c.arena)
	c.arena = persistence.EncodeValue(c.arena, *v)
	c.ops = append(c.ops, persistence.Op{Kind: persistence.OpPut, DB: db, Key: k, Value: c.arena[vs:len(c.arena):len(c.arena)]})
	c.keys++
}

func (c *collector) ShardDone() {
	if c.err == nil && len(c.arena)+len(c.ops)*16 >= chunkBytes {
		c.err = c.write()
	}
	// The event loops share the CPU: let them run between shards.
	runtime.Gosched()
}

// write hands the collected ops to the wrapped store; on failure they
// stay collected.
func (c *collector) write() error {
	if c.err != nil {
		err := c.err
		c.err = nil
		return err
	}
	if len(c.ops) == 0 {
		return nil
	}
	if err := c.s.inner.Write(c.ops, false); err != nil {
		return err
	}
	clear(c.ops)
	c.ops = c.ops[:0]
	c.arena = c.arena[:0]
	if cap(c.arena) > 4*chunkBytes {
		c.ops, c.arena = nil, nil
	}
	return nil
}

// Load implements persistence.Store: the wrapped store's records, after a
// checkpoint (the change log was replayed into the wrapped store when it
// opened; this covers what was written since).
func (s *Store) Load(fn func(db int, key, value []byte) error) error {
	if err := s.Checkpoint(); err != nil {
		return err
	}
	return s.inner.Load(fn)
}

// DiskUsage implements persistence.Store: the wrapped store's plus the
// segments'.
func (s *Store) DiskUsage() int64 {
	n := s.inner.DiskUsage()
	if segs, err := segments(s.dir); err == nil {
		for _, g := range segs {
			if fi, err := os.Stat(segName(s.dir, g)); err == nil {
				n += fi.Size()
			}
		}
	}
	return n
}

// WALDamage reports the damage the change log's replay dropped at Open
// (with LoadDamagedWAL), or else the wrapped store's WAL check.
func (s *Store) WALDamage() persistence.WALDamage {
	s.stats.Lock()
	d := s.stats.damage
	s.stats.Unlock()
	if d.Damaged() {
		return d
	}
	if wc, ok := s.inner.(persistence.WALChecker); ok {
		return wc.WALDamage()
	}
	return persistence.WALDamage{}
}

// Stats are the change log's figures.
type Stats struct {
	Checkpoints       int64         // completed checkpoints
	FailedCheckpoints int64         // checkpoints that failed
	LastCheckpoint    time.Duration // how long the last completed one took
	LastKeys          int           // keys (or, without a keyspace, changes) it wrote
	Replayed          int64         // changes replayed at Open
	Segment           uint64        // the current segment's number
	SegmentBytes      int64         // bytes logged since the last rotation
	CheckpointBytes   int64         // Options.CheckpointBytes
	Err               error         // the last checkpoint's error, nil after a success
	LastOK            time.Time     // when the last checkpoint succeeded (zero: none yet)
}

// Stats returns the current figures.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := Stats{Segment: s.seg, SegmentBytes: s.logged, CheckpointBytes: s.o.CheckpointBytes}
	s.mu.Unlock()
	s.ckMu.Lock()
	st.Err = s.ckErr
	s.ckMu.Unlock()
	s.stats.Lock()
	st.Checkpoints, st.FailedCheckpoints, st.LastCheckpoint, st.LastKeys, st.Replayed =
		s.stats.checkpoints, s.stats.failed, s.stats.lastDur, s.stats.lastKeys, s.stats.replayed
	st.LastOK = s.stats.lastOK
	s.stats.Unlock()
	return st
}

// CheckpointStats implements persistence.Checkpointer.
func (s *Store) CheckpointStats() persistence.CheckpointStats {
	st := s.Stats()
	return persistence.CheckpointStats{Checkpoints: st.Checkpoints, Failed: st.FailedCheckpoints,
		LastDuration: st.LastCheckpoint, LastKeys: st.LastKeys, LogBytes: st.SegmentBytes,
		CheckpointBytes: st.CheckpointBytes, Err: st.Err, LastOK: st.LastOK}
}

// Info returns INFO persistence's lines about the change log.
func (s *Store) Info() []string {
	st := s.Stats()
	status := "ok"
	if st.Err != nil {
		status = "err"
	}
	lines := []string{
		fmt.Sprintf("changelog_bytes:%d", st.SegmentBytes),
		fmt.Sprintf("changelog_checkpoint_bytes:%d", st.CheckpointBytes),
		fmt.Sprintf("checkpoints:%d", st.Checkpoints),
		fmt.Sprintf("checkpoints_failed:%d", st.FailedCheckpoints),
		"last_checkpoint_status:" + status,
		fmt.Sprintf("last_checkpoint_usec:%d", st.LastCheckpoint.Microseconds()),
		fmt.Sprintf("last_checkpoint_keys:%d", st.LastKeys),
		fmt.Sprintf("changelog_replayed_at_load:%d", st.Replayed),
	}
	s.ckMu.Lock()
	ks := s.src
	s.ckMu.Unlock()
	if ks != nil {
		ch := ks.Changes()
		lines = append(lines,
			fmt.Sprintf("checkpoint_pending_keys:%d", ch.Dirty+ch.Removed),
			fmt.Sprintf("checkpoint_tracking_bytes:%d", ch.Bytes))
	}
	return lines
}

// SkipFinalCheckpoint makes Close leave out its last checkpoint (SHUTDOWN
// NOSAVE): the change log stays, written and synced, and the next start
// replays it.
func (s *Store) SkipFinalCheckpoint() { s.noFinal.Store(true) }

// Close implements persistence.Store: a last checkpoint, then the empty
// current segment is removed and the wrapped store closed. If the
// checkpoint fails the segments stay, to be replayed at the next start.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	close(s.stop)
	<-s.done
	var err error
	if !s.noFinal.Load() {
		err = s.Checkpoint()
	}
	if fl, ok := s.inner.(persistence.Flusher); ok && err == nil {
		// The last checkpoint is in pebble's WAL: flushed to tables, the
		// next start reads tables instead of replaying it.
		err = fl.Flush()
	}
	s.rotMu.Lock()
	s.mu.Lock()
	s.closed = true
	f, empty := s.f, s.off <= int64(len(segMagic))
	s.mu.Unlock()
	s.rotMu.Unlock()
	f.Close()
	if empty {
		// It holds nothing (even when the checkpoint failed and the
		// older segments stay).
		os.Remove(f.Name())
		_ = syncDir(s.dir)
	}
	if err != nil {
		s.log.Error("persistence: final checkpoint failed; the change log is kept and replayed at the next start", "err", err)
	}
	return errors.Join(err, s.inner.Close())
}

var (
	_ persistence.Store       = (*Store)(nil)
	_ persistence.WALChecker  = (*Store)(nil)
	_ persistence.RecordStore = (*Store)(nil)
)

// segments lists the segment numbers in dir, in order.
func segments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("persistence: change log directory: %w", err)
	}
	var segs []uint64
	for _, e := range ents {
		stem, ok := strings.CutSuffix(e.Name(), segSuffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(stem, 10, 64)
		if err != nil {
			continue
		}
		segs = append(segs, n)
	}
	slices.Sort(segs)
	return segs, nil
}

func segName(dir string, n uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%016d%s", n, segSuffix))
}

// Damage describes a segment whose records stop being readable before
// intact records that follow.
type Damage struct {
	File    string
	Offset  int64
	Reason  string
	Dropped int // intact records found after the damage (a lower bound of the loss)
}

func (d *Damage) Error() string {
	return fmt.Sprintf("change log %s is damaged at offset %d (%s): %d intact records follow", d.File, d.Offset, d.Reason, d.Dropped)
}

// Parse reads a segment's records, calling fn for each op in order (key
// and value alias data). It returns the offset where the intact records
// end and, when that is not the end of data, whether what follows is a
// torn tail (no intact record after it: nil error) or damage (*Damage).
func Parse(name string, data []byte, fn func(persistence.Op) error) (end int64, err error) {
	if len(data) < len(segMagic) {
		if bytes.HasPrefix(segMagic, data) {
			return int64(len(data)), nil // torn while being created
		}
		return 0, &Damage{File: name, Reason: "bad segment header"}
	}
	if !bytes.Equal(data[:len(segMagic)], segMagic) {
		return 0, &Damage{File: name, Reason: "bad segment header"}
	}
	return parseRecords(name, data, len(segMagic), fn)
}

// parseRecords is Parse from offset off of data.
func parseRecords(name string, data []byte, off int, fn func(persistence.Op) error) (end int64, err error) {
	for off < len(data) {
		op, n, reason := record(data[off:])
		if reason != "" {
			if intact := intactAfter(data[off+1:]); intact > 0 {
				return int64(off), &Damage{File: name, Offset: int64(off), Reason: reason, Dropped: intact}
			}
			return int64(off), nil // torn tail
		}
		if err := fn(op); err != nil {
			return int64(off), err
		}
		off += n
	}
	return int64(off), nil
}

// record decodes the record at the start of b: its op and length, or why
// it does not read.
func record(b []byte) (persistence.Op, int, string) {
	if len(b) < recHeader {
		return persistence.Op{}, 0, "short header"
	}
	n := binary.LittleEndian.Uint32(b)
	if n < minPayload || n > maxPayload {
		return persistence.Op{}, 0, fmt.Sprintf("bad length %d", n)
	}
	if len(b) < recHeader+int(n) {
		return persistence.Op{}, 0, "short record"
	}
	p := b[recHeader : recHeader+int(n)]
	if crc32.Checksum(p, crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return persistence.Op{}, 0, "checksum mismatch"
	}
	op := persistence.Op{Kind: persistence.OpKind(p[0]), DB: int(binary.BigEndian.Uint16(p[1:3]))}
	kl, m := binary.Uvarint(p[3:])
	if m <= 0 || kl > uint64(len(p)-3-m) {
		return persistence.Op{}, 0, "bad key length"
	}
	ks := 3 + m
	if kl > 0 || op.Kind == persistence.OpPut || op.Kind == persistence.OpDelete {
		op.Key = p[ks : ks+int(kl) : ks+int(kl)]
	}
	if v := p[ks+int(kl):]; len(v) > 0 {
		op.Value = v
	}
	if err := persistence.CheckOps([]persistence.Op{op}); err != nil {
		return persistence.Op{}, 0, err.Error()
	}
	return op, recHeader + int(n), ""
}

// intactAfter counts the intact records found scanning b from every
// offset: 0 means b holds none (a torn tail).
func intactAfter(b []byte) int {
	count := 0
	for i := 0; i+recHeader+minPayload <= len(b); {
		if _, n, reason := record(b[i:]); reason == "" {
			count++
			i += n
			continue
		}
		i++
	}
	return count
}

// appendRecord encodes op as one record.
func appendRecord(dst []byte, op persistence.Op) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recHeader)...)
	dst = append(dst, byte(op.Kind))
	dst = binary.BigEndian.AppendUint16(dst, uint16(op.DB))
	dst = binary.AppendUvarint(dst, uint64(len(op.Key)))
	dst = append(dst, op.Key...)
	dst = append(dst, op.Value...)
	return sealRecord(dst, start)
}

// sealRecord fills in the header of the record that starts at dst[start].
func sealRecord(dst []byte, start int) []byte {
	p := dst[start+recHeader:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(p)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(p, crcTable))
	return dst
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("persistence: change log: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("persistence: change log: sync directory: %w", err)
	}
	return nil
}

// newSegment creates segment n and makes it current; s.mu is held or the
// Store is not yet shared.
func (s *Store) newSegment(n uint64) error {
	f, err := os.OpenFile(segName(s.dir, n), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("persistence: change log: %w", err)
	}
	if _, err := f.Write(segMagic); err != nil {
		f.Close()
		os.Remove(f.Name())
		return fmt.Errorf("persistence: change log: %w", err)
	}
	s.f, s.seg, s.off = f, n, int64(len(segMagic))
	return nil
}

// syncData makes f's written data durable with fdatasync(2), which also
// persists the file size an append changed, but not the timestamps.
func syncData(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}

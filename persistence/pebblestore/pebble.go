package pebblestore

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/cellserver/cellserver/persistence"
	"hash/crc32"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cellserver/cellserver/keyslot"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// The disk layout, store format 2.
//
// Every record is one pebble key: the database number as 2 big-endian
// bytes, the key's hash slot (keyslot.Of) as 2 big-endian bytes, then the
// raw key bytes (which may be empty or hold any byte). Its pebble value is
// the EncodeValue encoding. Pebble's byte order is then (db, slot, key)
// order: one database's records are one range, and so are one slot's
// (LoadSlot), and every record key has at least 4 bytes.
//
// Keys shorter than 2 bytes are outside the record space. The one-byte key
// 0x00, which sorts before every record key, holds the store format: one
// byte, StoreFormat. A directory whose pebble store lacks it is fresh if it
// holds no record (it is then written, synced) and ErrFormat otherwise; a
// newer version is ErrFormat.
//
// Store format 1 (cellserver before hash slots) had no slot: the record
// key was the database number and the key. Open migrates such a
// directory in place (migrateV1): one synced pebble batch deletes the
// whole record space and writes every record again under its new key,
// and sets the format to 2, so a crash leaves either format 1 untouched
// or format 2 complete. The batch holds every record, so the migration
// needs about the store's logical size in memory, once, and the old
// records' space on disk until compactions drop them.
//
// OpDeleteDB of db d < MaxDB is the range deletion [d, d+1) over the 2-byte
// prefixes; OpDeleteAll is [0x0000, 0xFFFF). The records of db 0xFFFF have
// no finite upper bound in byte order, so deleting them (OpDeleteDB of
// MaxDB, and the rest of OpDeleteAll) is a range deletion from 0xFFFF to
// just past the largest key stored at that point of the batch, found with
// an indexed batch while other writes wait.

// StoreFormat is the version of the disk layout, kept in the meta record.
const StoreFormat = 2

// metaKey is the key of the store-format record, outside the record space.
var metaKey = []byte{0x00}

// recordPrefix is the length of a record key's (db, slot) prefix.
const recordPrefix = 4

// recordKey appends the record key of (db, key) to dst.
func recordKey(dst []byte, db int, key []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(db))
	dst = binary.BigEndian.AppendUint16(dst, keyslot.Of(key))
	return append(dst, key...)
}

// dbPrefix returns the 2-byte prefix of db's records.
func dbPrefix(db int) []byte { return binary.BigEndian.AppendUint16(nil, uint16(db)) }

// slotPrefix returns the 4-byte prefix of the records of db's slot.
func slotPrefix(db int, slot uint16) []byte {
	return binary.BigEndian.AppendUint16(dbPrefix(db), slot)
}

// Options configures Open. The zero value is valid.
type Options struct {
	// FS is the file system holding the directory; nil means vfs.Default,
	// the real one. Tests pass vfs.NewMem().
	FS vfs.FS
	// Logger receives pebble's messages: its chatty informational ones at
	// Debug level, background errors and write stalls above. Nil means
	// slog.Default().
	Logger *slog.Logger
	// LoadDamagedWAL opens a directory whose newest WAL is damaged before
	// its end (see checkNewestWAL), loading the changes before the damage
	// and dropping those after it, with a warning. False (the default)
	// refuses such a directory with ErrCorrupt.
	LoadDamagedWAL bool
}

// Store is a persistence.Store on a pebble database in one directory. It holds the
// directory's lock (pebble's LOCK file) until Close.
//
// Its pebble options are modest, for a 2-core machine: a 16 MiB memtable
// (writes stall while 4 wait to be flushed, so at most 64 MiB), an 8 MiB
// block cache, one compaction at a time and at most 256 open files. Load
// reads everything once at start, so a larger cache would not help.
//
// No pebble panic leaves its methods: whatever pebble panics with (its
// Logger.Fatalf, an error such as "no space left on device" when a WAL
// write fails, a string), the call returns an error. A pebble database
// that failed so cannot be used again; the next Write or Sync replaces it:
// it closes it (or, if pebble panicked holding its own locks, which would
// make Close block forever, leaves it behind a fence that fails its every
// file write) and opens the directory again, which replays the WAL. Until
// that open succeeds (say, while the disk stays full), Write and Sync
// return its error. Writes must then come from one goroutine: pebble may
// block a commit that runs while another one panics.
//
// The batches written without sync since the last sync may be missing
// from the WAL of a database that failed (its WAL writes failed, or its
// WAL buffer was never written), so the store keeps a copy of them (the
// unsynced tail) and writes them again, in order, into the replacement,
// then syncs it: no Write that returned nil is lost by a replacement.
// The tail is synced, and so emptied, whenever it passes maxTail bytes.
type Store struct {
	// mu is held shared by every operation and exclusively by Close, by
	// the reopening after a failure, and by the Writes that delete db
	// MaxDB's records (see the layout above).
	mu sync.RWMutex
	db *pebble.DB // nil once closed, or while a failed one awaits reopening
	in *instance  // db's state; nil with db
	// closed is set by Close.
	closed bool
	// reopenErr is why the last reopening failed, if it did, and
	// reopenCause the failure that made the store reopen (kept across
	// failed reopenings, so their errors do not nest).
	reopenErr   error
	reopenCause error
	lock        *pebble.Lock
	dir         string
	fs          vfs.FS // what Open was given (each instance sees it behind its fence)
	log         *slog.Logger
	// id identifies the directory in openDirs; nil unless on the real FS.
	id os.FileInfo
	// walDamage is what the check of the newest WAL found at open.
	walDamage persistence.WALDamage
	// reopened and abandoned count the instances replaced after a failure,
	// and among them those left unclosed.
	reopened, abandoned atomic.Int64
	// lastUsage is the last DiskUsage figure read from pebble.
	lastUsage atomic.Int64

	// tailMu serializes commits with the unsynced tail: held from a
	// batch's commit to its append to tail, and by Sync from its sync to
	// emptying tail. It comes after mu.
	tailMu sync.Mutex
	// tail holds the batches committed without sync since the last sync,
	// in commit order, each as a 4-byte length and pebble's batch bytes.
	tail []byte
}

// maxTail bounds the unsynced tail: past it, Write syncs.
const maxTail = 16 << 20

// instance is the state of one pebble.DB that a Store opened.
type instance struct {
	// broken is why the database cannot be used any more: pebble's
	// Logger.Fatalf (from any goroutine) or a panic in a Store method.
	broken atomic.Pointer[error]
	// wedged: pebble panicked inside a call of ours and may hold its own
	// locks, so its Close would block forever.
	wedged atomic.Bool
	// fenced: the database was given up; its file system refuses every
	// write, so that it changes nothing while another one has the files.
	fenced atomic.Bool
	// usageBusy is set while a goroutine reads the database's metrics
	// (see DiskUsage).
	usageBusy atomic.Bool
}

// fail records err as the reason the instance is broken, unless one is
// already recorded, and returns the recorded one.
func (in *instance) fail(err error) error {
	in.broken.CompareAndSwap(nil, &err)
	return *in.broken.Load()
}

// err returns why the instance is broken, or nil.
func (in *instance) err() error {
	if b := in.broken.Load(); b != nil {
		return *b
	}
	return nil
}

// errFenced is what a given-up database's file writes return.
var errFenced = errors.New("persistence: this pebble instance was replaced after a failure")

var _ persistence.Store = (*Store)(nil)

// openDirs holds the real directories this process has open. Pebble's own
// check within a process compares LOCK paths as strings, and POSIX record
// locks do not exclude the process that holds them: pebble alone lets one
// process open a directory twice under two names (a symlink, a relative
// path), each Open believing it holds the lock. Open resolves the
// path (filepath.Abs, EvalSymlinks) so pebble sees one name, and checks
// this list by device and inode, which also catches another mount of the
// same directory.
var openDirs struct {
	sync.Mutex
	ids []os.FileInfo
}

func registerDir(id os.FileInfo) bool {
	openDirs.Lock()
	defer openDirs.Unlock()
	for _, o := range openDirs.ids {
		if os.SameFile(o, id) {
			return false
		}
	}
	openDirs.ids = append(openDirs.ids, id)
	return true
}

func unregisterDir(id os.FileInfo) {
	openDirs.Lock()
	defer openDirs.Unlock()
	for i, o := range openDirs.ids {
		if o == id {
			openDirs.ids = append(openDirs.ids[:i], openDirs.ids[i+1:]...)
			return
		}
	}
}

// Open opens the store in dir, creating the directory and an empty
// store if there is none. Its errors say which of these happened:
//   - the directory is open, in another process or this one: ErrLocked;
//   - the directory cannot be created, read or written (a permission, a
//     regular file in the way): the *fs.PathError, with the path;
//   - pebble's files are damaged (a garbage MANIFEST, table files without
//     a manifest): ErrCorrupt; it never starts empty over existing data;
//   - the store was written in another layout: ErrFormat.
func Open(dir string, opts Options) (_ *Store, err error) {
	if dir == "" {
		return nil, errors.New("persistence: empty data directory path")
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	vfsys, onDisk := opts.FS, opts.FS == nil
	if onDisk {
		vfsys = vfs.Default
		if dir, err = filepath.Abs(dir); err != nil {
			return nil, fmt.Errorf("persistence: data directory: %w", err)
		}
	}
	dir = filepath.Clean(dir)
	if err := mkdirAllSynced(vfsys, dir); err != nil {
		return nil, err
	}
	fi, err := vfsys.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("persistence: data directory %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("persistence: data directory %s: %w", dir,
			&fs.PathError{Op: "open", Path: dir, Err: syscall.ENOTDIR})
	}
	p := &Store{}
	if onDisk {
		if dir, err = filepath.EvalSymlinks(dir); err != nil {
			return nil, fmt.Errorf("persistence: data directory: %w", err)
		}
		if fi, err = os.Stat(dir); err != nil {
			return nil, fmt.Errorf("persistence: data directory: %w", err)
		}
		if !registerDir(fi) {
			return nil, fmt.Errorf("%w: %s is already open in this process", persistence.ErrLocked, dir)
		}
		p.id = fi
		defer func() {
			if err != nil {
				unregisterDir(fi)
			}
		}()
	}
	p.dir, p.fs, p.log = dir, vfsys, log
	lock, err := pebble.LockDirectory(dir, vfsys)
	if err != nil {
		return nil, lockError(dir, err)
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	p.lock = lock
	// Only with the lock held: another process may be moving its markers.
	if err := checkOrphans(vfsys, dir); err != nil {
		return nil, err
	}
	if p.walDamage, err = checkNewestWAL(vfsys, dir); err != nil {
		return nil, err
	}
	if p.walDamage.Damaged() {
		if !opts.LoadDamagedWAL {
			return nil, fmt.Errorf("%w: %s (start with --load-damaged-wal yes to load what precedes the damage and drop the rest)", persistence.ErrCorrupt, p.walDamage)
		}
		log.Warn("persistence: loading a damaged WAL: the changes after the damage are dropped",
			"dir", dir, "wal", p.walDamage.File, "offset", p.walDamage.Offset,
			"dropped_bytes", p.walDamage.DroppedBytes, "dropped_records", p.walDamage.DroppedRecords,
			"dropped_changes", p.walDamage.DroppedChanges)
	}
	db, in, err := p.openDB()
	if err != nil {
		return nil, err
	}
	p.db, p.in = db, in
	if err := p.checkFormat(); err != nil {
		p.closeDB(db, in)
		return nil, err
	}
	return p, nil
}

// openDB opens a pebble database on the directory, on a file system of
// its own that fences it once it is given up.
func (p *Store) openDB() (*pebble.DB, *instance, error) {
	in := &instance{}
	fenced := errorfs.Wrap(p.fs, errorfs.InjectorFunc(func(op errorfs.Op, _ string) error {
		if in.fenced.Load() && op.OpKind() == errorfs.OpKindWrite && op != errorfs.OpFileClose {
			return errFenced
		}
		return nil
	}))
	dir, log := p.dir, p.log
	cache := pebble.NewCache(8 << 20)
	defer cache.Unref() // Open takes its own reference
	o := &pebble.Options{
		FS:    fenced,
		Lock:  p.lock,
		Cache: cache,
		// Pinned, not FormatNewest, so that a pebble upgrade does not ratchet
		// the directory past what this build's pebble reads.
		FormatMajorVersion:          pebble.FormatVirtualSSTables,
		MemTableSize:                16 << 20,
		MemTableStopWritesThreshold: 4,
		MaxConcurrentCompactions:    func() int { return 1 },
		MaxOpenFiles:                256,
		Logger:                      pebbleLogger{l: log, in: in, dir: dir},
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) {
				if !in.fenced.Load() {
					log.Error("persistence: pebble background error", "dir", dir, "err", err)
				}
			},
			WriteStallBegin: func(info pebble.WriteStallBeginInfo) {
				log.Warn("persistence: pebble write stall", "dir", dir, "reason", info.Reason)
			},
			WriteStallEnd: func() { log.Info("persistence: pebble write stall ended", "dir", dir) },
		},
	}
	db, err := openRecovering(dir, o)
	if err == nil {
		if b := in.broken.Load(); b != nil {
			// Fatalf from one of pebble's goroutines during the open.
			err = *b
			p.closeDB(db, in)
		}
	}
	if err != nil {
		if pebble.IsCorruptionError(err) {
			return nil, nil, fmt.Errorf("%w: open %s: %w", persistence.ErrCorrupt, dir, err)
		}
		return nil, nil, fmt.Errorf("persistence: open %s: %w", dir, err)
	}
	return db, in, nil
}

// closeDB closes db, then fences it; a panic in pebble's Close becomes its
// error. A wedged database is not closed (its Close would block forever):
// it stays open behind its fence, and its reference on the lock is
// dropped so that the next open can take the lock.
func (p *Store) closeDB(db *pebble.DB, in *instance) (err error) {
	if in.wedged.Load() {
		in.fenced.Store(true)
		p.abandoned.Add(1)
		return p.lock.Close() // from 2 references (ours and db's) to 1
	}
	defer func() {
		in.fenced.Store(true)
		if r := recover(); r != nil {
			err = fmt.Errorf("persistence: close %s: pebble panicked: %w", p.dir, panicError(r))
		}
	}()
	return db.Close()
}

// mkdirAllSynced creates dir and its missing parents, and syncs the parent
// of each directory it created so that the new entries survive a crash.
// Pebble syncs the data directory it writes in, but not the parent that
// holds its entry.
func mkdirAllSynced(vfsys vfs.FS, dir string) error {
	var created []string
	for d := dir; ; {
		if _, err := vfsys.Stat(d); err == nil {
			break
		}
		created = append(created, d)
		parent := vfsys.PathDir(d)
		if parent == d {
			break
		}
		d = parent
	}
	if err := vfsys.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("persistence: create data directory %s: %w", dir, err)
	}
	for _, d := range created {
		parent := vfsys.PathDir(d)
		if parent == d {
			continue
		}
		f, err := vfsys.OpenDir(parent)
		if err == nil {
			err = errors.Join(f.Sync(), f.Close())
		}
		if err != nil {
			return fmt.Errorf("persistence: sync directory %s: %w", parent, err)
		}
	}
	return nil
}

// openRecovering is pebble.Open, with a panic during Open turned into an
// error wrapping pebble.ErrCorruption. Pebble calls Logger.Fatalf for some
// damage it finds while opening, and pebble v1.1.5 even dereferences nil
// replaying a WAL whose manifest is gone: that is a damaged directory, to be
// reported, not a reason to stop the process with a stack trace.
func openRecovering(dir string, o *pebble.Options) (db *pebble.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			e := panicError(r)
			var errno syscall.Errno
			var pe *fs.PathError
			if errors.As(e, &errno) || errors.As(e, &pe) {
				// A file that cannot be written (a full disk), not damage.
				db, err = nil, fmt.Errorf("pebble panicked opening %s: %w", dir, e)
				return
			}
			db, err = nil, fmt.Errorf("%w: pebble panicked opening %s: %s", pebble.ErrCorruption, dir, e)
		}
	}()
	return pebble.Open(dir, o)
}

// checkOrphans refuses a directory whose pebble data has lost its manifest:
// tables or a non-empty WAL without a manifest marker, or a marker naming a
// missing MANIFEST. Pebble would start an empty store over the data (or
// fail obscurely). Pebble still writes CURRENT for old readers, but with a
// format-version marker present it reads only marker.manifest.*.
func checkOrphans(vfsys vfs.FS, dir string) error {
	names, err := vfsys.List(dir)
	if err != nil {
		return fmt.Errorf("persistence: read data directory %s: %w", dir, err)
	}
	var current, versioned bool
	var manifests []string // the files the manifest markers name
	var data []string
	for _, n := range names {
		switch {
		case n == "CURRENT":
			current = true
		case strings.HasPrefix(n, "marker.format-version."):
			versioned = true
		case strings.HasPrefix(n, "marker.manifest."):
			// marker.manifest.<iteration>.<file name>
			if parts := strings.SplitN(n, ".", 4); len(parts) == 4 {
				manifests = append(manifests, parts[3])
			}
		case strings.HasSuffix(n, ".sst"):
			data = append(data, n)
		case strings.HasSuffix(n, ".log"):
			if fi, err := vfsys.Stat(vfsys.PathJoin(dir, n)); err == nil && fi.Size() > 0 {
				data = append(data, n)
			}
		}
	}
	for _, m := range manifests {
		if m == "" || strings.ContainsAny(m, `/\`) {
			continue
		}
		if _, err := vfsys.Stat(vfsys.PathJoin(dir, m)); errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s: the manifest marker names %s, which is missing", persistence.ErrCorrupt, dir, m)
		}
	}
	manifest := len(manifests) > 0 || (current && !versioned)
	if !manifest && len(data) > 0 {
		return fmt.Errorf("%w: %s holds pebble data (%s) but no manifest marker", persistence.ErrCorrupt, dir, strings.Join(data, ", "))
	}
	return nil
}

// lockError maps pebble.LockDirectory's error: the lock held elsewhere is
// ErrLocked; failing to create the LOCK file keeps its path error.
func lockError(dir string, err error) error {
	var pe *fs.PathError
	switch {
	case errors.As(err, &pe):
		return fmt.Errorf("persistence: lock data directory %s: %w", dir, err)
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EACCES):
		// fcntl(F_SETLK) fails so when another process holds the lock.
		return fmt.Errorf("%w: %s (pebble: %v)", persistence.ErrLocked, dir, err)
	case strings.Contains(err.Error(), "lock held by current process"):
		// Pebble's own check within one process (pebble v1.1.5).
		return fmt.Errorf("%w: %s is already open in this process", persistence.ErrLocked, dir)
	}
	return fmt.Errorf("persistence: lock data directory %s: %w", dir, err)
}

// checkFormat reads the meta record, or writes it into a fresh store.
func (p *Store) checkFormat() error {
	return p.guard(p.in, "read format record in", func() error { return p.checkFormatLocked(p.db) })
}

func (p *Store) checkFormatLocked(db *pebble.DB) error {
	v, closer, err := db.Get(metaKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		it, err := db.NewIter(nil)
		if err != nil {
			return p.wrap("read", err)
		}
		some := it.First()
		var key []byte
		if some {
			key = bytes.Clone(it.Key())
		}
		err = errors.Join(it.Error(), it.Close())
		if err != nil {
			return p.wrap("read", err)
		}
		if some {
			return fmt.Errorf("%w: %s holds pebble data (first key %q) but no cellserver format record", persistence.ErrFormat, p.dir, key)
		}
		if err := db.Set(metaKey, []byte{StoreFormat}, pebble.Sync); err != nil {
			return p.wrap("write format record in", err)
		}
		return nil
	case err != nil:
		return p.wrap("read format record in", err)
	}
	defer closer.Close()
	if len(v) != 1 {
		return fmt.Errorf("%w: %s: format record has %d bytes, want 1", persistence.ErrCorrupt, p.dir, len(v))
	}
	switch v[0] {
	case StoreFormat:
		return nil
	case 1:
		return p.migrateV1(db)
	}
	return fmt.Errorf("%w: %s is store format %d, this build reads %d (and migrates 1): start a newer cellserver on it, or move it away to start empty", persistence.ErrFormat, p.dir, v[0], StoreFormat)
}

// migrateV1 rewrites a store of format 1 into format 2 (see the layout
// above) in one synced batch, and logs the record count and the time.
func (p *Store) migrateV1(db *pebble.DB) error {
	start := time.Now()
	p.log.Warn("persistence: migrating the data directory from store format 1 to 2 (records keyed by hash slot)", "dir", p.dir)
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: dbPrefix(0)})
	if err != nil {
		return p.wrap("read", err)
	}
	defer it.Close()
	b := db.NewBatch()
	defer b.Close()
	// The range deletion of every old record comes first in the batch, so
	// that it covers none of the records written after it.
	if it.Last() {
		if err := b.DeleteRange(dbPrefix(0), append(bytes.Clone(it.Key()), 0), nil); err != nil {
			return p.wrap("migrate", err)
		}
	}
	var k []byte
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		old := it.Key()
		if len(old) < 2 {
			return fmt.Errorf("%w: %s: key %q outside the record space", persistence.ErrCorrupt, p.dir, old)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return p.wrap("read", err)
		}
		k = recordKey(k[:0], int(binary.BigEndian.Uint16(old)), old[2:])
		if err := b.Set(k, v, nil); err != nil {
			return p.wrap("migrate", err)
		}
		n++
	}
	if err := it.Error(); err != nil {
		return p.wrap("read", err)
	}
	if err := b.Set(metaKey, []byte{StoreFormat}, nil); err != nil {
		return p.wrap("migrate", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return p.wrap("migrate", err)
	}
	p.log.Warn("persistence: migrated the data directory to store format 2", "dir", p.dir,
		"records", n, "duration", time.Since(start).Round(time.Millisecond))
	return nil
}

// wrap adds the operation and the directory to a pebble error, and
// ErrCorrupt when pebble reports corruption.
func (p *Store) wrap(op string, err error) error {
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("%w: %s %s: %w", persistence.ErrCorrupt, op, p.dir, err)
	}
	return fmt.Errorf("persistence: %s %s: %w", op, p.dir, err)
}

// panicError turns a recovered panic value into an error, keeping an
// error's chain (errors.Is(err, syscall.ENOSPC) still holds).
func panicError(r any) error {
	switch v := r.(type) {
	case pebbleFatal:
		return errors.New(v.msg)
	case error:
		return v
	}
	return fmt.Errorf("%v", r)
}

// use runs f on the current database, shared (acquire), under guard:
// how a call that does not need the store to itself reaches pebble.
func (p *Store) use(op string, f func(db *pebble.DB, in *instance) error) error {
	db, in, unlock, err := p.acquire(false)
	if err != nil {
		return err
	}
	defer unlock()
	return p.guard(in, op, func() error { return f(db, in) })
}

// guard runs f, a call into pebble's database of instance in, and turns a
// panic in it into an error: the instance is then broken (and wedged, as
// pebble may have panicked holding its locks). A Fatalf that pebble logs
// meanwhile, from any goroutine, makes the call fail too, even if pebble
// went on: pebble's commit logs "fatal commit error" and returns nil.
func (p *Store) guard(in *instance, op string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			in.wedged.Store(true)
			err = in.fail(fmt.Errorf("persistence: %s %s: pebble panicked: %w", op, p.dir, panicError(r)))
		}
	}()
	err = f()
	if b := in.broken.Load(); b != nil {
		return *b
	}
	return err
}

// acquire locks p.mu (exclusively if excl, else shared) with a usable
// database: it first replaces one that failed (see Store). It returns
// the unlock function, or the error that keeps the store unusable.
func (p *Store) acquire(excl bool) (db *pebble.DB, in *instance, unlock func(), err error) {
	lock, unlock := p.mu.RLock, p.mu.RUnlock
	if excl {
		lock, unlock = p.mu.Lock, p.mu.Unlock
	}
	for try := 0; ; try++ {
		lock()
		if p.closed {
			unlock()
			return nil, nil, nil, persistence.ErrStoreClosed
		}
		if p.db != nil && p.in.broken.Load() == nil {
			return p.db, p.in, unlock, nil
		}
		unlock()
		if try == 1 {
			// Reopened, and broken again at once.
			return nil, nil, nil, p.failure()
		}
		p.mu.Lock()
		err := p.reopenLocked()
		p.mu.Unlock()
		if err != nil {
			return nil, nil, nil, err
		}
	}
}

// failure returns why the store is not usable now.
func (p *Store) failure() error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	switch {
	case p.closed:
		return persistence.ErrStoreClosed
	case p.in != nil:
		if b := p.in.broken.Load(); b != nil {
			return *b
		}
	case p.reopenErr != nil:
		return p.reopenErr
	}
	return nil
}

// reopenLocked gives up the broken database, if there is one, and opens
// the directory again; p.mu is held exclusively.
func (p *Store) reopenLocked() error {
	if p.closed {
		return persistence.ErrStoreClosed
	}
	cause := p.reopenCause
	if p.db != nil {
		b := p.in.broken.Load()
		if b == nil {
			return nil // reopened by another call meanwhile
		}
		cause = *b
		p.reopenCause = cause
		wedged := p.in.wedged.Load()
		if err := p.closeDB(p.db, p.in); err != nil {
			p.log.Debug("persistence: closing the failed pebble database", "dir", p.dir, "err", err)
		}
		if wedged {
			p.log.Warn("persistence: pebble panicked holding its locks; its database is left open behind a fence and replaced (its memory stays allocated)",
				"dir", p.dir, "err", cause)
		}
		p.db, p.in = nil, nil
	}
	db, in, err := p.openDB()
	if err == nil {
		err = p.guard(in, "write the unsynced tail into", func() error { return p.rewriteTail(db, in) })
		if err != nil {
			p.closeDB(db, in)
		}
	}
	if err != nil {
		p.reopenErr = fmt.Errorf("persistence: reopen %s after a failure (%v): %w", p.dir, cause, err)
		return p.reopenErr
	}
	p.db, p.in, p.reopenErr, p.reopenCause = db, in, nil, nil
	p.reopened.Add(1)
	p.log.Warn("persistence: reopened the data directory after a failure", "dir", p.dir, "after", cause)
	return nil
}

// rewriteTail writes the unsynced tail into db, a replacement, in order,
// and syncs it; the tail is then empty. Its batches may be in db already
// (replayed from the WAL): writing them again in the same order, after
// which nothing was committed, leaves the same state.
func (p *Store) rewriteTail(db *pebble.DB, in *instance) error {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	if len(p.tail) == 0 {
		return nil
	}
	for t := p.tail; len(t) > 0; {
		n := binary.LittleEndian.Uint32(t)
		b := db.NewBatch()
		if err := b.SetRepr(bytes.Clone(t[4 : 4+n])); err != nil {
			return p.wrap("write", err)
		}
		err := db.Apply(b, pebble.NoSync)
		b.Close()
		if err != nil {
			return p.wrap("write", err)
		}
		t = t[4+n:]
	}
	return p.syncTailLocked(db, in)
}

func writeOptions(sync bool) *pebble.WriteOptions {
	if sync {
		return pebble.Sync
	}
	return pebble.NoSync
}

// needsExclusive reports whether ops delete db MaxDB's records, which needs
// a stable view of that db's last key.
func needsExclusive(ops []persistence.Op) bool {
	for _, op := range ops {
		if op.Kind == persistence.OpDeleteAll || (op.Kind == persistence.OpDeleteDB && op.DB == persistence.MaxDB) {
			return true
		}
	}
	return false
}

// Write implements Store. sync=false commits with pebble.NoSync (in the WAL,
// not fsynced), sync=true with pebble.Sync. After a failure it first
// reopens the database (see Store).
func (p *Store) Write(ops []persistence.Op, sync bool) error {
	if err := persistence.CheckOps(ops); err != nil {
		return err
	}
	if len(ops) == 0 && sync {
		return p.Sync()
	}
	exclusive := needsExclusive(ops)
	db, in, unlock, err := p.acquire(exclusive)
	if err != nil {
		return err
	}
	defer unlock()
	if len(ops) == 0 {
		return nil
	}
	return p.guard(in, "write", func() error {
		var b *pebble.Batch
		if exclusive {
			b = db.NewIndexedBatch()
		} else {
			b = db.NewBatch()
		}
		defer b.Close()
		ord := orderPool.Get().(*opOrder)
		defer ord.release()
		var err error
		for i := 0; i < len(ops); {
			op := ops[i]
			if op.Kind == persistence.OpPut || op.Kind == persistence.OpDelete {
				j := i + 1
				for j < len(ops) && (ops[j].Kind == persistence.OpPut || ops[j].Kind == persistence.OpDelete) {
					j++
				}
				if err := ord.add(b, ops[i:j]); err != nil {
					return p.wrap("write", err)
				}
				i = j
				continue
			}
			switch op.Kind {
			case persistence.OpDeleteDB:
				if op.DB < persistence.MaxDB {
					err = b.DeleteRange(dbPrefix(op.DB), dbPrefix(op.DB+1), nil)
				} else {
					err = deleteLastDB(b)
				}
			case persistence.OpDeleteAll:
				if err = b.DeleteRange(dbPrefix(0), dbPrefix(persistence.MaxDB), nil); err == nil {
					err = deleteLastDB(b)
				}
			}
			if err != nil {
				return p.wrap("write", err)
			}
			i++
		}
		p.tailMu.Lock()
		defer p.tailMu.Unlock()
		var repr []byte
		if !sync {
			// Before Commit: pebble empties a large batch it commits.
			repr = b.Repr()
		}
		if err := b.Commit(writeOptions(sync)); err != nil {
			return p.wrap("write", err)
		}
		if err := in.err(); err != nil {
			return err // pebble's commit logs Fatalf and returns nil
		}
		if sync {
			p.tail = p.tail[:0]
			return nil
		}
		p.tail = binary.LittleEndian.AppendUint32(p.tail, uint32(len(repr)))
		p.tail = append(p.tail, repr...)
		if len(p.tail) > maxTail {
			return p.syncTailLocked(db, in)
		}
		return nil
	})
}

// opOrder adds a run of puts and deletes to a batch in (db, slot) order
// (within a slot, by a hash of the key), keeping only the last change of
// each key. The run's order among keys
// does not matter (the batch is applied atomically) and each key's last
// change is the state the batch leaves it in, so the result is the same;
// but pebble inserts a batch into its memtable with a cursor that starts
// each search from where the previous key went, so keys in order cost a
// short walk between neighbours instead of a descent from the top of the
// skiplist through memory the cache no longer holds (that descent was
// 40% of the server's CPU under CL.THROTTLE over random keys), and a key
// changed many times in one batch is written once.
type opOrder struct {
	keys  []byte  // the run's record keys, back to back
	ents  []opEnt // one per op, sorted by (pre, index in the run)
	tmp   []opEnt // sort's scatter target
	start []int32 // sort's bucket offsets
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

type opEnt struct {
	pre        uint64 // the record key's (db, slot) prefix, then CRC32C of the key
	start, end int    // the record key: keys[start:end]
	i          int    // the op's index in the run
}

var orderPool = sync.Pool{New: func() any { return new(opOrder) }}

// The largest buffers an opOrder keeps for the next batch.
const (
	maxOrderKeys = 4 << 20
	maxOrderEnts = 1 << 16
)

func (o *opOrder) release() {
	if cap(o.keys) > maxOrderKeys || cap(o.ents) > maxOrderEnts || cap(o.tmp) > maxOrderEnts {
		return
	}
	o.keys, o.ents, o.tmp = o.keys[:0], o.ents[:0], o.tmp[:0]
	orderPool.Put(o)
}

// add adds run (OpPut and OpDelete only) to b.
func (o *opOrder) add(b *pebble.Batch, run []persistence.Op) error {
	o.keys, o.ents = o.keys[:0], o.ents[:0]
	if len(run) > 1024 {
		// A large run (a change log checkpoint) would otherwise grow
		// both, copying, many times.
		n := 0
		for _, op := range run {
			n += recordPrefix + len(op.Key)
		}
		o.keys, o.ents = slices.Grow(o.keys, n), slices.Grow(o.ents, len(run))
	}
	for i, op := range run {
		start := len(o.keys)
		o.keys = recordKey(o.keys, op.DB, op.Key)
		// (db, slot) from the record key, then a hash of the key: the
		// order pebble sees is (db, slot) order, and integer compares
		// sort a large batch (a change log checkpoint) without reading
		// the keys. Equal prefixes of different keys (a hash collision)
		// stay in run order, which keeps the result right.
		pre := uint64(binary.BigEndian.Uint32(o.keys[start:]))<<32 | uint64(crc32.Checksum(o.keys[start+recordPrefix:], crcTable))
		o.ents = append(o.ents, opEnt{pre, start, len(o.keys), i})
	}
	if len(run) > 1 {
		o.sort()
	}
	for n, e := range o.ents {
		k := o.keys[e.start:e.end]
		if n+1 < len(o.ents) {
			if next := o.ents[n+1]; bytes.Equal(k, o.keys[next.start:next.end]) {
				continue // a later change of the same key follows
			}
		}
		var err error
		if op := run[e.i]; op.Kind == persistence.OpPut {
			err = b.Set(k, op.Value, nil)
		} else {
			err = b.Delete(k, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// bucketMin is the smallest run sorted by buckets of slots.
const bucketMin = 4096

// sort orders o.ents by (pre, i). A large run of one database (a change
// log checkpoint: every change of a second) is scattered by slot into
// buckets, stably, and each small bucket is insertion-sorted by pre,
// which keeps run order among equal prefixes: a fraction of a
// comparison sort's cost over hundreds of thousands of entries.
func (o *opOrder) sort() {
	ents := o.ents
	db := ents[0].pre >> 48
	oneDB := len(ents) >= bucketMin
	for i := 1; oneDB && i < len(ents); i++ {
		oneDB = ents[i].pre>>48 == db
	}
	if !oneDB {
		slices.SortFunc(ents, func(x, y opEnt) int {
			if x.pre != y.pre {
				return cmp.Compare(x.pre, y.pre)
			}
			return x.i - y.i
		})
		return
	}
	const nslot = 1 << 14
	if o.start == nil {
		o.start = make([]int32, nslot+1)
	}
	clear(o.start)
	for _, e := range ents {
		o.start[(e.pre>>32)&(nslot-1)+1]++
	}
	for i := 1; i <= nslot; i++ {
		o.start[i] += o.start[i-1]
	}
	o.tmp = slices.Grow(o.tmp[:0], len(ents))[:len(ents)]
	pos := o.start
	for _, e := range ents {
		s := (e.pre >> 32) & (nslot - 1)
		o.tmp[pos[s]] = e
		pos[s]++
	}
	// pos[s] is now the end of bucket s: the start of bucket s+1.
	lo := 0
	for s := 0; s < nslot; s++ {
		hi := int(pos[s])
		b := o.tmp[lo:hi]
		for i := 1; i < len(b); i++ {
			for j := i; j > 0 && b[j].pre < b[j-1].pre; j-- {
				b[j], b[j-1] = b[j-1], b[j]
			}
		}
		lo = hi
	}
	o.ents, o.tmp = o.tmp, ents
}

// deleteLastDB adds to the indexed batch b the deletion of every record of
// db MaxDB visible to it.
func deleteLastDB(b *pebble.Batch) error {
	start := dbPrefix(persistence.MaxDB)
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: start})
	if err != nil {
		return err
	}
	var end []byte
	if it.Last() {
		end = append(bytes.Clone(it.Key()), 0) // the key's successor
	}
	if err := errors.Join(it.Error(), it.Close()); err != nil {
		return err
	}
	if end == nil {
		return nil
	}
	return b.DeleteRange(start, end, nil)
}

// Sync implements Store: it commits an empty LogData record with
// pebble.Sync, which fsyncs the WAL and with it every earlier batch. After
// a failure it first reopens the database (see Store).
func (p *Store) Sync() error {
	return p.use("sync", func(db *pebble.DB, in *instance) error {
		p.tailMu.Lock()
		defer p.tailMu.Unlock()
		return p.syncTailLocked(db, in)
	})
}

// syncTailLocked fsyncs the WAL (an empty LogData record with pebble.Sync)
// and, once that succeeded, forgets the unsynced tail; p.tailMu is held.
func (p *Store) syncTailLocked(db *pebble.DB, in *instance) error {
	if err := db.LogData(nil, pebble.Sync); err != nil {
		return p.wrap("sync", err)
	}
	if err := in.err(); err != nil {
		return err
	}
	p.tail = p.tail[:0]
	return nil
}

// Load implements Store; the iterator reads a consistent snapshot.
func (p *Store) Load(fn func(db int, key, value []byte) error) error {
	return p.scanRecords(dbPrefix(0), nil, func(k, v []byte) error {
		return fn(int(binary.BigEndian.Uint16(k)), k[recordPrefix:], v)
	})
}

// scanRecords calls fn for every record from lower to upper (nil: to the
// end), in key order, from a consistent snapshot: k is the whole record
// key (checked by checkRecordKey), v its value, both valid during the call
// only. An error of fn stops the scan and is returned as it is, not taken
// for a pebble failure.
func (p *Store) scanRecords(lower, upper []byte, fn func(k, v []byte) error) error {
	var fnErr error
	err := p.use("read", func(db *pebble.DB, _ *instance) error {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
		if err != nil {
			return p.wrap("read", err)
		}
		defer it.Close()
		for ok := it.First(); ok; ok = it.Next() {
			k := it.Key()
			if err := p.checkRecordKey(k); err != nil {
				return err
			}
			v, err := it.ValueAndErr()
			if err != nil {
				return p.wrap("read", err)
			}
			if fnErr = fn(k, v); fnErr != nil {
				return nil
			}
		}
		if err := it.Error(); err != nil {
			return p.wrap("read", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return fnErr
}

// checkRecordKey reports a key that is not a record key of format 2: too
// short, or filed under another slot than its own.
func (p *Store) checkRecordKey(k []byte) error {
	if len(k) < recordPrefix {
		return fmt.Errorf("%w: %s: key %q outside the record space", persistence.ErrCorrupt, p.dir, k)
	}
	if slot := binary.BigEndian.Uint16(k[2:]); slot != keyslot.Of(k[recordPrefix:]) {
		return fmt.Errorf("%w: %s: key %q of database %d is filed under slot %d, its slot is %d", persistence.ErrCorrupt, p.dir,
			k[recordPrefix:], binary.BigEndian.Uint16(k), slot, keyslot.Of(k[recordPrefix:]))
	}
	return nil
}

// LoadSlot calls fn for every record of database db in hash slot slot, in
// key order, from a consistent snapshot, reading that slot's range only;
// fn must copy key and value to keep them. It is Load for one slot (to
// copy a slot's state elsewhere).
func (p *Store) LoadSlot(db int, slot uint16, fn func(key, value []byte) error) error {
	if db < 0 || db > persistence.MaxDB || slot >= keyslot.Slots {
		return fmt.Errorf("persistence: LoadSlot: db %d or slot %d out of range", db, slot)
	}
	lower := slotPrefix(db, slot)
	var upper []byte
	if db < persistence.MaxDB || slot < keyslot.Slots-1 {
		upper = binary.BigEndian.AppendUint32(nil, binary.BigEndian.Uint32(lower)+1)
	}
	return p.scanRecords(lower, upper, func(k, v []byte) error { return fn(k[recordPrefix:], v) })
}

// DiskUsage implements Store with pebble's metrics (DiskSpaceUsage): WAL,
// tables, manifest and OPTIONS files, and the obsolete files that pebble
// has yet to delete in the background, so it falls some time after a
// Compact, not at once. It is 0 once closed.
//
// Pebble's metrics take its mutex, which pebble may hold forever if it
// panicked holding it (see Store), so they are read on a goroutine of
// their own, one at a time: if they take more than usageWait, or the
// database is broken, DiskUsage returns the last figure read.
func (p *Store) DiskUsage() int64 {
	p.mu.RLock()
	db, in, closed := p.db, p.in, p.closed
	p.mu.RUnlock()
	if closed {
		return 0
	}
	if db == nil || in.err() != nil || !in.usageBusy.CompareAndSwap(false, true) {
		return p.lastUsage.Load()
	}
	done := make(chan struct{})
	go func() {
		defer in.usageBusy.Store(false)
		defer close(done)
		_ = p.guard(in, "read metrics of", func() error {
			p.lastUsage.Store(int64(db.Metrics().DiskSpaceUsage()))
			return nil
		})
	}()
	t := time.NewTimer(usageWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	return p.lastUsage.Load()
}

// usageWait bounds how long DiskUsage waits for pebble's metrics.
const usageWait = time.Second

// WALDamage returns what the check of the newest WAL found when the store
// was opened: damage, when Options.LoadDamagedWAL let it open.
func (p *Store) WALDamage() persistence.WALDamage {
	return p.walDamage
}

// Reopened returns how many times the database was replaced after a
// failure, and how many of those were left open (see Store).
func (p *Store) Reopened() (reopened, abandoned int64) {
	return p.reopened.Load(), p.abandoned.Load()
}

// Flush writes pebble's memtables to tables (persistence.Flusher): the
// next open then reads tables instead of replaying the WAL.
func (p *Store) Flush() error {
	return p.use("flush", func(db *pebble.DB, _ *instance) error {
		if err := db.Flush(); err != nil {
			return p.wrap("flush", err)
		}
		return nil
	})
}

// Close implements Store. It closes pebble, which does not flush the
// memtable (the WAL holds it and is replayed at the next open), and
// releases the directory's lock. A panic in pebble becomes its error.
func (p *Store) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var err error
	if p.db != nil {
		err = p.closeDB(p.db, p.in)
		p.db, p.in = nil, nil
	}
	if lerr := p.lock.Close(); lerr != nil && err == nil {
		err = lerr
	}
	if p.id != nil {
		unregisterDir(p.id)
	}
	if err != nil {
		return fmt.Errorf("persistence: close %s: %w", p.dir, err)
	}
	return nil
}

// pebbleLogger sends pebble's messages to slog, for one instance.
//
// Fatalf, which pebble calls when it cannot go on, panics with pebbleFatal
// while the instance is being opened (openRecovering recovers it: the
// directory is damaged). Otherwise it marks the instance broken and
// returns: pebble calls it from its own goroutines too (a MANIFEST write
// failing in a flush), where a panic would end the process, and pebble
// goes on with the error it had; the next Write or Sync fails and replaces
// the instance.
type pebbleLogger struct {
	l   *slog.Logger
	in  *instance
	dir string
}

type pebbleFatal struct{ msg string }

func (l pebbleLogger) Infof(format string, args ...any) {
	l.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	if l.in.fenced.Load() {
		return
	}
	l.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !l.in.fenced.Load() {
		l.l.Error(msg, "component", "pebble", "fatal", true)
	}
	if opening() {
		panic(pebbleFatal{msg})
	}
	l.in.fail(fmt.Errorf("persistence: %s: pebble failed: %s", l.dir, msg))
}

// opening reports whether the calling goroutine is in openRecovering.
func opening() bool {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, ".openRecovering") {
			return true
		}
		if !more {
			return false
		}
	}
}

// OpenStore is Open as a persistence.Opener (server.Config.OpenStore).
func OpenStore(dir string, opts persistence.OpenOptions) (persistence.Store, error) {
	s, err := Open(dir, Options{Logger: opts.Logger, LoadDamagedWAL: opts.LoadDamagedWAL})
	if err != nil {
		return nil, err
	}
	return s, nil
}

var (
	_ persistence.Opener     = OpenStore
	_ persistence.WALChecker = (*Store)(nil)
)

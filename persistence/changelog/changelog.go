// Package changelog is a PROTOTYPE (issue 17) of a cheaper write path for
// cellserver's persistence: a Store that wraps another one (pebblestore)
// and keeps the changes in a change log of its own instead of inserting
// every change into the wrapped store.
//
//   - Write appends the batch's ops to the current log segment with one
//     write(2) (each record: length, CRC32C, kind, db, key, value), fsyncs
//     it when asked (fsync always), and keeps the records in memory too.
//   - Sync fsyncs the current segment (fsync everysec: the Writer calls it
//     once a second).
//   - Every CheckpointInterval (sooner past MaxBytes of records) and on
//     Close, a checkpoint rotates to a new segment, writes the rotated
//     segment's ops to the wrapped store as one batch, syncs it, then
//     deletes the older segments. pebblestore sorts a batch and keeps the
//     last change of each key (coalescing), so a key written many times
//     between two checkpoints is inserted into pebble once. (A map of the
//     latest op per key, updated by every Write, was tried first: its
//     lookups cost 18% of the CPU under CL.THROTTLE over 100k random
//     keys, as much as the pebble inserts they saved.)
//   - Open replays the remaining segments, in order, into the wrapped
//     store (values are absolute states, so replaying changes the store
//     already has is harmless), syncs it and deletes them. A torn last
//     record is the end of the log; damage followed by intact records is
//     refused with ErrCorrupt unless OpenOptions.LoadDamagedWAL.
//
// cmd/cellserver uses it when the environment variable CELLSERVER_CHANGELOG
// is 1; otherwise nothing changes.
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cellserver/cellserver/persistence"
)

// EnvSwitch is the environment variable that turns the change log on in
// cmd/cellserver ("1").
const EnvSwitch = "CELLSERVER_CHANGELOG"

// Subdir is the change log's directory inside the data directory.
const Subdir = "changelog"

// segMagic starts every segment file.
var segMagic = []byte("CSCLOG01")

const (
	recHeader  = 8 // uint32 payload length, uint32 CRC32C of the payload (little-endian)
	minPayload = 4 // kind, db (2 bytes), key length (uvarint, >= 1 byte)
	maxPayload = 64 << 20
	segSuffix  = ".clog"
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Options tune a Store; zero fields take the defaults.
type Options struct {
	// CheckpointInterval: how often the logged changes go to the
	// wrapped store (default 1 s).
	CheckpointInterval time.Duration
	// MaxBytes forces a checkpoint once the current segment's records
	// (kept in memory too) take more (default 64 MiB).
	MaxBytes int64
}

func (o Options) withDefaults() Options {
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = time.Second
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 64 << 20
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

// frozen is the records of a rotated segment, kept in memory until a
// checkpoint has written them to the wrapped store.
type frozen struct {
	recs []byte // the segment's records (without the header)
	seg  uint64
}

// Store is the change log in front of a wrapped Store.
type Store struct {
	inner persistence.Store
	dir   string // the segments' directory
	log   *slog.Logger
	o     Options

	mu     sync.Mutex // guards the fields below
	f      *os.File
	seg    uint64
	off    int64
	recs   []byte // the current segment's records, as written to it
	spare  []byte // a checkpointed segment's buffer, for the next rotation
	closed bool

	rotMu   sync.Mutex // held by Sync and by a rotation: Sync covers every completed Write
	syncErr error      // a failed fsync of a rotated segment; guarded by rotMu

	ckMu    sync.Mutex // one checkpoint at a time; guards pending and ckOps
	pending []frozen
	ckOps   []persistence.Op // the checkpoint's batch, reused

	kick chan struct{}
	stop chan struct{}
	done chan struct{}

	stats struct {
		sync.Mutex
		checkpoints, replayed int64
		lastChanges           int
		lastDur               time.Duration
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
	s := &Store{inner: st, dir: filepath.Join(dir, Subdir), log: log, o: o.withDefaults(),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return nil, fmt.Errorf("persistence: change log directory: %w", err)
	}
	last, err := s.replay(opts.LoadDamagedWAL)
	if err != nil {
		return nil, err
	}
	if err := s.newSegment(last + 1); err != nil {
		return nil, err
	}
	go s.loop()
	return s, nil
}

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
	p := dst[start+recHeader:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(p)))
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(p, crcTable))
	return dst
}

// replay applies every segment in dir to the wrapped store, syncs it and
// deletes the segments; it returns the last segment number (0 if none).
func (s *Store) replay(loadDamaged bool) (uint64, error) {
	segs, err := segments(s.dir)
	if err != nil || len(segs) == 0 {
		return 0, err
	}
	start := time.Now()
	var batch []persistence.Op
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := s.inner.Write(batch, false)
		batch = batch[:0]
		return err
	}
	total := 0
	for i, n := range segs {
		name := segName(s.dir, n)
		data, err := os.ReadFile(name)
		if err != nil {
			return 0, fmt.Errorf("persistence: change log: %w", err)
		}
		end, perr := Parse(name, data, func(op persistence.Op) error {
			batch = append(batch, op)
			total++
			if len(batch) >= 4096 {
				return flush()
			}
			return nil
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
			if err := flush(); err != nil {
				return 0, err
			}
			segs = segs[:i+1] // later segments are dropped too (deleted below)
			lastSeg = true
		case perr != nil:
			return 0, perr
		case end < int64(len(data)) && !lastSeg:
			// A torn tail before a later segment: the rotation syncs a
			// segment before the next one is written, so this is damage.
			return 0, fmt.Errorf("%w: change log %s ends in a torn record at offset %d, but later segments follow", persistence.ErrCorrupt, name, end)
		case end < int64(len(data)):
			s.log.Info("persistence: change log ends in a torn record (a crash during a write); it is the end of the log", "file", name, "offset", end)
		}
		if err := flush(); err != nil {
			return 0, err
		}
		if lastSeg {
			break
		}
	}
	if err := s.inner.Sync(); err != nil {
		return 0, err
	}
	all, _ := segments(s.dir)
	for _, n := range all {
		if err := os.Remove(segName(s.dir, n)); err != nil {
			return 0, fmt.Errorf("persistence: change log: %w", err)
		}
	}
	if err := syncDir(s.dir); err != nil {
		return 0, err
	}
	s.log.Info("persistence: replayed change log", "segments", len(segs), "changes", total, "duration", time.Since(start).String())
	s.stats.Lock()
	s.stats.replayed = int64(total)
	s.stats.Unlock()
	return all[len(all)-1], nil
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

// Write implements persistence.Store: one write(2) of the batch's records
// to the current segment (fsynced with sync); the records are kept in
// memory for the next checkpoint.
func (s *Store) Write(ops []persistence.Op, sync bool) error {
	if err := persistence.CheckOps(ops); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return persistence.ErrStoreClosed
	}
	start := len(s.recs)
	for _, op := range ops {
		s.recs = appendRecord(s.recs, op)
	}
	if len(s.recs) > start {
		if _, err := s.f.Write(s.recs[start:]); err != nil {
			// Cut what part of the batch reached the file, so that the
			// retry's records follow the last intact one.
			if terr := s.f.Truncate(s.off); terr != nil {
				err = errors.Join(err, terr)
			}
			_, _ = s.f.Seek(s.off, io.SeekStart)
			s.recs = s.recs[:start]
			s.mu.Unlock()
			return fmt.Errorf("persistence: change log write: %w", err)
		}
		s.off += int64(len(s.recs) - start)
	}
	if sync {
		if err := syncData(s.f); err != nil {
			// The records are in the file; a retry appends them again,
			// which replays to the same state.
			s.mu.Unlock()
			return fmt.Errorf("persistence: change log sync: %w", err)
		}
	}
	full := int64(len(s.recs)) >= s.o.MaxBytes
	s.mu.Unlock()
	if full {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// Sync implements persistence.Store: it fsyncs the current segment (the
// rotated ones were synced by their rotation).
func (s *Store) Sync() error {
	s.rotMu.Lock()
	defer s.rotMu.Unlock()
	if s.syncErr != nil {
		return s.syncErr
	}
	s.mu.Lock()
	f, closed := s.f, s.closed
	s.mu.Unlock()
	if closed {
		return persistence.ErrStoreClosed
	}
	if err := syncData(f); err != nil {
		return fmt.Errorf("persistence: change log sync: %w", err)
	}
	return nil
}

// loop checkpoints every CheckpointInterval, or sooner when kicked.
func (s *Store) loop() {
	defer close(s.done)
	t := time.NewTicker(s.o.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		case <-s.kick:
		}
		if err := s.Checkpoint(); err != nil {
			s.log.Error("persistence: change log checkpoint failed; its segments are kept and written again at the next one", "err", err)
		}
	}
}

// Checkpoint rotates to a new segment, writes the changes of
// the older segments to the wrapped store, syncs it and deletes those
// segments.
func (s *Store) Checkpoint() error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	start := time.Now()
	if err := s.rotate(); err != nil {
		return err
	}
	if len(s.pending) == 0 {
		return nil
	}
	keys := 0
	ops := s.ckOps
	defer func() {
		clear(ops[:cap(ops)]) // drop references into the segment buffers
		s.ckOps = ops[:0]
	}()
	for _, p := range s.pending {
		// The segment's records, in order, as one batch: the wrapped
		// store sorts them and keeps the last change of each key.
		ops = ops[:0]
		if _, err := parseRecords("memory", p.recs, 0, func(op persistence.Op) error {
			ops = append(ops, op)
			return nil
		}); err != nil {
			return err
		}
		keys += len(ops)
		if err := s.inner.Write(ops, false); err != nil {
			return err
		}
	}
	if err := s.inner.Sync(); err != nil {
		return err
	}
	for _, p := range s.pending {
		if err := os.Remove(segName(s.dir, p.seg)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("persistence: change log: %w", err)
		}
	}
	if last := s.pending[len(s.pending)-1].recs; int64(cap(last)) <= 2*s.o.MaxBytes {
		// Reused by the next rotation: the segment buffer does not grow
		// from nothing (copying itself) every second.
		s.mu.Lock()
		if s.spare == nil {
			s.spare = last[:0]
		}
		s.mu.Unlock()
	}
	s.pending = nil
	if err := syncDir(s.dir); err != nil {
		return err
	}
	s.stats.Lock()
	s.stats.checkpoints++
	s.stats.lastChanges, s.stats.lastDur = keys, time.Since(start)
	s.stats.Unlock()
	return nil
}

// rotate moves the current segment and its records to s.pending and
// starts a new segment, unless nothing was written since the last one.
// The old segment is fsynced before any write reaches the new one, so a
// torn record can only end the newest segment.
func (s *Store) rotate() error {
	s.rotMu.Lock()
	defer s.rotMu.Unlock()
	s.mu.Lock()
	if s.closed || len(s.recs) == 0 {
		s.mu.Unlock()
		return nil
	}
	f := s.f
	s.mu.Unlock()
	// Most of the segment is synced without blocking Write; the rest
	// under s.mu, with the swap.
	if err := syncData(f); err != nil {
		s.syncErr = fmt.Errorf("persistence: change log sync: %w", err)
		return s.syncErr
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := syncData(s.f); err != nil {
		s.syncErr = fmt.Errorf("persistence: change log sync: %w", err)
		return s.syncErr
	}
	old, oldSeg, recs := s.f, s.seg, s.recs
	if err := s.newSegment(oldSeg + 1); err != nil {
		return err
	}
	if err := syncDir(s.dir); err != nil {
		return err
	}
	old.Close()
	s.recs, s.spare = s.spare, nil
	s.pending = append(s.pending, frozen{recs: recs, seg: oldSeg})
	return nil
}

// Load implements persistence.Store: the change log was replayed into the
// wrapped store when it opened, and changes since are in both the log and
// memory; Load reads the wrapped store after a checkpoint.
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

// Compact implements persistence.Store.
func (s *Store) Compact() error { return s.inner.Compact() }

// WALDamage forwards the wrapped store's WAL check, if it has one.
func (s *Store) WALDamage() persistence.WALDamage {
	if wc, ok := s.inner.(persistence.WALChecker); ok {
		return wc.WALDamage()
	}
	return persistence.WALDamage{}
}

// Stats are the change log's figures.
type Stats struct {
	Checkpoints    int64
	LastCheckpoint time.Duration
	LastChanges    int
	Replayed       int64
	Segment        uint64
	SegmentBytes   int
}

// Stats returns the current figures.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := Stats{Segment: s.seg, SegmentBytes: len(s.recs)}
	s.mu.Unlock()
	s.stats.Lock()
	st.Checkpoints, st.LastCheckpoint, st.LastChanges, st.Replayed = s.stats.checkpoints, s.stats.lastDur, s.stats.lastChanges, s.stats.replayed
	s.stats.Unlock()
	return st
}

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
	err := s.Checkpoint()
	s.rotMu.Lock()
	s.mu.Lock()
	s.closed = true
	f, empty := s.f, len(s.recs) == 0
	s.mu.Unlock()
	s.rotMu.Unlock()
	f.Close()
	if err == nil && empty {
		os.Remove(f.Name())
		_ = syncDir(s.dir)
	}
	if err != nil {
		s.log.Error("persistence: final change log checkpoint failed; the change log is kept and replayed at the next start", "err", err)
	}
	return errors.Join(err, s.inner.Close())
}

var (
	_ persistence.Store      = (*Store)(nil)
	_ persistence.WALChecker = (*Store)(nil)
)

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

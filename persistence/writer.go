package persistence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/keyspace"
)

// Fsync says when written changes are forced to disk.
type Fsync int

// The fsync policies, as Redis's appendfsync.
const (
	// FsyncEverySec syncs once a second: a crash loses at most about the
	// last second of changes. The default.
	FsyncEverySec Fsync = iota
	// FsyncAlways syncs every batch before the replies of its commands are
	// sent (group commit: every client waiting on a batch shares one sync).
	FsyncAlways
	// FsyncNo never syncs explicitly: the operating system decides.
	FsyncNo
)

// ParseFsync maps "always", "everysec" or "no" to a policy.
func ParseFsync(s string) (Fsync, error) {
	switch s {
	case "always":
		return FsyncAlways, nil
	case "everysec", "":
		return FsyncEverySec, nil
	case "no":
		return FsyncNo, nil
	}
	return 0, fmt.Errorf("persistence: fsync %q: must be always, everysec or no", s)
}

func (f Fsync) String() string {
	switch f {
	case FsyncAlways:
		return "always"
	case FsyncNo:
		return "no"
	}
	return "everysec"
}

// ErrWriterClosed is returned by WaitDurable once the Writer is closed or failed.
var ErrWriterClosed = errors.New("persistence: writer closed")

// flushInterval is how often queued changes are written when nobody waits
// for them (fsync everysec or no).
const flushInterval = 5 * time.Millisecond

// Writer is the write path: it implements keyspace.Journal, so every change
// is encoded and queued, in order, while the shard lock is held; a
// background goroutine (Run) writes the queue to the Store in batches, off
// the requests' path. One queue for all shards keeps changes in the order
// they happened, so an older state never overwrites a newer one, and
// FLUSHDB's range deletion is ordered with the puts around it.
//
// Writer is safe for concurrent use.
type Writer struct {
	store Store
	mode  Fsync
	log   *slog.Logger
	wake  chan struct{}

	mu      sync.Mutex // guards queue, arena, seq, spare*
	queue   []Op
	arena   []byte // keys and encoded values of queue
	seq     uint64 // changes queued so far
	spareQ  []Op
	spareAr []byte

	durMu   sync.Mutex // guards durable, failed; durCond waits on it
	durCond *sync.Cond
	durable uint64 // changes written (and synced, with FsyncAlways)
	failed  error

	written  atomic.Uint64
	lastWr   atomic.Int64   // unix ns of the last batch written
	lastSync atomic.Int64   // unix ns of the last sync
	flushNS  atomic.Int64   // duration of the last batch write
	syncNS   atomic.Int64   // duration of the last sync
	syncing  atomic.Bool    // an everysec sync is running
	syncWG   sync.WaitGroup // the running everysec sync
	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
}

// NewWriter returns a Writer for store; call Run to start writing.
func NewWriter(store Store, mode Fsync, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	w := &Writer{store: store, mode: mode, log: log, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	w.durCond = sync.NewCond(&w.durMu)
	return w
}

// Mode returns the fsync policy.
func (w *Writer) Mode() Fsync { return w.mode }

func (w *Writer) enqueue(kind OpKind, db int, key []byte, v *keyspace.Value) {
	w.mu.Lock()
	start := len(w.arena)
	w.arena = append(w.arena, key...)
	op := Op{Kind: kind, DB: db}
	if key != nil {
		op.Key = w.arena[start:len(w.arena):len(w.arena)]
	}
	if v != nil {
		vs := len(w.arena)
		w.arena = EncodeValue(w.arena, *v)
		// If EncodeValue grew the arena, op.Key still points into the
		// old array, which stays valid (nothing writes to it again).
		op.Value = w.arena[vs:len(w.arena):len(w.arena)]
	}
	w.queue = append(w.queue, op)
	w.seq++
	w.mu.Unlock()
	if w.mode == FsyncAlways {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// Put implements keyspace.Journal.
func (w *Writer) Put(db int, key []byte, v *keyspace.Value) { w.enqueue(OpPut, db, key, v) }

// Delete implements keyspace.Journal.
func (w *Writer) Delete(db int, key []byte) { w.enqueue(OpDelete, db, key, nil) }

// DeleteDB implements keyspace.Journal.
func (w *Writer) DeleteDB(db int) { w.enqueue(OpDeleteDB, db, nil, nil) }

// DeleteAll implements keyspace.Journal.
func (w *Writer) DeleteAll() { w.enqueue(OpDeleteAll, 0, nil, nil) }

// Seq returns the number of changes queued so far: a change is durable
// once WaitDurable(its Seq) returns.
func (w *Writer) Seq() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq
}

// WaitDurable blocks until the first seq changes are written (and synced
// with FsyncAlways), or the writer failed or closed.
func (w *Writer) WaitDurable(seq uint64) error {
	w.durMu.Lock()
	defer w.durMu.Unlock()
	for w.durable < seq && w.failed == nil {
		w.durCond.Wait()
	}
	if w.durable >= seq {
		return nil
	}
	return w.failed
}

// Run writes queued changes until ctx ends or Close is called, then writes
// and syncs what is left.
func (w *Writer) Run(ctx context.Context) {
	defer close(w.done)
	tick := time.NewTicker(flushInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			w.final()
			return
		case <-w.stop:
			w.final()
			return
		case <-w.wake:
		case <-tick.C:
		}
		w.flush()
	}
}

func (w *Writer) final() {
	w.flush()
	w.syncWG.Wait()
	if err := w.syncNow(); err != nil {
		w.fail(err)
	}
	w.fail(ErrWriterClosed)
}

// Close writes and syncs every queued change and stops Run; it waits for
// Run to finish if it is running.
func (w *Writer) Close() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

func (w *Writer) fail(err error) {
	w.durMu.Lock()
	if w.failed == nil {
		w.failed = err
	}
	w.durMu.Unlock()
	w.durCond.Broadcast()
}

// flush writes the queue as one batch.
func (w *Writer) flush() {
	w.mu.Lock()
	ops, arena, seq := w.queue, w.arena, w.seq
	w.queue, w.arena = w.spareQ[:0], w.spareAr[:0]
	w.mu.Unlock()
	if len(ops) > 0 {
		start := time.Now()
		if err := w.store.Write(ops, w.mode == FsyncAlways); err != nil {
			w.log.Error("persistence: write failed; stopping writes", "err", err)
			w.fail(fmt.Errorf("persistence: %w", err))
			return
		}
		now := time.Now()
		w.flushNS.Store(int64(now.Sub(start)))
		w.lastWr.Store(now.UnixNano())
		if w.mode == FsyncAlways {
			w.syncNS.Store(int64(now.Sub(start)))
			w.lastSync.Store(now.UnixNano())
		}
		w.written.Add(uint64(len(ops)))
	}
	if w.mode == FsyncEverySec && time.Since(time.Unix(0, w.lastSync.Load())) >= time.Second && w.syncing.CompareAndSwap(false, true) {
		// Sync in the background, one at a time, so that a slow fsync
		// does not stop later batches from reaching the store.
		w.syncWG.Add(1)
		go func() {
			defer w.syncWG.Done()
			defer w.syncing.Store(false)
			if err := w.syncNow(); err != nil {
				w.log.Error("persistence: sync failed", "err", err)
			}
		}()
	}
	// Keep the buffers for the next swap unless they grew large.
	for i := range ops {
		ops[i] = Op{}
	}
	w.mu.Lock()
	if cap(ops) <= 1<<16 {
		w.spareQ = ops[:0]
	}
	if cap(arena) <= 8<<20 {
		w.spareAr = arena[:0]
	}
	w.mu.Unlock()
	w.durMu.Lock()
	if seq > w.durable {
		w.durable = seq
	}
	w.durMu.Unlock()
	w.durCond.Broadcast()
}

func (w *Writer) syncNow() error {
	start := time.Now()
	err := w.store.Sync()
	if err == nil {
		now := time.Now()
		w.syncNS.Store(int64(now.Sub(start)))
		w.lastSync.Store(now.UnixNano())
	}
	return err
}

// WriterStats are the write path's figures for INFO and metrics.
type WriterStats struct {
	Mode          Fsync
	Pending       int    // changes queued, not yet written
	Written       uint64 // changes written since start
	LastWrite     time.Time
	LastSync      time.Time
	LastWriteTime time.Duration
	LastSyncTime  time.Duration
	Err           error
}

// Stats returns the current figures.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	pending := len(w.queue)
	w.mu.Unlock()
	w.durMu.Lock()
	err := w.failed
	w.durMu.Unlock()
	if errors.Is(err, ErrWriterClosed) {
		err = nil
	}
	ts := func(ns int64) time.Time {
		if ns == 0 {
			return time.Time{}
		}
		return time.Unix(0, ns)
	}
	return WriterStats{Mode: w.mode, Pending: pending, Written: w.written.Load(),
		LastWrite: ts(w.lastWr.Load()), LastSync: ts(w.lastSync.Load()),
		LastWriteTime: time.Duration(w.flushNS.Load()), LastSyncTime: time.Duration(w.syncNS.Load()), Err: err}
}

package persistence

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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

// ErrWriterClosed is returned by WaitDurable once the Writer is closed.
var ErrWriterClosed = errors.New("persistence: writer closed")

// flushInterval is how often queued changes are written when nobody waits
// for them (fsync everysec or no).
const flushInterval = 5 * time.Millisecond

// The backoff between attempts while the store fails: the first retry
// comes after retryMin, each failure doubles the wait, up to retryMax.
const (
	retryMin = 100 * time.Millisecond
	retryMax = time.Second
)

// The largest buffers kept for the next batch; larger ones are dropped
// after their batch is written, so that one burst does not pin memory.
const (
	maxSpareOps   = 1 << 16
	maxSpareArena = 8 << 20
)

// DefaultMaxPending is the default cap on the bytes of changes queued and
// not yet written (see Writer.Admit).
const DefaultMaxPending = 64 << 20

// opOverhead is what one queued change counts besides its key and value
// bytes (or its record's, with a RecordStore): its Op in the queue.
const opOverhead = int64(unsafe.Sizeof(Op{}))

// Writer is the write path: it implements keyspace.Journal, so every change
// is encoded and queued, in order, while the shard lock is held; a
// background goroutine (Run) writes the queue to the Store in batches, off
// the requests' path. One queue for all shards keeps changes in the order
// they happened, so an older state never overwrites a newer one, and
// FLUSHDB's range deletion is ordered with the puts around it.
//
// When the store fails (a full disk, an I/O error), the batch is kept and
// written again, ahead of everything queued after it, with a backoff of
// retryMin doubling to retryMax, until the store takes it; meanwhile
// Failing reports the error (commands then refuse write commands, as
// Redis's MISCONF) and WaitDurable returns it.
//
// The changes queued and not yet written (the queue, the batch being
// written, a batch kept for a retry) are counted in bytes: key, encoded
// value and opOverhead each. Past the cap (SetMaxPending), Admit, called
// before every write command, waits until the store has taken enough of
// them (backpressure: the event loop running the command stops serving
// its clients meanwhile) or until writes fail (then it returns the
// error, so the command is refused). The queue can pass the cap only by
// the changes of the commands already admitted: one per event loop.
//
// Writer is safe for concurrent use.
type Writer struct {
	store Store
	rec   RecordStore // store, when it takes encoded records (nil otherwise)
	mode  Fsync
	log   *slog.Logger
	wake  chan struct{}

	// Each array is owned by exactly one of: the queue, a batch being
	// written (or kept for a retry), the spares. take moves the spares to
	// the queue and clears them; recycle puts a written batch's arrays
	// back only into empty spare slots. So enqueue never appends into an
	// array the store is reading.
	// grp is held shared by a group of changes (BeginGroup, EndGroup)
	// and exclusively by take, so that a batch never ends inside a group.
	grp     sync.RWMutex
	mu      sync.Mutex // guards queue, arena, seq, taken, qbytes, spare*
	queue   []Op
	arena   []byte // keys and encoded values of queue
	seq     uint64 // changes queued so far
	taken   uint64 // changes handed to batches so far
	qbytes  int64  // what queue's changes count in pending
	spareQ  []Op
	spareAr []byte

	// Run's own state, touched only by its goroutine.
	retry    *batch // a batch the store refused, written before anything newer
	backoff  time.Duration
	nextTry  time.Time
	attempts int // failed attempts in the current failure

	durMu      sync.Mutex // guards the fields below; durCond waits on it
	durCond    *sync.Cond
	durable    uint64 // changes written (and synced, with FsyncAlways)
	err        error  // the store's last error while failing; nil when writes succeed
	syncFailed bool   // a Sync failed and no Sync has succeeded since
	inRange    bool   // failLo..failHi belong to the current failure
	failLo     uint64 // the changes of the batches refused during the
	failHi     uint64 // latest failure: their waiters get failErr
	failErr    error
	failedAt   time.Time // when the current failure began
	closed     bool
	// synced counts the changes known synced to disk (WAITAOF): written
	// with FsyncAlways, or written before a Sync that succeeded.
	synced      uint64
	syncWaiters []*syncWaiter

	failing  atomic.Pointer[error] // err, for Failing (read per command)
	pending  atomic.Int64          // bytes of the changes queued or being written (see opOverhead)
	maxPend  int64                 // the cap on pending; set before Run
	waits    atomic.Uint64         // Admit and WaitRoom calls that waited for room
	waitNS   atomic.Int64          // time they waited, in total
	failures atomic.Uint64         // failed Write and Sync calls since start

	written  atomic.Uint64
	lastWr   atomic.Int64   // unix ns of the last batch written
	lastSync atomic.Int64   // unix ns of the last sync
	flushNS  atomic.Int64   // duration of the last batch write
	syncNS   atomic.Int64   // duration of the last sync
	syncing  atomic.Bool    // an everysec sync is running
	syncWG   sync.WaitGroup // the running everysec sync
	notify   func()         // OnDurable's function, nil: none
	stopOnce sync.Once
	// runMu guards runState: whether Run started, so that Close of a
	// Writer whose Run never ran does the final round itself instead of
	// waiting for it.
	runMu    sync.Mutex
	runState uint8 // runNotStarted, runRunning or runClosedFirst
	stop     chan struct{}
	done     chan struct{}
}

// A RecordStore is a Store that also takes changes already encoded as its
// own records (changelog.Store): the Writer then encodes each change once,
// as it is queued, and hands the store each batch's bytes as they are,
// with no Op per change. WriteRecords has Write's contract.
type RecordStore interface {
	Store
	// AppendRecord appends the record of one change to dst: v is the
	// new value of an OpPut, nil for the other kinds.
	AppendRecord(dst []byte, kind OpKind, db int, key []byte, v *keyspace.Value) []byte
	// WriteRecords writes n records (as AppendRecord made them, back to
	// back) as one batch.
	WriteRecords(recs []byte, n int, sync bool) error
}

// batch is a run of queued changes handed to the store: the changes
// numbered lo..hi, and the arena their keys and values
// live in.
type batch struct {
	ops    []Op
	arena  []byte
	lo, hi uint64
	bytes  int64 // what the changes count in Writer.pending
}

// NewWriter returns a Writer for store; call Run to start writing.
func NewWriter(store Store, mode Fsync, log *slog.Logger) *Writer {
	if log == nil {
		log = slog.Default()
	}
	w := &Writer{store: store, mode: mode, log: log, wake: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{}), maxPend: DefaultMaxPending}
	w.rec, _ = store.(RecordStore)
	w.durCond = sync.NewCond(&w.durMu)
	return w
}

// Mode returns the fsync policy.
func (w *Writer) Mode() Fsync { return w.mode }

// SetMaxPending sets the cap on the bytes of changes queued and not yet
// written (DefaultMaxPending unless set); n < 1 counts as 1. Call it
// before Run.
func (w *Writer) SetMaxPending(n int64) { w.maxPend = max(n, 1) }

// MaxPending returns the cap set by SetMaxPending.
func (w *Writer) MaxPending() int64 { return w.maxPend }

// Full reports whether the changes queued and not yet written are over the
// cap (keyspace.Room: background work then adds nothing, or waits).
func (w *Writer) Full() bool { return w.pending.Load() > w.maxPend }

// Admit is called before a write command runs: while the changes queued
// and not yet written take more than the cap, it wakes the writer and
// waits until they no longer do, the store fails, or the Writer closes.
// It returns Failing's error (the command is then refused). Without a
// backlog it costs two atomic loads.
func (w *Writer) Admit() error {
	w.WaitRoom()
	return w.Failing()
}

// WaitRoom is Admit without the error: it returns at once unless the
// changes queued and not yet written take more than the cap, and then
// once they no longer do, the store fails, or the Writer closes. A
// replica calls it before applying each change from its primary.
func (w *Writer) WaitRoom() {
	if w.pending.Load() > w.maxPend {
		w.waitRoom()
	}
}

// waitRoom blocks while pending is over the cap and writes succeed.
func (w *Writer) waitRoom() {
	start := time.Now()
	w.poke()
	w.durMu.Lock()
	for w.pending.Load() > w.maxPend && w.err == nil && !w.closed {
		w.durCond.Wait()
	}
	w.durMu.Unlock()
	w.waits.Add(1)
	w.waitNS.Add(int64(time.Since(start)))
}

// poke wakes Run, if it is not awake already.
func (w *Writer) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// enqueue is called with shard locks held: the mutex is released by a
// defer, so a panic in EncodeValue (a bug: a value of an unknown kind)
// reaches the caller without leaving every other writer blocked.
func (w *Writer) enqueue(kind OpKind, db int, key []byte, v *keyspace.Value) {
	w.mu.Lock()
	defer w.mu.Unlock()
	start := len(w.arena)
	if w.rec != nil {
		w.arena = w.rec.AppendRecord(w.arena, kind, db, key, v)
		w.queued(int64(len(w.arena)-start) + opOverhead)
		return
	}
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
	w.queued(int64(len(op.Key)+len(op.Value)) + opOverhead)
}

// queued counts one more change of size bytes; w.mu is held.
func (w *Writer) queued(size int64) {
	w.seq++
	w.qbytes += size
	n := w.pending.Add(size)
	if w.mode == FsyncAlways || n > w.maxPend/2 {
		// With always, a reply waits for this change; past half the cap,
		// write now rather than at the next tick, before Admit must wait.
		w.poke()
	}
}

// BeginGroup implements keyspace.Grouper: the changes queued until
// EndGroup are written in one batch (one write(2) of the change log), so
// that a crash of the process keeps all of them or none; with
// FsyncAlways the fsync covers them together. Groups overlap freely; a
// batch waits for the open ones to end, and new ones wait meanwhile.
func (w *Writer) BeginGroup() { w.grp.RLock() }

// EndGroup implements keyspace.Grouper.
func (w *Writer) EndGroup() { w.grp.RUnlock() }

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

// Failing returns the store's error while writes fail (from the first
// failed Write or Sync until one succeeds again), nil otherwise. It is
// cheap enough to call for every command.
func (w *Writer) Failing() error {
	if p := w.failing.Load(); p != nil {
		return *p
	}
	return nil
}

// WaitDurable blocks until the first seq changes are written (and synced
// with FsyncAlways). It returns an error instead when the store refused a
// batch holding change number seq (even if a retry stored it since), while
// the store fails, or once the Writer is closed with change seq unwritten:
// nil always means stored.
func (w *Writer) WaitDurable(seq uint64) error {
	w.durMu.Lock()
	defer w.durMu.Unlock()
	for {
		switch {
		case w.failErr != nil && w.failLo <= seq && seq <= w.failHi:
			return w.failErr
		case w.durable >= seq:
			return nil
		case w.err != nil:
			return w.err
		case w.closed:
			return ErrWriterClosed
		}
		w.durCond.Wait()
	}
}

// Durable reports whether WaitDurable(seq) would return at once (with nil
// or an error).
func (w *Writer) Durable(seq uint64) bool {
	w.durMu.Lock()
	defer w.durMu.Unlock()
	return w.durable >= seq || w.err != nil || w.closed || (w.failErr != nil && w.failLo <= seq && seq <= w.failHi)
}

// OnDurable registers fn, called after every batch written and whenever
// writes start failing or the Writer closes: whenever Durable may have
// become true for more changes. Call it before Run; fn must be quick.
func (w *Writer) OnDurable(fn func()) { w.notify = fn }

// notified calls the OnDurable function, if any.
func (w *Writer) notified() {
	if w.notify != nil {
		w.notify()
	}
}

// Run writes queued changes until ctx ends or Close is called, then writes
// and syncs what is left.
func (w *Writer) Run(ctx context.Context) {
	w.runMu.Lock()
	if w.runState == runClosedFirst { // Close did the final round
		w.runMu.Unlock()
		return
	}
	w.runState = runRunning
	w.runMu.Unlock()
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
		w.flush(false)
	}
}

// final is Run's last round: one more attempt whatever the backoff, then
// a sync. Changes the store still refuses are logged as lost.
func (w *Writer) final() {
	w.flush(true)
	w.syncWG.Wait()
	if err := w.syncNow(); err != nil {
		w.log.Error("persistence: final sync failed", "err", err)
		w.setFailing(err, true)
	}
	w.mu.Lock()
	seq := w.seq
	w.mu.Unlock()
	w.durMu.Lock()
	w.closed = true
	unwritten := seq - w.durable
	w.durMu.Unlock()
	w.durCond.Broadcast()
	w.notified()
	if unwritten > 0 {
		w.log.Error("persistence: closing while the store fails: changes not written", "changes", unwritten, "err", w.Failing())
	}
}

// The states of Writer.runState.
const (
	runNotStarted = iota
	runRunning
	runClosedFirst // Closed before Run started: Run returns at once
)

// Close writes and syncs every queued change and stops Run; it waits for
// Run to finish if it is running. Closing a Writer whose Run never started
// does Run's final round itself.
func (w *Writer) Close() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.runMu.Lock()
	if w.runState == runNotStarted {
		w.runState = runClosedFirst
		w.runMu.Unlock()
		w.final()
		close(w.done)
		return
	}
	w.runMu.Unlock()
	<-w.done
}

// take hands the queue to a new batch, nil if it is empty; the spare
// buffers become the queue's.
func (w *Writer) take() *batch {
	w.grp.Lock()
	defer w.grp.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.seq == w.taken {
		return nil
	}
	b := &batch{ops: w.queue, arena: w.arena, lo: w.taken + 1, hi: w.seq}
	b.bytes, w.qbytes = w.qbytes, 0
	w.taken = w.seq
	w.queue, w.arena = w.spareQ, w.spareAr
	w.spareQ, w.spareAr = nil, nil
	return b
}

// recycle keeps a written batch's buffers as spares, unless they grew
// large or a spare is already there.
func (w *Writer) recycle(b *batch) {
	clear(b.ops) // drop references into the arena
	w.mu.Lock()
	if w.spareQ == nil && cap(b.ops) <= maxSpareOps {
		w.spareQ = b.ops[:0]
	}
	if w.spareAr == nil && cap(b.arena) <= maxSpareArena {
		w.spareAr = b.arena[:0]
	}
	w.mu.Unlock()
}

// flush writes the batch kept for a retry, if any, then the queue as one
// batch. While the store fails it does nothing before the backoff ends,
// unless final.
func (w *Writer) flush(final bool) {
	if w.Failing() != nil && !final && time.Now().Before(w.nextTry) {
		return
	}
	if w.retry != nil {
		if !w.write(w.retry) {
			return
		}
		w.recycle(w.retry)
		w.retry = nil
	}
	w.durMu.Lock()
	syncFailed := w.syncFailed
	w.durMu.Unlock()
	if syncFailed {
		// The last synced state is unknown: writes count as failing
		// until a sync succeeds.
		if err := w.syncNow(); err != nil {
			w.attemptFailed(err, nil, true)
			return
		}
	}
	if b := w.take(); b != nil {
		if !w.write(b) {
			w.retry = b
			return
		}
		w.recycle(b)
	}
	w.recovered()
	if w.mode == FsyncEverySec && time.Since(time.Unix(0, w.lastSync.Load())) >= time.Second && w.syncing.CompareAndSwap(false, true) {
		// Sync in the background, one at a time, so that a slow fsync
		// does not stop later batches from reaching the store.
		w.syncWG.Add(1)
		go func() {
			defer w.syncWG.Done()
			defer w.syncing.Store(false)
			if err := w.syncNow(); err != nil {
				w.log.Error("persistence: sync failed; refusing write commands until a sync succeeds", "err", err)
				w.setFailing(err, true)
			}
		}()
	}
}

// write writes b; false means the store refused it (b must be kept and
// written again).
func (w *Writer) write(b *batch) bool {
	start := time.Now()
	sync := w.mode == FsyncAlways
	write := func() error { return w.store.Write(b.ops, sync) }
	if w.rec != nil {
		write = func() error { return w.rec.WriteRecords(b.arena, int(b.hi-b.lo+1), sync) }
	}
	if err := guard(write); err != nil {
		w.attemptFailed(err, b, false)
		return false
	}
	now := time.Now()
	w.flushNS.Store(int64(now.Sub(start)))
	w.lastWr.Store(now.UnixNano())
	if w.mode == FsyncAlways {
		w.syncNS.Store(int64(now.Sub(start)))
		w.lastSync.Store(now.UnixNano())
	}
	w.written.Add(b.hi - b.lo + 1)
	w.pending.Add(-b.bytes) // before the broadcast, for Admit's waiters
	w.durMu.Lock()
	if b.hi > w.durable {
		w.durable = b.hi
	}
	var fire []func()
	if sync {
		fire = w.syncedLocked(b.hi)
	}
	w.durMu.Unlock()
	w.durCond.Broadcast()
	w.notified()
	for _, fn := range fire {
		fn()
	}
	return true
}

// attemptFailed records a failed Write (of b) or Sync and schedules the
// next attempt.
func (w *Writer) attemptFailed(err error, b *batch, isSync bool) {
	first := w.setFailing(err, isSync)
	if b != nil {
		w.durMu.Lock()
		if !w.inRange {
			w.inRange, w.failLo = true, b.lo
		}
		w.failHi = max(w.failHi, b.hi)
		w.failErr = w.err
		w.durMu.Unlock()
		w.durCond.Broadcast()
	}
	w.backoff = min(max(2*w.backoff, retryMin), retryMax)
	w.nextTry = time.Now().Add(w.backoff)
	w.attempts++
	what := "write"
	if isSync {
		what = "sync"
	}
	if first {
		w.log.Error("persistence: "+what+" failed; refusing write commands until the store accepts a write again",
			"err", err, "retry_in", w.backoff.String())
	} else {
		w.log.Warn("persistence: "+what+" failed again", "err", err, "attempts", w.attempts, "retry_in", w.backoff.String())
	}
}

// setFailing enters (or stays in) the failing state with err; true if the
// Writer was not failing before.
func (w *Writer) setFailing(err error, isSync bool) bool {
	w.failures.Add(1)
	err = fmt.Errorf("persistence: %w", err)
	w.durMu.Lock()
	first := w.err == nil
	if first {
		w.failedAt = time.Now()
	}
	w.err = err
	if isSync {
		w.syncFailed = true
	}
	w.failing.Store(&err)
	w.durMu.Unlock()
	w.durCond.Broadcast()
	w.notified()
	return first
}

// recovered leaves the failing state after a successful round, unless a
// background sync failed meanwhile.
func (w *Writer) recovered() {
	w.backoff, w.attempts = 0, 0
	w.durMu.Lock()
	if w.err == nil || w.syncFailed {
		w.durMu.Unlock()
		return
	}
	since := w.failedAt
	w.err, w.inRange, w.syncFailed = nil, false, false
	w.failing.Store(nil)
	w.durMu.Unlock()
	w.durCond.Broadcast()
	w.log.Warn("persistence: the store accepts writes again; write commands are accepted", "failed_for", time.Since(since).String())
}

// guard runs a Store call, turning a panic into an error: a store that
// panics (whatever its contract says) makes writes fail, it does not end
// the process.
func guard(call func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("store panicked: %v", v)
		}
	}()
	return call()
}

// syncNow syncs the store; a success ends a sync failure.
func (w *Writer) syncNow() error {
	start := time.Now()
	w.durMu.Lock()
	written := w.durable // what this sync covers, at least
	w.durMu.Unlock()
	if err := guard(w.store.Sync); err != nil {
		return err
	}
	now := time.Now()
	w.syncNS.Store(int64(now.Sub(start)))
	w.lastSync.Store(now.UnixNano())
	w.durMu.Lock()
	w.syncFailed = false
	fire := w.syncedLocked(written)
	w.durMu.Unlock()
	for _, fn := range fire {
		fn()
	}
	return nil
}

// syncWaiter is an OnSynced call waiting.
type syncWaiter struct {
	seq uint64
	fn  func()
}

// syncedLocked records that the first seq changes are synced and returns
// the functions of the waiters that are done, to be called without
// durMu.
func (w *Writer) syncedLocked(seq uint64) []func() {
	if seq <= w.synced {
		return nil
	}
	w.synced = seq
	var fire []func()
	kept := w.syncWaiters[:0]
	for _, sw := range w.syncWaiters {
		if sw.seq <= seq {
			fire = append(fire, sw.fn)
		} else {
			kept = append(kept, sw)
		}
	}
	clear(w.syncWaiters[len(kept):])
	w.syncWaiters = kept
	return fire
}

// Synced reports whether the first seq changes are synced to disk
// (WAITAOF's local count): with FsyncAlways once written, with
// FsyncEverySec after the next sync (within about a second), with
// FsyncNo only when the Writer closes.
func (w *Writer) Synced(seq uint64) bool {
	w.durMu.Lock()
	defer w.durMu.Unlock()
	return w.synced >= seq
}

// OnSynced calls fn, once, on another goroutine or the caller's, when the
// first seq changes are synced. cancel forgets fn (a client that left, a
// WAITAOF that timed out).
func (w *Writer) OnSynced(seq uint64, fn func()) (cancel func()) {
	w.durMu.Lock()
	if w.synced >= seq {
		w.durMu.Unlock()
		fn()
		return func() {}
	}
	sw := &syncWaiter{seq: seq, fn: fn}
	w.syncWaiters = append(w.syncWaiters, sw)
	w.durMu.Unlock()
	return func() {
		w.durMu.Lock()
		defer w.durMu.Unlock()
		if i := slices.Index(w.syncWaiters, sw); i >= 0 {
			w.syncWaiters = slices.Delete(w.syncWaiters, i, i+1)
		}
	}
}

// WriterStats are the write path's figures for INFO and metrics.
type WriterStats struct {
	Mode          Fsync
	Pending       int    // changes queued or refused, not yet written
	Written       uint64 // changes written since start
	LastWrite     time.Time
	LastSync      time.Time
	LastWriteTime time.Duration
	LastSyncTime  time.Duration
	// Err is the store's error while writes fail (write commands are
	// refused), nil when they succeed.
	Err error
	// PendingBytes counts the changes of Pending as Admit does, against
	// MaxPending; BackpressureWaits counts the write commands that waited
	// for room, BackpressureWait their total wait.
	PendingBytes      int64
	MaxPending        int64
	BackpressureWaits uint64
	BackpressureWait  time.Duration
	// FailingSince is when the current failure began (zero when Err is
	// nil); Failures counts the failed Write and Sync calls since start.
	FailingSince time.Time
	Failures     uint64
}

// Stats returns the current figures.
func (w *Writer) Stats() WriterStats {
	w.mu.Lock()
	seq := w.seq
	w.mu.Unlock()
	w.durMu.Lock()
	err, since, durable := w.err, w.failedAt, w.durable
	w.durMu.Unlock()
	pending := 0
	if seq > durable {
		pending = int(seq - durable)
	}
	if err == nil {
		since = time.Time{}
	}
	ts := func(ns int64) time.Time {
		if ns == 0 {
			return time.Time{}
		}
		return time.Unix(0, ns)
	}
	return WriterStats{Mode: w.mode, Pending: pending, Written: w.written.Load(),
		LastWrite: ts(w.lastWr.Load()), LastSync: ts(w.lastSync.Load()),
		LastWriteTime: time.Duration(w.flushNS.Load()), LastSyncTime: time.Duration(w.syncNS.Load()),
		Err: err, FailingSince: since, Failures: w.failures.Load(),
		PendingBytes: w.pending.Load(), MaxPending: w.maxPend,
		BackpressureWaits: w.waits.Load(), BackpressureWait: time.Duration(w.waitNS.Load())}
}

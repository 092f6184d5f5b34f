package persistence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/keyspace"
)

// waitTimeout bounds every wait of these tests: far above what a loaded
// 2-core machine under -race needs, so only a real hang fails them.
const waitTimeout = 20 * time.Second

var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))

// checkStore is a Store (the memory store underneath) that checks what the
// Writer hands it: each Write deep-copies its ops on entry and compares
// them again on return, so a Writer that lets enqueuers write into a batch
// being written is caught; and when held, a Write blocks until released,
// so that a test can enqueue while a batch is being written.
type checkStore struct {
	*Memory
	held    atomic.Bool   // the next Write blocks
	entered chan struct{} // a held Write started
	release chan struct{} // a held Write may return

	mu      sync.Mutex // guards changed, writes
	changed []string   // ops found changed during their Write
	writes  int
}

func newCheckStore() *checkStore {
	return &checkStore{Memory: NewMemory(), entered: make(chan struct{}), release: make(chan struct{})}
}

func (s *checkStore) Write(ops []Op, sync bool) error {
	saved := make([]Op, len(ops))
	for i, op := range ops {
		saved[i] = Op{Kind: op.Kind, DB: op.DB, Key: bytes.Clone(op.Key), Value: bytes.Clone(op.Value)}
	}
	if s.held.CompareAndSwap(true, false) {
		s.entered <- struct{}{}
		<-s.release
	}
	// Let enqueuers run while the batch is "being written".
	for range 3 {
		runtime.Gosched()
	}
	err := s.Memory.Write(ops, sync)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	for i, op := range ops {
		if op.Kind != saved[i].Kind || op.DB != saved[i].DB || !bytes.Equal(op.Key, saved[i].Key) || !bytes.Equal(op.Value, saved[i].Value) {
			if len(s.changed) < 5 {
				s.changed = append(s.changed, fmt.Sprintf("op %d of %d: %s %q (%d-byte value) became %s %q (%d-byte value)",
					i, len(ops), saved[i].Kind, short(saved[i].Key), len(saved[i].Value), op.Kind, short(op.Key), len(op.Value)))
			}
		}
	}
	return err
}

func short(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}

// hold makes the next Write block until the returned function is called;
// it waits until that Write has started.
func (s *checkStore) hold(t *testing.T) (unhold func()) {
	t.Helper()
	s.held.Store(true)
	return func() { s.release <- struct{}{} }
}

func (s *checkStore) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-s.entered:
	case <-time.After(waitTimeout):
		t.Fatalf("no Write started within %v", waitTimeout)
	}
}

// wmodel is what the store must hold once every change is written.
type wmodel map[string][]byte

func (m wmodel) put(w *Writer, key string, v keyspace.Value) {
	w.Put(0, []byte(key), &v)
	m[key] = EncodeValue(nil, v)
}

func (m wmodel) del(w *Writer, key string) {
	w.Delete(0, []byte(key))
	delete(m, key)
}

// compare reports how the store's content differs from m.
func (m wmodel) compare(t *testing.T, st Store) {
	t.Helper()
	got := map[string][]byte{}
	if err := st.Load(func(db int, key, value []byte) error {
		got[string(key)] = bytes.Clone(value)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	missing, wrong, extra := 0, 0, 0
	for k, v := range m {
		g, ok := got[k]
		switch {
		case !ok:
			missing++
		case !bytes.Equal(g, v):
			wrong++
		}
	}
	for k := range got {
		if _, ok := m[k]; !ok {
			extra++
		}
	}
	if missing+wrong+extra > 0 {
		t.Errorf("store holds %d keys, want %d: %d missing, %d with a wrong value, %d that were never written", len(got), len(m), missing, wrong, extra)
	}
}

func waitWritten(t *testing.T, w *Writer) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- w.WaitDurable(w.Seq()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("WaitDurable: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("changes not written within %v (pending %d)", waitTimeout, w.Stats().Pending)
	}
}

func strValue(n int, fill byte) keyspace.Value {
	return keyspace.Value{Kind: keyspace.KindString, Obj: bytes.Repeat([]byte{fill}, n)}
}

// TestWriterNeverWritesIntoABatchBeingWritten: once a batch larger than
// the buffers the Writer keeps for reuse (an arena over 8 MiB, or more than
// 65,536 ops) has been written, changes queued while the next batch is
// being written must not land in that batch's memory. The store checks
// every op it is handed against a copy taken when Write starts, and the
// final content against what was queued.
func TestWriterNeverWritesIntoABatchBeingWritten(t *testing.T) {
	for _, tc := range []struct {
		name string
		big  func(m wmodel, w *Writer) // queues one batch too large to keep
	}{
		{"arena over 8 MiB", func(m wmodel, w *Writer) {
			for i := range 300 { // 300 x 32 KiB = 9.4 MiB
				m.put(w, fmt.Sprintf("big:%03d", i), strValue(32<<10, byte('a'+i%26)))
			}
		}},
		{"over 65536 ops", func(m wmodel, w *Writer) {
			for i := range 70_000 {
				m.put(w, fmt.Sprintf("many:%05d", i), strValue(1, 'm'))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newCheckStore()
			w := NewWriter(st, FsyncEverySec, quietLog)
			ctx, cancel := context.WithCancel(context.Background())
			go w.Run(ctx)
			defer func() { cancel(); w.Close() }()
			m := wmodel{}

			// A small batch (its buffers are kept for reuse), held while
			// the large one queues behind it.
			unhold := st.hold(t)
			for i := range 16 {
				m.put(w, fmt.Sprintf("first:%d", i), strValue(1000, 'f'))
			}
			st.waitEntered(t)
			tc.big(m, w)
			unhold()
			waitWritten(t, w)

			// Then, several times: a batch is held while being written and
			// other changes are queued meanwhile.
			for round := range 4 {
				unhold := st.hold(t)
				m.put(w, fmt.Sprintf("during:%d:a", round), strValue(200, 'x'))
				m.del(w, fmt.Sprintf("first:%d", round))
				st.waitEntered(t)
				m.put(w, fmt.Sprintf("during:%d:b", round), strValue(300, 'y'))
				m.put(w, fmt.Sprintf("during:%d:c", round), strValue(64<<10, 'z'))
				unhold()
				waitWritten(t, w)
			}
			st.mu.Lock()
			changed := st.changed
			st.mu.Unlock()
			for _, c := range changed {
				t.Errorf("changed while the store was writing it: %s", c)
			}
			m.compare(t, st)
		})
	}
}

// TestWriterConcurrentEnqueueKeepsEveryChange: producers queue puts
// (values from 0 to 256 KiB, so that batches cross the 8 MiB buffer size)
// and deletes while the Writer writes; no op changes while the store
// writes it, and the store ends with exactly the model's content.
func TestWriterConcurrentEnqueueKeepsEveryChange(t *testing.T) {
	st := newCheckStore()
	w := NewWriter(st, FsyncEverySec, quietLog)
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	const producers, perProducer = 4, 1500
	models := make([]wmodel, producers)
	var wg sync.WaitGroup
	for p := range producers {
		models[p] = wmodel{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(p), 12))
			m := models[p]
			for i := range perProducer {
				key := fmt.Sprintf("p%d:k%d", p, rng.IntN(300))
				switch r := rng.IntN(100); {
				case r < 10:
					m.del(w, key)
				case r < 20:
					m.put(w, key, strValue(rng.IntN(256<<10), byte(i)))
				default:
					m.put(w, key, strValue(rng.IntN(512), byte(i)))
				}
			}
		}()
	}
	wg.Wait()
	waitWritten(t, w)
	cancel()
	w.Close()
	all := wmodel{}
	for _, m := range models {
		for k, v := range m {
			all[k] = v
		}
	}
	st.mu.Lock()
	changed, writes := st.changed, st.writes
	st.mu.Unlock()
	for _, c := range changed {
		t.Errorf("changed while the store was writing it: %s", c)
	}
	all.compare(t, st)
	t.Logf("%d changes from %d producers in %d batches; %d keys at the end", producers*perProducer, producers, writes, len(all))
}

// TestWriterEnqueuePanicReleasesTheQueue: a value EncodeValue cannot encode
// (a bug in the caller) panics in the caller's goroutine, and the queue's
// mutex is released: other writers go on.
// TestWriterCloseWithoutRun: Close of a Writer whose Run never started
// writes what was queued and returns (it used to wait for Run forever);
// a Run started afterwards returns at once, and so does a second Close.
func TestWriterCloseWithoutRun(t *testing.T) {
	st := NewMemory()
	w := NewWriter(st, FsyncEverySec, quietLog)
	v := strValue(3, 'c')
	w.Put(0, []byte("queued"), &v)
	done := make(chan struct{})
	go func() {
		w.Close()
		w.Run(context.Background())
		w.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatalf("Close without Run still blocks after %v", waitTimeout)
	}
	n := 0
	if err := st.Load(func(db int, key, value []byte) error {
		if string(key) == "queued" {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("the queued change reached the store %d times, want once", n)
	}
}

func TestWriterEnqueuePanicReleasesTheQueue(t *testing.T) {
	w := NewWriter(NewMemory(), FsyncEverySec, quietLog)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Put of a value of an unknown kind did not panic")
			}
		}()
		w.Put(0, []byte("bad"), &keyspace.Value{Kind: 250})
	}()
	done := make(chan struct{})
	go func() {
		v := strValue(3, 'o')
		w.Put(0, []byte("next"), &v)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatalf("a Put after a panicking Put still blocks after %v: the queue mutex was left locked", waitTimeout)
	}
}

// failStore fails every Write and Sync while failing is set, and counts
// the calls; otherwise it is the memory store.
type failStore struct {
	*Memory
	failing atomic.Bool
	calls   atomic.Int64 // Write calls
	failed  atomic.Int64 // Write and Sync calls that failed
	thirdAt atomic.Int64 // UnixNano of the third failed call, 0 before
}

// fail counts a failed call.
func (s *failStore) fail() error {
	if s.failed.Add(1) == 3 {
		s.thirdAt.Store(time.Now().UnixNano())
	}
	return errDiskFull
}

var errDiskFull = errors.New("write /data/000004.log: no space left on device")

func (s *failStore) Write(ops []Op, sync bool) error {
	s.calls.Add(1)
	if s.failing.Load() {
		return s.fail()
	}
	return s.Memory.Write(ops, sync)
}

func (s *failStore) Sync() error {
	if s.failing.Load() {
		return s.fail()
	}
	return s.Memory.Sync()
}

// TestWriterFailedWriteIsNotAcknowledged: with fsync always, a change
// whose batch the store refused is never reported durable; the Writer
// reports the failure (Failing, Stats().Err) until the store takes the
// batch again, keeps the refused changes ahead of later ones, and writes
// them all once the store recovers.
func TestWriterFailedWriteIsNotAcknowledged(t *testing.T) {
	st := &failStore{Memory: NewMemory()}
	w := NewWriter(st, FsyncAlways, quietLog)
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	defer func() { cancel(); w.Close() }()
	m := wmodel{}

	m.put(w, "before", strValue(10, 'b'))
	if err := w.WaitDurable(w.Seq()); err != nil {
		t.Fatalf("WaitDurable with a working store: %v", err)
	}

	st.failing.Store(true)
	m.put(w, "lost?", strValue(10, 'l'))
	refused := w.Seq() // in the first batch the store refuses
	m.del(w, "before")
	seq := w.Seq()
	errc := make(chan error, 1)
	go func() { errc <- w.WaitDurable(seq) }()
	select {
	case err := <-errc:
		if err == nil {
			t.Fatal("WaitDurable returned nil for changes the store refused: a client would get +OK for a change not stored")
		}
		if !errors.Is(err, errDiskFull) {
			t.Errorf("WaitDurable error %v does not wrap the store's error", err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("WaitDurable still blocked %v after the store refused the batch", waitTimeout)
	}
	// The failure stays reported while the store fails: let empty
	// rounds go by (the retries fail).
	calls := st.calls.Load()
	testwait.Until(t, waitTimeout, "two retries", func() bool { return st.calls.Load() >= calls+2 })
	if w.Failing() == nil || w.Stats().Err == nil {
		t.Fatalf("while the store refuses writes, Failing() = %v and Stats().Err = %v; want the store's error", w.Failing(), w.Stats().Err)
	}
	if err := w.WaitDurable(seq); err == nil {
		t.Fatal("after empty rounds, WaitDurable returns nil for the refused changes")
	}
	// A change queued while failing is not acknowledged either.
	m.put(w, "during", strValue(10, 'd'))
	if err := w.WaitDurable(w.Seq()); err == nil {
		t.Fatal("WaitDurable returned nil for a change queued while the store fails")
	}

	st.failing.Store(false)
	testwait.Until(t, waitTimeout, "the failure to clear after the store recovers", func() bool { return w.Failing() == nil })
	if err := w.WaitDurable(refused); err == nil {
		t.Error("after recovery, WaitDurable returns nil for a change whose batch was refused: their clients were told they failed, and must keep being told")
	}
	m.put(w, "after", strValue(10, 'a'))
	if err := w.WaitDurable(w.Seq()); err != nil {
		t.Fatalf("WaitDurable after recovery: %v", err)
	}
	if st := w.Stats(); st.Err != nil || st.Pending != 0 {
		t.Errorf("Stats after recovery: Err %v, Pending %d; want nil, 0", st.Err, st.Pending)
	}
	m.compare(t, st)
}

// TestWriterRetriesUntilTheStoreRecovers: with every fsync policy, a
// store that refuses N writes then recovers ends with every change, in
// order (a later put of a key is not overwritten by an earlier refused
// one), and the Writer does not hammer the failing store (backoff).
func TestWriterRetriesUntilTheStoreRecovers(t *testing.T) {
	for _, mode := range []Fsync{FsyncAlways, FsyncEverySec, FsyncNo} {
		t.Run(mode.String(), func(t *testing.T) {
			st := &failStore{Memory: NewMemory()}
			w := NewWriter(st, mode, quietLog)
			ctx, cancel := context.WithCancel(context.Background())
			go w.Run(ctx)
			defer func() { cancel(); w.Close() }()
			m := wmodel{}
			st.failing.Store(true)
			start := time.Now()
			for i := range 50 {
				m.put(w, fmt.Sprintf("k%d", i%7), strValue(i, byte(i)))
			}
			testwait.Until(t, waitTimeout, "3 failed attempts", func() bool { return st.failed.Load() >= 3 })
			elapsed := time.Unix(0, st.thirdAt.Load()).Sub(start)
			for i := range 50 {
				m.put(w, fmt.Sprintf("k%d", i%5), strValue(100+i, byte(i)))
			}
			st.failing.Store(false)
			testwait.Until(t, waitTimeout, "recovery", func() bool { return w.Failing() == nil })
			waitWritten(t, w)
			m.compare(t, st)
			// 3 attempts with backoff take at least 100 + 200 ms; with a
			// retry every 5 ms tick, they would take 15 ms.
			if elapsed < 250*time.Millisecond {
				t.Errorf("3 failed attempts within %v: no backoff", elapsed)
			}
		})
	}
}

// TestWriterSyncFailureIsReported: with fsync everysec, a failed sync
// makes the Writer report failing until a sync succeeds.
func TestWriterSyncFailureIsReported(t *testing.T) {
	st := &failStore{Memory: NewMemory()}
	w := NewWriter(st, FsyncEverySec, quietLog)
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	defer func() { cancel(); w.Close() }()
	m := wmodel{}
	m.put(w, "a", strValue(5, 'a'))
	waitWritten(t, w)
	// Fail only syncs: writes made before the switch already succeeded.
	st.failing.Store(true)
	testwait.Until(t, waitTimeout, "a failed sync or write", func() bool { return st.failed.Load() > 0 })
	testwait.Until(t, waitTimeout, "the failure reported", func() bool { return w.Failing() != nil })
	st.failing.Store(false)
	testwait.Until(t, waitTimeout, "recovery", func() bool { return w.Failing() == nil })
	m.put(w, "b", strValue(5, 'b'))
	waitWritten(t, w)
	m.compare(t, st)
}

// TestWriterCloseWhileFailingDoesNotHang: Close with a store that refuses
// everything returns (after one last attempt), and WaitDurable then
// returns an error, not nil.
func TestWriterCloseWhileFailingDoesNotHang(t *testing.T) {
	st := &failStore{Memory: NewMemory()}
	st.failing.Store(true)
	w := NewWriter(st, FsyncAlways, quietLog)
	go w.Run(context.Background())
	v := strValue(5, 'x')
	w.Put(0, []byte("x"), &v)
	testwait.Until(t, waitTimeout, "a failed attempt", func() bool { return st.failed.Load() > 0 })
	done := make(chan struct{})
	go func() { w.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitTimeout):
		t.Fatalf("Close still blocked after %v with a failing store", waitTimeout)
	}
	if err := w.WaitDurable(w.Seq()); err == nil {
		t.Error("WaitDurable after Close returns nil for a change never written")
	}
}

// panicStore panics in Write and Sync while broken is set.
type panicStore struct {
	*Memory
	broken atomic.Bool
}

func (s *panicStore) Write(ops []Op, sync bool) error {
	if s.broken.Load() {
		panic("pebble: no space left on device")
	}
	return s.Memory.Write(ops, sync)
}

func (s *panicStore) Sync() error {
	if s.broken.Load() {
		panic("pebble: no space left on device")
	}
	return s.Memory.Sync()
}

// TestWriterSurvivesAPanickingStore: a store that panics in Write or Sync
// makes writes fail (reported, not acknowledged, retried), it does not end
// the process.
func TestWriterSurvivesAPanickingStore(t *testing.T) {
	for _, mode := range []Fsync{FsyncAlways, FsyncEverySec} {
		t.Run(mode.String(), func(t *testing.T) {
			st := &panicStore{Memory: NewMemory()}
			st.broken.Store(true)
			w := NewWriter(st, mode, quietLog)
			ctx, cancel := context.WithCancel(context.Background())
			go w.Run(ctx)
			defer func() { cancel(); w.Close() }()
			m := wmodel{}
			m.put(w, "a", strValue(3, 'a'))
			testwait.Until(t, waitTimeout, "the failure reported", func() bool { return w.Failing() != nil })
			if err := w.WaitDurable(w.Seq()); err == nil {
				t.Fatal("WaitDurable returned nil for a change whose Write panicked")
			}
			st.broken.Store(false)
			testwait.Until(t, waitTimeout, "recovery", func() bool { return w.Failing() == nil })
			m.put(w, "b", strValue(3, 'b'))
			waitWritten(t, w)
			m.compare(t, st)
		})
	}
}

// TestWriterAdmitWaitsWhileOverTheCap: with the store held, changes past
// the cap make Admit wait, and it returns once the store takes them (with
// the wait counted); while writes fail it returns the error at once
// instead of waiting, and the pending bytes stay counted until written.
func TestWriterAdmitWaitsWhileOverTheCap(t *testing.T) {
	st := newCheckStore()
	w := NewWriter(st, FsyncEverySec, quietLog)
	w.SetMaxPending(1000)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	defer w.Close()

	unhold := st.hold(t)
	m := wmodel{}
	m.put(w, "first", strValue(10, 'a'))
	st.waitEntered(t) // the batch of "first" is being written, and held
	for i := range 20 {
		m.put(w, fmt.Sprintf("k%d", i), strValue(100, 'b'))
	}
	if s := w.Stats(); s.PendingBytes <= 1000 {
		t.Fatalf("PendingBytes %d after 20 changes of 100 bytes: want over the cap of 1000", s.PendingBytes)
	}
	admitted := make(chan error, 1)
	go func() { admitted <- w.Admit() }()
	select {
	case err := <-admitted:
		t.Fatalf("Admit returned %v over the cap while the store is held", err)
	case <-time.After(50 * time.Millisecond): // the absence of an event: a bounded look
	}
	unhold()
	select {
	case err := <-admitted:
		if err != nil {
			t.Fatalf("Admit: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("Admit still waiting %v after the store was released", waitTimeout)
	}
	waitWritten(t, w)
	m.compare(t, st)
	s := w.Stats()
	if s.PendingBytes != 0 || s.BackpressureWaits != 1 || s.BackpressureWait <= 0 {
		t.Fatalf("after the writes: PendingBytes %d (want 0), BackpressureWaits %d (want 1), BackpressureWait %v", s.PendingBytes, s.BackpressureWaits, s.BackpressureWait)
	}

	// A failing store: Admit refuses at once, whatever the backlog.
	fs := &failStore{Memory: NewMemory()}
	fs.failing.Store(true)
	w2 := NewWriter(fs, FsyncEverySec, quietLog)
	w2.SetMaxPending(100)
	go w2.Run(ctx)
	defer w2.Close()
	big := strValue(500, 'c')
	w2.Put(0, []byte("x"), &big)
	testwait.Until(t, waitTimeout, "the writer failing", func() bool { return w2.Failing() != nil })
	if err := w2.Admit(); !errors.Is(err, errDiskFull) {
		t.Fatalf("Admit while failing: %v, want %v", err, errDiskFull)
	}
	if s := w2.Stats(); s.PendingBytes < 500 {
		t.Fatalf("PendingBytes %d while the batch is refused: want it still counted", s.PendingBytes)
	}
}

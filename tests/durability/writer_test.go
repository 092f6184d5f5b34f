package durability

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
)

// slowSyncStore is a persistence.Store whose Sync blocks until released:
// a disk whose fsync takes long (a busy or throttled volume). Write
// reports every batch on writes.
type slowSyncStore struct {
	persistence.Store // the memory store, for Load and the rest
	writes            chan int
	syncing           chan struct{} // receives once per Sync call
	release           chan struct{} // closed: Sync returns
}

func (s *slowSyncStore) Write(ops []persistence.Op, sync bool) error {
	err := s.Store.Write(ops, sync)
	s.writes <- len(ops)
	return err
}

func (s *slowSyncStore) Sync() error {
	s.syncing <- struct{}{}
	<-s.release
	return s.Store.Sync()
}

// TestEverysecKeepsWritingDuringSlowSync: with fsync everysec, changes go
// on reaching the store (the OS page cache, where a crash of the process
// cannot lose them) while a slow once-a-second sync is in progress, as
// Redis's appendfsync everysec does its fsync in the background. A Writer
// that waits for the sync before writing the next batch keeps every change
// made during the sync in process memory only: a kill -9 then loses up to
// the whole duration of the sync, not "about the last second".
func TestEverysecKeepsWritingDuringSlowSync(t *testing.T) {
	st := &slowSyncStore{Store: persistence.NewMemory(), writes: make(chan int, 1024),
		syncing: make(chan struct{}, 16), release: make(chan struct{})}
	var once sync.Once
	releaseSync := func() { once.Do(func() { close(st.release) }) }
	defer releaseSync()
	w := persistence.NewWriter(st, persistence.FsyncEverySec, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { releaseSync(); cancel(); w.Close() }()
	go w.Run(ctx)

	v := keyspace.Value{Kind: keyspace.KindGCRA, N: 1}
	w.Put(0, []byte("a"), &v)
	select {
	case <-st.writes:
	case <-time.After(5 * time.Second):
		t.Fatal("the first change was not written within 5s")
	}
	// No sync yet since the start: the first batch is followed by one.
	select {
	case <-st.syncing:
	case <-time.After(5 * time.Second):
		t.Fatal("no sync within 5s of the first write")
	}
	// The sync is in progress (blocked). A new change must still be
	// written within a few flush intervals.
	w.Put(0, []byte("b"), &v)
	select {
	case <-st.writes:
	case <-time.After(time.Second):
		t.Errorf("with a sync in progress, a change queued %v ago is still not written to the store (pending %d): "+
			"persistence.Writer.flush runs syncNow inline, so nothing is written while an fsync lasts", time.Second, w.Stats().Pending)
	}
}

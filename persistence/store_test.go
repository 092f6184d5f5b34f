package persistence_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/persistence/internal/storetest"
)

func TestMemoryStore(t *testing.T) {
	storetest.Run(t, storetest.Opener(func(t *testing.T) func() (persistence.Store, error) {
		// Memory is not durable: a reopen is a new handle on the same
		// Memory, which lives as long as the test.
		m := persistence.NewMemory()
		return func() (persistence.Store, error) { return &memHandle{m: m}, nil }
	}))
}

// memHandle is a closable view of a Memory that outlives it, standing in
// for a reopen; TestMemoryClose checks Memory's own Close.
type memHandle struct {
	m      *persistence.Memory
	mu     sync.RWMutex
	closed bool
}

func (h *memHandle) do(f func() error) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return persistence.ErrStoreClosed
	}
	return f()
}

func (h *memHandle) Write(ops []persistence.Op, sync bool) error {
	return h.do(func() error { return h.m.Write(ops, sync) })
}
func (h *memHandle) Sync() error { return h.do(h.m.Sync) }
func (h *memHandle) Load(fn func(db int, key, value []byte) error) error {
	return h.do(func() error { return h.m.Load(fn) })
}
func (h *memHandle) DiskUsage() int64 { return h.m.DiskUsage() }
func (h *memHandle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	return nil
}

func TestMemoryClose(t *testing.T) {
	m := persistence.NewMemory()
	storetest.MustWrite(t, m, false, storetest.Put(0, "a", "1"))
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Write([]persistence.Op{storetest.Put(0, "b", "1")}, false); !errors.Is(err, persistence.ErrStoreClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if err := m.Sync(); !errors.Is(err, persistence.ErrStoreClosed) {
		t.Fatalf("Sync after Close: %v", err)
	}
	if err := m.Load(func(int, []byte, []byte) error { return nil }); !errors.Is(err, persistence.ErrStoreClosed) {
		t.Fatalf("Load after Close: %v", err)
	}
}

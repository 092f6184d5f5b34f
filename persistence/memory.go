package persistence

import (
	"bytes"
	"cmp"
	"slices"
	"sync"

	"github.com/cellserver/cellserver/keyslot"
)

// Memory is a Store that keeps everything in memory. It exists for tests
// and as the reference the conformance suite compares Pebble with; it is
// not durable, and Sync does nothing.
type Memory struct {
	mu     sync.RWMutex
	dbs    map[int]map[string][]byte // never holds an empty inner map
	closed bool
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty Memory store.
func NewMemory() *Memory { return &Memory{dbs: make(map[int]map[string][]byte)} }

// Write implements Store.
func (m *Memory) Write(ops []Op, sync bool) error {
	if err := CheckOps(ops); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrStoreClosed
	}
	for _, op := range ops {
		switch op.Kind {
		case OpPut:
			db := m.dbs[op.DB]
			if db == nil {
				db = make(map[string][]byte)
				m.dbs[op.DB] = db
			}
			db[string(op.Key)] = bytes.Clone(op.Value)
		case OpDelete:
			if db := m.dbs[op.DB]; db != nil {
				delete(db, string(op.Key))
				if len(db) == 0 {
					delete(m.dbs, op.DB)
				}
			}
		case OpDeleteDB:
			delete(m.dbs, op.DB)
		case OpDeleteAll:
			clear(m.dbs)
		}
	}
	return nil
}

// Sync implements Store; memory has nothing to sync.
func (m *Memory) Sync() error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.closed {
		return ErrStoreClosed
	}
	return nil
}

// Load implements Store. Like Pebble, it hands fn buffers that it reuses,
// so a caller that keeps them without copying fails its tests here too.
func (m *Memory) Load(fn func(db int, key, value []byte) error) error {
	type record struct {
		db         int
		key, value string
	}
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return ErrStoreClosed
	}
	var recs []record
	for db, kv := range m.dbs {
		for k, v := range kv {
			recs = append(recs, record{db, k, string(v)})
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(recs, func(a, b record) int {
		return cmp.Or(cmp.Compare(a.db, b.db), cmp.Compare(keyslot.Of([]byte(a.key)), keyslot.Of([]byte(b.key))),
			cmp.Compare(a.key, b.key))
	})
	var kbuf, vbuf []byte
	for _, r := range recs {
		kbuf = append(kbuf[:0], r.key...)
		vbuf = append(vbuf[:0], r.value...)
		if err := fn(r.db, kbuf, vbuf); err != nil {
			return err
		}
	}
	return nil
}

// DiskUsage implements Store: memory uses no disk.
func (m *Memory) DiskUsage() int64 { return 0 }

// Close implements Store.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.dbs = nil
	return nil
}

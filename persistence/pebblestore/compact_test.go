package pebblestore

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/cellserver/cellserver/persistence"
)

// Compact is used by tests and benchmarks that measure disk use after
// churn: cellserver leaves compaction to pebble.
//
// Compact flushes the memtable, then compacts every
// level over the whole key range, which drops deleted records and the
// range deletions that covered them.
func (p *Store) Compact() error {
	db, in, unlock, err := p.acquire(false)
	if err != nil {
		return err
	}
	defer unlock()
	return p.guard(in, "compact", func() error {
		if err := db.Flush(); err != nil {
			return p.wrap("flush", err)
		}
		levels, err := db.SSTables()
		if err != nil {
			return p.wrap("compact", err)
		}
		// Pebble's Compact needs an end key; the largest key of any table is
		// one (Compact includes it), since no finite key follows all of db
		// MaxDB's.
		var last []byte
		for _, tables := range levels {
			for _, t := range tables {
				if k := t.Largest.UserKey; bytes.Compare(k, last) > 0 {
					last = k
				}
			}
		}
		if len(last) == 0 {
			return nil
		}
		if err := db.Compact(nil, bytes.Clone(last), false); err != nil {
			return p.wrap("compact", err)
		}
		return nil
	})
}

// TestCompactKeepsData: a compaction drops deleted records and keeps
// every live one, as a reopen shows; Compact on a closed store fails.
func TestCompactKeepsData(t *testing.T) {
	dir := t.TempDir()
	s := openT(t, dir, Options{})
	if err := s.Compact(); err != nil { // nothing to compact
		t.Fatal(err)
	}
	m := model{}
	var ops []persistence.Op
	for i := range 2000 {
		ops = append(ops, put(i%3, fmt.Sprintf("k%05d", i), string(bytes.Repeat([]byte{byte(i)}, 100))))
	}
	ops = append(ops, put(persistence.MaxDB, "\xff\xff", "last"), delDB(1), del(0, "k00000"))
	mustWrite(t, s, false, ops...)
	m.Apply(ops)
	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	checkRecords(t, s, m.Records())
	closeT(t, s)
	if err := s.Compact(); !errors.Is(err, persistence.ErrStoreClosed) {
		t.Fatalf("Compact after Close: %v, want ErrStoreClosed", err)
	}
	checkRecords(t, openT(t, dir, Options{}), m.Records())
}

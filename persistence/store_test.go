package persistence

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/cellserver/cellserver/keyslot"
	"github.com/cockroachdb/pebble/vfs"
)

// record is one (db, key, value) as Load reports it.
type record struct {
	db         int
	key, value string
}

func (r record) String() string { return fmt.Sprintf("%d/%q=%d bytes", r.db, r.key, len(r.value)) }

// loadAll returns every record of s, checking that Load reports them in
// strictly increasing (db, slot, key) order.
func loadAll(t testing.TB, s Store) []record {
	t.Helper()
	var recs []record
	err := s.Load(func(db int, key, value []byte) error {
		r := record{db, string(key), string(value)}
		if n := len(recs); n > 0 && compareRecords(recs[n-1], r) >= 0 {
			return fmt.Errorf("Load order: %v then %v", recs[n-1], r)
		}
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return recs
}

func compareRecords(a, b record) int {
	return cmp.Or(cmp.Compare(a.db, b.db), cmp.Compare(keyslot.Of([]byte(a.key)), keyslot.Of([]byte(b.key))), cmp.Compare(a.key, b.key))
}

// model is the reference state: db -> key -> value.
type model map[int]map[string]string

func (m model) apply(ops []Op) {
	for _, op := range ops {
		switch op.Kind {
		case OpPut:
			if m[op.DB] == nil {
				m[op.DB] = map[string]string{}
			}
			m[op.DB][string(op.Key)] = string(op.Value)
		case OpDelete:
			delete(m[op.DB], string(op.Key))
		case OpDeleteDB:
			delete(m, op.DB)
		case OpDeleteAll:
			clear(m)
		}
	}
}

func (m model) records() []record {
	var recs []record
	for db, kv := range m {
		for k, v := range kv {
			recs = append(recs, record{db, k, v})
		}
	}
	slices.SortFunc(recs, compareRecords)
	return recs
}

func mustWrite(t testing.TB, s Store, sync bool, ops ...Op) {
	t.Helper()
	if err := s.Write(ops, sync); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

func checkRecords(t testing.TB, s Store, want []record) {
	t.Helper()
	want = slices.Clone(want)
	slices.SortFunc(want, compareRecords) // Load's order
	got := loadAll(t, s)
	if len(got) != len(want) {
		t.Fatalf("Load: %d records, want %d\n got  %v\n want %v", len(got), len(want), head(got), head(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("Load record %d: got %v (%q), want %v (%q)", i, got[i], head1(got[i].value), want[i], head1(want[i].value))
		}
	}
}

func head(r []record) []record { return r[:min(len(r), 8)] }
func head1(s string) string    { return s[:min(len(s), 16)] }

func put(db int, key, value string) Op {
	return Op{Kind: OpPut, DB: db, Key: []byte(key), Value: []byte(value)}
}
func del(db int, key string) Op { return Op{Kind: OpDelete, DB: db, Key: []byte(key)} }
func delDB(db int) Op           { return Op{Kind: OpDeleteDB, DB: db} }
func delAll() Op                { return Op{Kind: OpDeleteAll} }

// testStore is the conformance suite every Store passes. open(t) returns
// the store of t's storage: the first call creates it empty, and a later
// call with the same t (once the earlier handle is closed) opens the same
// storage again, as a restart would.
func testStore(t *testing.T, open func(t *testing.T) Store) {
	reopen := func(t *testing.T, s Store) Store {
		t.Helper()
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		return open(t)
	}

	t.Run("Empty", func(t *testing.T) {
		s := open(t)
		checkRecords(t, s, nil)
		mustWrite(t, s, false) // an empty batch
		mustWrite(t, s, true)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		checkRecords(t, s, nil)
	})

	t.Run("OrderedOps", func(t *testing.T) {
		s := open(t)
		mustWrite(t, s, false,
			put(0, "a", "1"), del(0, "a"), put(0, "a", "2"),
			put(0, "b", "1"), del(0, "b"),
			del(0, "missing"),
			put(1, "c", "1"), put(1, "c", "3"))
		checkRecords(t, s, []record{{0, "a", "2"}, {1, "c", "3"}})
		// Range deletions are ordered with the puts around them.
		mustWrite(t, s, false,
			put(2, "x", "1"), delDB(2), put(2, "y", "1"),
			put(3, "z", "1"), delAll(), put(3, "w", "1"))
		checkRecords(t, s, []record{{3, "w", "1"}})
		mustWrite(t, s, false, put(MaxDB, "m", "1"), delDB(MaxDB), put(MaxDB, "n", "1"))
		checkRecords(t, s, []record{{3, "w", "1"}, {MaxDB, "n", "1"}})
	})

	t.Run("DeleteDBOnlyItsDB", func(t *testing.T) {
		s := open(t)
		m := model{}
		// Neighbours in prefix order: 0x00FF/0x0100, 0xFEFF/0xFF00, the last two.
		dbs := []int{0, 1, 2, 255, 256, 0xFEFF, 0xFF00, MaxDB - 1, MaxDB}
		keys := []string{"", "\x00", "\xff", "\xff\xff", "k", "\x01\x00"}
		var ops []Op
		for _, db := range dbs {
			for _, k := range keys {
				ops = append(ops, put(db, k, fmt.Sprintf("%d:%q", db, k)))
			}
		}
		mustWrite(t, s, false, ops...)
		m.apply(ops)
		checkRecords(t, s, m.records())
		for _, db := range []int{1, 255, 0xFF00, MaxDB, 0, 42} {
			mustWrite(t, s, false, delDB(db))
			m.apply([]Op{delDB(db)})
			checkRecords(t, s, m.records())
		}
		if n := len(m.records()); n != (len(dbs)-5)*len(keys) {
			t.Fatalf("model kept %d records", n)
		}
	})

	t.Run("DeleteAll", func(t *testing.T) {
		s := open(t)
		var ops []Op
		for db := range 20 {
			ops = append(ops, put(db*3000, "k", "v"), put(db*3000, "\xff\xff\xff", "v"))
		}
		ops = append(ops, put(MaxDB, "", "v"), put(MaxDB, "\xff\xff\xff\xff", "v"))
		mustWrite(t, s, false, ops...)
		if n := len(loadAll(t, s)); n != len(ops) {
			t.Fatalf("%d records before DeleteAll, want %d", n, len(ops))
		}
		mustWrite(t, s, false, delAll())
		checkRecords(t, s, nil)
		mustWrite(t, s, false, put(7, "after", "v"))
		checkRecords(t, s, []record{{7, "after", "v"}})
		mustWrite(t, s, true, delAll())
		s = reopen(t, s)
		checkRecords(t, s, nil)
	})

	t.Run("RandomAgainstModel", func(t *testing.T) {
		s := open(t)
		rng := rand.New(rand.NewPCG(1, 2))
		m := model{}
		counts := map[OpKind]int{}
		key := func() string {
			b := make([]byte, rng.IntN(6))
			for i := range b {
				b[i] = "ab\x00\xff"[rng.IntN(4)] // few distinct bytes: many collisions
			}
			if rng.IntN(2) == 0 {
				return fmt.Sprintf("key:%d", rng.IntN(20000))
			}
			return string(b)
		}
		dbs := []int{0, 1, 2, MaxDB}
		// 300 batches of every kind of op, then 200 of puts and deletes
		// only, so that thousands of records are left to compare.
		for batch := range 500 {
			var ops []Op
			for range 1 + rng.IntN(40) {
				db := dbs[rng.IntN(len(dbs))]
				var op Op
				r := rng.IntN(1000)
				if batch >= 300 {
					r %= 995
				}
				switch {
				case r < 700:
					op = put(db, key(), fmt.Sprintf("v%d-%d", batch, rng.Int64()))
				case r < 995:
					op = del(db, key())
				case r < 999:
					op = delDB(db)
				default:
					op = delAll()
				}
				counts[op.Kind]++
				ops = append(ops, op)
			}
			mustWrite(t, s, rng.IntN(50) == 0, ops...)
			m.apply(ops)
			if batch%100 == 99 {
				checkRecords(t, s, m.records())
			}
		}
		want := m.records()
		checkRecords(t, s, want)
		s = reopen(t, s)
		checkRecords(t, s, want)
		t.Logf("ops %v, %d records at the end", counts, len(want))
		if len(want) < 1000 {
			t.Fatalf("only %d records: the test checks too little", len(want))
		}
	})

	t.Run("BinaryKeys", func(t *testing.T) {
		s := open(t)
		keys := []string{"", "\x00", "\x00\x00", "\x00\x01", "a\x00b", "\xff", "\xff\xff", "\xff\xff\xff\xff\x00", "\x7f\x80"}
		m := model{}
		var ops []Op
		for _, db := range []int{0, 1, MaxDB} {
			for i, k := range keys {
				ops = append(ops, put(db, k, fmt.Sprintf("%d\x00%d", db, i)))
			}
		}
		mustWrite(t, s, false, ops...)
		m.apply(ops)
		checkRecords(t, s, m.records())
		ops = []Op{del(0, ""), del(1, "\x00"), del(MaxDB, "\xff\xff"), put(0, "\xff", "")}
		mustWrite(t, s, false, ops...)
		m.apply(ops)
		checkRecords(t, s, m.records())
		s = reopen(t, s)
		checkRecords(t, s, m.records())
	})

	t.Run("LargeValues", func(t *testing.T) {
		s := open(t)
		rng := rand.NewChaCha8([32]byte{3, 4})
		m := model{}
		// 9 MiB is more than half of Pebble's memtable: it goes its own way.
		for i, n := range []int{0, 1, 64 << 10, 1 << 20, 9 << 20} {
			v := make([]byte, n)
			rng.Read(v)
			op := put(i%2, fmt.Sprintf("big%d", i), string(v))
			mustWrite(t, s, false, op)
			m.apply([]Op{op})
		}
		checkRecords(t, s, m.records())
		s = reopen(t, s)
		checkRecords(t, s, m.records())
	})

	t.Run("ReopenAfterSyncWrite", func(t *testing.T) {
		s := open(t)
		m := model{}
		ops := []Op{put(0, "a", "1"), put(5, "b", "2")}
		mustWrite(t, s, true, ops...)
		m.apply(ops)
		ops = []Op{put(5, "c", "3"), del(0, "a")}
		mustWrite(t, s, false, ops...)
		m.apply(ops)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		s = reopen(t, s)
		checkRecords(t, s, m.records())
		ops = []Op{put(6, "d", "4")}
		mustWrite(t, s, true, ops...)
		m.apply(ops)
		s = reopen(t, s)
		checkRecords(t, s, m.records())
	})

	t.Run("CallerBuffersReused", func(t *testing.T) {
		s := open(t)
		k, v := []byte("key"), []byte("value")
		mustWrite(t, s, false, Op{Kind: OpPut, DB: 0, Key: k, Value: v})
		copy(k, "XXX")
		copy(v, "YYYYY")
		checkRecords(t, s, []record{{0, "key", "value"}})
	})

	t.Run("InvalidOpsApplyNothing", func(t *testing.T) {
		s := open(t)
		mustWrite(t, s, false, put(0, "keep", "1"))
		for _, bad := range []Op{
			{Kind: 0, DB: 0, Key: []byte("k")},
			{Kind: OpDeleteAll + 1},
			{Kind: OpPut, DB: -1, Key: []byte("k")},
			{Kind: OpPut, DB: MaxDB + 1, Key: []byte("k")},
			{Kind: OpDeleteDB, DB: MaxDB + 1},
		} {
			err := s.Write([]Op{put(0, "new", "1"), del(0, "keep"), bad}, true)
			if err == nil {
				t.Fatalf("Write with %+v: no error", bad)
			}
			checkRecords(t, s, []record{{0, "keep", "1"}})
		}
	})

	t.Run("LoadStopsOnError", func(t *testing.T) {
		s := open(t)
		mustWrite(t, s, false, put(0, "a", "1"), put(0, "b", "1"), put(0, "c", "1"))
		boom := errors.New("boom")
		calls := 0
		err := s.Load(func(int, []byte, []byte) error {
			calls++
			if calls == 2 {
				return boom
			}
			return nil
		})
		if !errors.Is(err, boom) || calls != 2 {
			t.Fatalf("Load: err %v after %d calls, want boom after 2", err, calls)
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		s := open(t)
		const writers, batches = 4, 50
		var wg sync.WaitGroup
		errs := make(chan error, writers+1)
		for w := range writers {
			wg.Go(func() {
				for b := range batches {
					ops := []Op{put(w, fmt.Sprintf("k%03d", b), "v"), put(w, "last", fmt.Sprint(b))}
					if b%10 == 9 {
						ops = append(ops, del(w, fmt.Sprintf("k%03d", b-1)))
					}
					if err := s.Write(ops, b%25 == 0); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Go(func() {
			for range 20 {
				if err := s.Sync(); err != nil {
					errs <- err
					return
				}
				s.DiskUsage()
				if err := s.Load(func(int, []byte, []byte) error { return nil }); err != nil {
					errs <- err
					return
				}
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		m := model{}
		for w := range writers {
			for b := range batches {
				m.apply([]Op{put(w, fmt.Sprintf("k%03d", b), "v"), put(w, "last", fmt.Sprint(b))})
				if b%10 == 9 {
					m.apply([]Op{del(w, fmt.Sprintf("k%03d", b-1))})
				}
			}
		}
		checkRecords(t, s, m.records())
	})

	t.Run("CompactKeepsData", func(t *testing.T) {
		s := open(t)
		if err := s.Compact(); err != nil { // nothing to compact
			t.Fatal(err)
		}
		m := model{}
		var ops []Op
		for i := range 2000 {
			ops = append(ops, put(i%3, fmt.Sprintf("k%05d", i), string(bytes.Repeat([]byte{byte(i)}, 100))))
		}
		ops = append(ops, put(MaxDB, "\xff\xff", "last"), delDB(1), del(0, "k00000"))
		mustWrite(t, s, false, ops...)
		m.apply(ops)
		if err := s.Compact(); err != nil {
			t.Fatal(err)
		}
		checkRecords(t, s, m.records())
		if u := s.DiskUsage(); u < 0 {
			t.Fatalf("DiskUsage %d", u)
		}
		s = reopen(t, s)
		checkRecords(t, s, m.records())
	})

	t.Run("Closed", func(t *testing.T) {
		s := open(t)
		mustWrite(t, s, false, put(0, "a", "1"))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		for name, err := range map[string]error{
			"Write":      s.Write([]Op{put(0, "b", "1")}, false),
			"Write sync": s.Write(nil, true),
			"Sync":       s.Sync(),
			"Load":       s.Load(func(int, []byte, []byte) error { return nil }),
			"Compact":    s.Compact(),
		} {
			if !errors.Is(err, ErrStoreClosed) {
				t.Errorf("%s after Close: %v, want ErrStoreClosed", name, err)
			}
		}
		if u := s.DiskUsage(); u != 0 {
			t.Errorf("DiskUsage after Close: %d", u)
		}
	})
}

// opener returns an open function for testStore: storage is keyed by the
// subtest, and every store is closed when its test ends.
func opener(create func(t *testing.T) func() (Store, error)) func(t *testing.T) Store {
	var mu sync.Mutex
	storage := map[*testing.T]func() (Store, error){}
	return func(t *testing.T) Store {
		t.Helper()
		mu.Lock()
		openIt, ok := storage[t]
		if !ok {
			openIt = create(t)
			storage[t] = openIt
		}
		mu.Unlock()
		s, err := openIt()
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	}
}

func TestMemoryStore(t *testing.T) {
	testStore(t, opener(func(t *testing.T) func() (Store, error) {
		// Memory is not durable: a reopen is a new handle on the same
		// Memory, which lives as long as the test.
		m := NewMemory()
		return func() (Store, error) { return &memHandle{m: m}, nil }
	}))
}

func TestPebbleStoreMemFS(t *testing.T) {
	testStore(t, opener(func(t *testing.T) func() (Store, error) {
		fs := vfs.NewMem()
		return func() (Store, error) { return OpenPebble("/data", PebbleOptions{FS: fs}) }
	}))
}

func TestPebbleStoreDisk(t *testing.T) {
	testStore(t, opener(func(t *testing.T) func() (Store, error) {
		dir := t.TempDir()
		return func() (Store, error) { return OpenPebble(dir, PebbleOptions{}) }
	}))
}

// memHandle is a closable view of a Memory that outlives it, standing in
// for a reopen; TestMemoryClose checks Memory's own Close.
type memHandle struct {
	m      *Memory
	mu     sync.RWMutex
	closed bool
}

func (h *memHandle) do(f func() error) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return ErrStoreClosed
	}
	return f()
}

func (h *memHandle) Write(ops []Op, sync bool) error {
	return h.do(func() error { return h.m.Write(ops, sync) })
}
func (h *memHandle) Sync() error { return h.do(h.m.Sync) }
func (h *memHandle) Load(fn func(db int, key, value []byte) error) error {
	return h.do(func() error { return h.m.Load(fn) })
}
func (h *memHandle) DiskUsage() int64 { return h.m.DiskUsage() }
func (h *memHandle) Compact() error   { return h.do(h.m.Compact) }
func (h *memHandle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	return nil
}

func TestMemoryClose(t *testing.T) {
	m := NewMemory()
	mustWrite(t, m, false, put(0, "a", "1"))
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Write([]Op{put(0, "b", "1")}, false); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if err := m.Sync(); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("Sync after Close: %v", err)
	}
	if err := m.Load(func(int, []byte, []byte) error { return nil }); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("Load after Close: %v", err)
	}
	if err := m.Compact(); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("Compact after Close: %v", err)
	}
}

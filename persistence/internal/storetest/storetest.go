// Package storetest is the conformance suite every persistence.Store
// passes (Run), and the helpers its tests share.
package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/persistence"
)

// Record is one (db, key, value) as Load reports it.
type Record struct {
	DB         int
	Key, Value string
}

func (r Record) String() string { return fmt.Sprintf("%d/%q=%d bytes", r.DB, r.Key, len(r.Value)) }

// LoadAll returns every Record of s, checking that Load reports them in
// strictly increasing (db, slot, key) order.
func LoadAll(t testing.TB, s persistence.Store) []Record {
	t.Helper()
	var recs []Record
	err := s.Load(func(db int, key, value []byte) error {
		r := Record{db, string(key), string(value)}
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

func compareRecords(a, b Record) int {
	return cmp.Or(cmp.Compare(a.DB, b.DB), cmp.Compare(keyslot.Of([]byte(a.Key)), keyslot.Of([]byte(b.Key))), cmp.Compare(a.Key, b.Key))
}

// Model is the reference state: db -> key -> value.
type Model map[int]map[string]string

// Apply applies ops to m, as a Store's Write does.
func (m Model) Apply(ops []persistence.Op) {
	for _, op := range ops {
		switch op.Kind {
		case persistence.OpPut:
			if m[op.DB] == nil {
				m[op.DB] = map[string]string{}
			}
			m[op.DB][string(op.Key)] = string(op.Value)
		case persistence.OpDelete:
			delete(m[op.DB], string(op.Key))
		case persistence.OpDeleteDB:
			delete(m, op.DB)
		case persistence.OpDeleteAll:
			clear(m)
		}
	}
}

// Records returns m's records in Load's order.
func (m Model) Records() []Record {
	var recs []Record
	for db, kv := range m {
		for k, v := range kv {
			recs = append(recs, Record{db, k, v})
		}
	}
	slices.SortFunc(recs, compareRecords)
	return recs
}

// MustWrite writes ops to s, failing t on an error.
func MustWrite(t testing.TB, s persistence.Store, sync bool, ops ...persistence.Op) {
	t.Helper()
	if err := s.Write(ops, sync); err != nil {
		t.Fatalf("Write: %v", err)
	}
}

// CheckRecords fails t unless s holds exactly want (in any order).
func CheckRecords(t testing.TB, s persistence.Store, want []Record) {
	t.Helper()
	want = slices.Clone(want)
	slices.SortFunc(want, compareRecords) // Load's order
	got := LoadAll(t, s)
	if len(got) != len(want) {
		t.Fatalf("Load: %d records, want %d\n got  %v\n want %v", len(got), len(want), head(got), head(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("Load Record %d: got %v (%q), want %v (%q)", i, got[i], head1(got[i].Value), want[i], head1(want[i].Value))
		}
	}
}

func head(r []Record) []Record { return r[:min(len(r), 8)] }
func head1(s string) string    { return s[:min(len(s), 16)] }

// Put, Del, DelDB and DelAll build the Ops of each kind.
func Put(db int, key, value string) persistence.Op {
	return persistence.Op{Kind: persistence.OpPut, DB: db, Key: []byte(key), Value: []byte(value)}
}
func Del(db int, key string) persistence.Op {
	return persistence.Op{Kind: persistence.OpDelete, DB: db, Key: []byte(key)}
}
func DelDB(db int) persistence.Op { return persistence.Op{Kind: persistence.OpDeleteDB, DB: db} }
func DelAll() persistence.Op      { return persistence.Op{Kind: persistence.OpDeleteAll} }

// Run is the conformance suite every Store passes. open(t) returns
// the store of t's storage: the first call creates it empty, and a later
// call with the same t (once the earlier handle is closed) opens the same
// storage again, as a restart would.
func Run(t *testing.T, open func(t *testing.T) persistence.Store) {
	reopen := func(t *testing.T, s persistence.Store) persistence.Store {
		t.Helper()
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		return open(t)
	}

	t.Run("Empty", func(t *testing.T) {
		s := open(t)
		CheckRecords(t, s, nil)
		MustWrite(t, s, false) // an empty batch
		MustWrite(t, s, true)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		CheckRecords(t, s, nil)
	})

	t.Run("OrderedOps", func(t *testing.T) {
		s := open(t)
		MustWrite(t, s, false,
			Put(0, "a", "1"), Del(0, "a"), Put(0, "a", "2"),
			Put(0, "b", "1"), Del(0, "b"),
			Del(0, "missing"),
			Put(1, "c", "1"), Put(1, "c", "3"))
		CheckRecords(t, s, []Record{{0, "a", "2"}, {1, "c", "3"}})
		// Range deletions are ordered with the puts around them.
		MustWrite(t, s, false,
			Put(2, "x", "1"), DelDB(2), Put(2, "y", "1"),
			Put(3, "z", "1"), DelAll(), Put(3, "w", "1"))
		CheckRecords(t, s, []Record{{3, "w", "1"}})
		MustWrite(t, s, false, Put(persistence.MaxDB, "m", "1"), DelDB(persistence.MaxDB), Put(persistence.MaxDB, "n", "1"))
		CheckRecords(t, s, []Record{{3, "w", "1"}, {persistence.MaxDB, "n", "1"}})
	})

	t.Run("SameKeyManyTimesInOneBatch", func(t *testing.T) {
		// A store may reorder or merge the changes of one batch (the
		// Pebble store sorts them by key and keeps each key's last), but
		// never across a FLUSHDB/FLUSHALL, and each key ends as its last
		// change left it.
		s := open(t)
		ops := []persistence.Op{
			Put(0, "hot", "1"), Put(0, "b", "1"), Put(0, "hot", "2"), Del(0, "b"),
			Put(1, "hot", "x"), Put(0, "a", "1"), Del(0, "hot"), Put(0, "hot", "3"),
			Put(0, "gone", "1"), DelDB(0), Put(0, "b", "2"), Put(0, "b", "3"),
			Put(1, "hot", "y"), Del(1, "hot"), Put(2, "z", "1"), DelAll(), Put(2, "z", "2"),
			Put(0, "hot", "4"), Del(0, "new"), Put(0, "new", "1"), Put(0, "del", "1"), Del(0, "del"),
		}
		MustWrite(t, s, false, ops...)
		m := Model{}
		m.Apply(ops)
		CheckRecords(t, s, m.Records())
		s = reopen(t, s)
		CheckRecords(t, s, m.Records())
	})

	t.Run("DeleteDBOnlyItsDB", func(t *testing.T) {
		s := open(t)
		m := Model{}
		// Neighbours in prefix order: 0x00FF/0x0100, 0xFEFF/0xFF00, the last two.
		dbs := []int{0, 1, 2, 255, 256, 0xFEFF, 0xFF00, persistence.MaxDB - 1, persistence.MaxDB}
		keys := []string{"", "\x00", "\xff", "\xff\xff", "k", "\x01\x00"}
		var ops []persistence.Op
		for _, db := range dbs {
			for _, k := range keys {
				ops = append(ops, Put(db, k, fmt.Sprintf("%d:%q", db, k)))
			}
		}
		MustWrite(t, s, false, ops...)
		m.Apply(ops)
		CheckRecords(t, s, m.Records())
		for _, db := range []int{1, 255, 0xFF00, persistence.MaxDB, 0, 42} {
			MustWrite(t, s, false, DelDB(db))
			m.Apply([]persistence.Op{DelDB(db)})
			CheckRecords(t, s, m.Records())
		}
		if n := len(m.Records()); n != (len(dbs)-5)*len(keys) {
			t.Fatalf("model kept %d records", n)
		}
	})

	t.Run("DeleteAll", func(t *testing.T) {
		s := open(t)
		var ops []persistence.Op
		for db := range 20 {
			ops = append(ops, Put(db*3000, "k", "v"), Put(db*3000, "\xff\xff\xff", "v"))
		}
		ops = append(ops, Put(persistence.MaxDB, "", "v"), Put(persistence.MaxDB, "\xff\xff\xff\xff", "v"))
		MustWrite(t, s, false, ops...)
		if n := len(LoadAll(t, s)); n != len(ops) {
			t.Fatalf("%d records before DeleteAll, want %d", n, len(ops))
		}
		MustWrite(t, s, false, DelAll())
		CheckRecords(t, s, nil)
		MustWrite(t, s, false, Put(7, "after", "v"))
		CheckRecords(t, s, []Record{{7, "after", "v"}})
		MustWrite(t, s, true, DelAll())
		s = reopen(t, s)
		CheckRecords(t, s, nil)
	})

	t.Run("RandomAgainstModel", func(t *testing.T) {
		s := open(t)
		rng := rand.New(rand.NewPCG(1, 2))
		m := Model{}
		counts := map[persistence.OpKind]int{}
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
		dbs := []int{0, 1, 2, persistence.MaxDB}
		// 300 batches of every kind of op, then 200 of puts and deletes
		// only, so that thousands of records are left to compare.
		for batch := range 500 {
			var ops []persistence.Op
			for range 1 + rng.IntN(40) {
				db := dbs[rng.IntN(len(dbs))]
				var op persistence.Op
				r := rng.IntN(1000)
				if batch >= 300 {
					r %= 995
				}
				switch {
				case r < 700:
					op = Put(db, key(), fmt.Sprintf("v%d-%d", batch, rng.Int64()))
				case r < 995:
					op = Del(db, key())
				case r < 999:
					op = DelDB(db)
				default:
					op = DelAll()
				}
				counts[op.Kind]++
				ops = append(ops, op)
			}
			MustWrite(t, s, rng.IntN(50) == 0, ops...)
			m.Apply(ops)
			if batch%100 == 99 {
				CheckRecords(t, s, m.Records())
			}
		}
		want := m.Records()
		CheckRecords(t, s, want)
		s = reopen(t, s)
		CheckRecords(t, s, want)
		t.Logf("ops %v, %d records at the end", counts, len(want))
		if len(want) < 1000 {
			t.Fatalf("only %d records: the test checks too little", len(want))
		}
	})

	t.Run("BinaryKeys", func(t *testing.T) {
		s := open(t)
		keys := []string{"", "\x00", "\x00\x00", "\x00\x01", "a\x00b", "\xff", "\xff\xff", "\xff\xff\xff\xff\x00", "\x7f\x80"}
		m := Model{}
		var ops []persistence.Op
		for _, db := range []int{0, 1, persistence.MaxDB} {
			for i, k := range keys {
				ops = append(ops, Put(db, k, fmt.Sprintf("%d\x00%d", db, i)))
			}
		}
		MustWrite(t, s, false, ops...)
		m.Apply(ops)
		CheckRecords(t, s, m.Records())
		ops = []persistence.Op{Del(0, ""), Del(1, "\x00"), Del(persistence.MaxDB, "\xff\xff"), Put(0, "\xff", "")}
		MustWrite(t, s, false, ops...)
		m.Apply(ops)
		CheckRecords(t, s, m.Records())
		s = reopen(t, s)
		CheckRecords(t, s, m.Records())
	})

	t.Run("LargeValues", func(t *testing.T) {
		s := open(t)
		rng := rand.NewChaCha8([32]byte{3, 4})
		m := Model{}
		// 9 MiB is more than half of Pebble's memtable: it goes its own way.
		for i, n := range []int{0, 1, 64 << 10, 1 << 20, 9 << 20} {
			v := make([]byte, n)
			rng.Read(v)
			op := Put(i%2, fmt.Sprintf("big%d", i), string(v))
			MustWrite(t, s, false, op)
			m.Apply([]persistence.Op{op})
		}
		CheckRecords(t, s, m.Records())
		s = reopen(t, s)
		CheckRecords(t, s, m.Records())
	})

	t.Run("ReopenAfterSyncWrite", func(t *testing.T) {
		s := open(t)
		m := Model{}
		ops := []persistence.Op{Put(0, "a", "1"), Put(5, "b", "2")}
		MustWrite(t, s, true, ops...)
		m.Apply(ops)
		ops = []persistence.Op{Put(5, "c", "3"), Del(0, "a")}
		MustWrite(t, s, false, ops...)
		m.Apply(ops)
		if err := s.Sync(); err != nil {
			t.Fatal(err)
		}
		s = reopen(t, s)
		CheckRecords(t, s, m.Records())
		ops = []persistence.Op{Put(6, "d", "4")}
		MustWrite(t, s, true, ops...)
		m.Apply(ops)
		s = reopen(t, s)
		CheckRecords(t, s, m.Records())
	})

	t.Run("CallerBuffersReused", func(t *testing.T) {
		s := open(t)
		k, v := []byte("key"), []byte("value")
		MustWrite(t, s, false, persistence.Op{Kind: persistence.OpPut, DB: 0, Key: k, Value: v})
		copy(k, "XXX")
		copy(v, "YYYYY")
		CheckRecords(t, s, []Record{{0, "key", "value"}})
	})

	t.Run("InvalidOpsApplyNothing", func(t *testing.T) {
		s := open(t)
		MustWrite(t, s, false, Put(0, "keep", "1"))
		for _, bad := range []persistence.Op{
			{Kind: 0, DB: 0, Key: []byte("k")},
			{Kind: persistence.OpDeleteAll + 1},
			{Kind: persistence.OpPut, DB: -1, Key: []byte("k")},
			{Kind: persistence.OpPut, DB: persistence.MaxDB + 1, Key: []byte("k")},
			{Kind: persistence.OpDeleteDB, DB: persistence.MaxDB + 1},
		} {
			err := s.Write([]persistence.Op{Put(0, "new", "1"), Del(0, "keep"), bad}, true)
			if err == nil {
				t.Fatalf("Write with %+v: no error", bad)
			}
			CheckRecords(t, s, []Record{{0, "keep", "1"}})
		}
	})

	t.Run("LoadStopsOnError", func(t *testing.T) {
		s := open(t)
		MustWrite(t, s, false, Put(0, "a", "1"), Put(0, "b", "1"), Put(0, "c", "1"))
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
					ops := []persistence.Op{Put(w, fmt.Sprintf("k%03d", b), "v"), Put(w, "last", fmt.Sprint(b))}
					if b%10 == 9 {
						ops = append(ops, Del(w, fmt.Sprintf("k%03d", b-1)))
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
		m := Model{}
		for w := range writers {
			for b := range batches {
				m.Apply([]persistence.Op{Put(w, fmt.Sprintf("k%03d", b), "v"), Put(w, "last", fmt.Sprint(b))})
				if b%10 == 9 {
					m.Apply([]persistence.Op{Del(w, fmt.Sprintf("k%03d", b-1))})
				}
			}
		}
		CheckRecords(t, s, m.Records())
	})

	t.Run("Closed", func(t *testing.T) {
		s := open(t)
		MustWrite(t, s, false, Put(0, "a", "1"))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		for name, err := range map[string]error{
			"Write":      s.Write([]persistence.Op{Put(0, "b", "1")}, false),
			"Write sync": s.Write(nil, true),
			"Sync":       s.Sync(),
			"Load":       s.Load(func(int, []byte, []byte) error { return nil }),
		} {
			if !errors.Is(err, persistence.ErrStoreClosed) {
				t.Errorf("%s after Close: %v, want ErrStoreClosed", name, err)
			}
		}
		if u := s.DiskUsage(); u != 0 {
			t.Errorf("DiskUsage after Close: %d", u)
		}
	})
}

// Opener returns an open function for Run: storage is keyed by the
// subtest, and every store is closed when its test ends.
func Opener(create func(t *testing.T) func() (persistence.Store, error)) func(t *testing.T) persistence.Store {
	var mu sync.Mutex
	storage := map[*testing.T]func() (persistence.Store, error){}
	return func(t *testing.T) persistence.Store {
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

package keyspace

import (
	"fmt"
	"slices"
	"testing"
)

// recJournal records the changes it is told about as text.
type recJournal struct {
	name string
	ops  []string
}

func (r *recJournal) Put(db int, key []byte, v *Value) {
	r.ops = append(r.ops, fmt.Sprintf("%s put %d %s", r.name, db, key))
}
func (r *recJournal) Delete(db int, key []byte) {
	r.ops = append(r.ops, fmt.Sprintf("%s del %d %s", r.name, db, key))
}
func (r *recJournal) DeleteDB(db int) {
	r.ops = append(r.ops, fmt.Sprintf("%s flushdb %d", r.name, db))
}
func (r *recJournal) DeleteAll() { r.ops = append(r.ops, r.name+" flushall") }

// teeJournal tells outer, then the journal it wraps.
type teeJournal struct {
	outer *recJournal
	next  Journal
}

func (j teeJournal) Put(db int, key []byte, v *Value) {
	j.outer.Put(db, key, v)
	if j.next != nil {
		j.next.Put(db, key, v)
	}
}
func (j teeJournal) Delete(db int, key []byte) {
	j.outer.Delete(db, key)
	if j.next != nil {
		j.next.Delete(db, key)
	}
}
func (j teeJournal) DeleteDB(db int) {
	j.outer.DeleteDB(db)
	if j.next != nil {
		j.next.DeleteDB(db)
	}
}
func (j teeJournal) DeleteAll() {
	j.outer.DeleteAll()
	if j.next != nil {
		j.next.DeleteAll()
	}
}

// TestWrapJournal: a journal installed by WrapJournal, over the
// configured one or over none, sees every kind of change (writes,
// deletions, lazy and active expiry, eviction, flushes) in order, and
// the wrapped journal still does; Restore tells neither.
func TestWrapJournal(t *testing.T) {
	for _, withInner := range []bool{false, true} {
		inner := &recJournal{name: "inner"}
		cfg := Config{Shards: 1, Databases: 2, MaxMemory: 1 << 20}
		if withInner {
			cfg.Journal = inner
		}
		ks, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ks.Restore(0, []byte("restored"), Value{Kind: KindString, Obj: []byte("r")})
		outer := &recJournal{name: "outer"}
		var seen Journal = &recJournal{name: "unset"}
		ks.WrapJournal(func(j Journal) Journal {
			seen = j
			return teeJournal{outer: outer, next: j}
		})
		if withInner && seen != Journal(inner) || !withInner && seen != nil {
			t.Fatalf("wrap got %v, want the configured journal", seen)
		}
		sh := ks.DB(0).Shard([]byte("a"))
		sh.Lock()
		sh.Set([]byte("a"), Value{Kind: KindString, Obj: []byte("1")})
		sh.Set([]byte("e"), Value{Kind: KindString, Obj: []byte("1"), Exp: 10})
		sh.Lookup([]byte("e"), 11) // lazy expiry
		sh.Set([]byte("s"), Value{Kind: KindString, Obj: []byte("1"), Exp: 10})
		sh.Sweep(11, 10) // active expiry
		sh.Delete([]byte("a"), 0)
		sh.Unlock()
		sh1 := ks.DB(1).Shard([]byte("b"))
		sh1.Lock()
		sh1.Set([]byte("b"), Value{Kind: KindGCRA, N: 1})
		sh1.Unlock()
		ks.DB(1).Flush(false)
		ks.FlushAll(false)
		want := []string{"outer put 0 a", "outer put 0 e", "outer del 0 e", "outer put 0 s", "outer del 0 s",
			"outer del 0 a", "outer put 1 b", "outer flushdb 1", "outer flushall"}
		if !slices.Equal(outer.ops, want) {
			t.Errorf("inner %v: wrapper saw\n%q\nwant\n%q", withInner, outer.ops, want)
		}
		if withInner {
			for i := range want {
				want[i] = "inner" + want[i][len("outer"):]
			}
			if !slices.Equal(inner.ops, want) {
				t.Errorf("wrapped journal saw\n%q\nwant\n%q", inner.ops, want)
			}
		}
		// Eviction: a cap below what is stored evicts through Evict.
		outer.ops = nil
		small, err := New(Config{Shards: 1, MaxMemory: 1})
		if err != nil {
			t.Fatal(err)
		}
		small.WrapJournal(func(j Journal) Journal { return teeJournal{outer: outer, next: j} })
		sh = small.DB(0).Shard([]byte("x"))
		sh.Lock()
		sh.Set([]byte("x"), Value{Kind: KindGCRA, N: 1})
		sh.Unlock()
		if n := small.Evict(); n != 1 {
			t.Fatalf("Evict removed %d keys, want 1", n)
		}
		if want := []string{"outer put 0 x", "outer del 0 x"}; !slices.Equal(outer.ops, want) {
			t.Errorf("eviction: wrapper saw %q, want %q", outer.ops, want)
		}
	}
}

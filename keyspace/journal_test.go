package keyspace

import (
	"fmt"
	"slices"
	"testing"
)

// recJournal records the changes it is told about as text, in ops and,
// when log is set, in that log too (shared by several journals, it shows
// the order in which they were told).
type recJournal struct {
	name string
	ops  []string
	log  *[]string
}

func (r *recJournal) rec(op string) {
	r.ops = append(r.ops, op)
	if r.log != nil {
		*r.log = append(*r.log, op)
	}
}

func (r *recJournal) Put(db int, key []byte, v *Value) {
	r.rec(fmt.Sprintf("%s put %d %s", r.name, db, key))
}
func (r *recJournal) Delete(db int, key []byte) {
	r.rec(fmt.Sprintf("%s del %d %s", r.name, db, key))
}
func (r *recJournal) DeleteDB(db int) { r.rec(fmt.Sprintf("%s flushdb %d", r.name, db)) }
func (r *recJournal) DeleteAll()      { r.rec(r.name + " flushall") }

// TestSetJournalChain: a chain set by SetJournal, in place of the
// configured journal or of none, tells each of its journals about every
// kind of change (writes, deletions, lazy and active expiry, eviction,
// flushes), each change to every journal in the chain's order before the
// next change; the replaced journal hears nothing more, and Restore tells
// none.
func TestSetJournalChain(t *testing.T) {
	for _, withConfigured := range []bool{false, true} {
		configured := &recJournal{name: "configured"}
		cfg := Config{Shards: 1, Databases: 2, MaxMemory: 1 << 20}
		if withConfigured {
			cfg.Journal = configured
		}
		ks, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ks.Restore(0, []byte("restored"), Value{Kind: KindString, Obj: []byte("r")})
		var log []string
		first, second := &recJournal{name: "first", log: &log}, &recJournal{name: "second", log: &log}
		ks.SetJournal(Chain(first, nil, second))
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
		changes := []string{"put 0 a", "put 0 e", "del 0 e", "put 0 s", "del 0 s",
			"del 0 a", "put 1 b", "flushdb 1", "flushall"}
		var want []string
		for _, c := range changes {
			want = append(want, "first "+c, "second "+c)
		}
		if !slices.Equal(log, want) {
			t.Errorf("configured %v: the chain told\n%q\nwant\n%q", withConfigured, log, want)
		}
		if len(configured.ops) != 0 {
			t.Errorf("the replaced journal was told %q", configured.ops)
		}
		// Eviction: a cap below what is stored evicts through Evict.
		log = nil
		small, err := New(Config{Shards: 1, MaxMemory: 1})
		if err != nil {
			t.Fatal(err)
		}
		small.SetJournal(Chain(first, second))
		sh = small.DB(0).Shard([]byte("x"))
		sh.Lock()
		sh.Set([]byte("x"), Value{Kind: KindGCRA, N: 1})
		sh.Unlock()
		if n := small.Evict(); n != 1 {
			t.Fatalf("Evict removed %d keys, want 1", n)
		}
		if want := []string{"first put 0 x", "second put 0 x", "first del 0 x", "second del 0 x"}; !slices.Equal(log, want) {
			t.Errorf("eviction: the chain told %q, want %q", log, want)
		}
	}
}

// TestChain: Chain drops nil journals and flattens chains; with none left
// it is nil (a keyspace then has no journal), with one that journal.
func TestChain(t *testing.T) {
	a, b, c := &recJournal{name: "a"}, &recJournal{name: "b"}, &recJournal{name: "c"}
	if j := Chain(); j != nil {
		t.Errorf("Chain() = %v, want nil", j)
	}
	if j := Chain(nil, nil); j != nil {
		t.Errorf("Chain(nil, nil) = %v, want nil", j)
	}
	if j := Chain(nil, a); j != Journal(a) {
		t.Errorf("Chain(nil, a) = %v, want a", j)
	}
	j := Chain(Chain(a, b), nil, c)
	if got, ok := j.(chain); !ok || len(got) != 3 || got[0] != Journal(a) || got[1] != Journal(b) || got[2] != Journal(c) {
		t.Fatalf("Chain(Chain(a, b), nil, c) = %#v, want the chain a, b, c", j)
	}
	ks, err := New(Config{Shards: 1, Databases: 1})
	if err != nil {
		t.Fatal(err)
	}
	ks.SetJournal(Chain(nil))
	sh := ks.DB(0).Shard([]byte("k"))
	sh.Lock()
	sh.Set([]byte("k"), Value{Kind: KindGCRA, N: 1})
	sh.Unlock()
	if ks.journal != nil || sh.journal != nil {
		t.Errorf("SetJournal(Chain(nil)) left a journal: %v", ks.journal)
	}
}

package keyspace

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
)

// collected is a store that CollectChanges keeps up to date: db -> key -> N.
type collected struct {
	dbs     []map[string]uint64
	changed int // Changed calls
	shards  int // ShardDone calls
}

func (m *collected) FlushedDB(db int)                     { clear(m.dbs[db]) }
func (m *collected) Removed(db int, key []byte)           { delete(m.dbs[db], string(key)) }
func (m *collected) Changed(db int, key []byte, v *Value) { m.dbs[db][string(key)] = v.N; m.changed++ }
func (m *collected) ShardDone()                           { m.shards++ }

// contents is what ks holds, as the collected keeps it.
func contents(ks *Keyspace) []map[string]uint64 {
	out := make([]map[string]uint64, ks.NumDB())
	for d := range out {
		out[d] = map[string]uint64{}
		db := ks.DB(d)
		for i := 0; i < db.NumShards(); i++ {
			s := db.ShardAt(i)
			s.Lock()
			s.Range(0, func(key string, v *Value) bool { out[d][key] = v.N; return true })
			s.Unlock()
		}
	}
	return out
}

// TestCollectChangesMirrors: random sets, deletes, FLUSHDB and FLUSHALL,
// with a collection at random points into a collected; after each
// collection the collected must equal the keyspace (so nothing changed is
// missed, and nothing removed survives).
func TestCollectChangesMirrors(t *testing.T) {
	const rounds, opsPerRound = 400, 300
	rng := rand.New(rand.NewPCG(1, 2))
	ks, err := New(Config{Databases: 2, Shards: 4, Journal: &recJournal{}, TrackChanges: true})
	if err != nil {
		t.Fatal(err)
	}
	m := &collected{dbs: []map[string]uint64{{}, {}}}
	checked := 0
	for r := 0; r < rounds; r++ {
		for range opsPerRound {
			db := ks.DB(rng.IntN(2))
			key := []byte(fmt.Sprintf("k%d", rng.IntN(300)))
			if rng.IntN(3) == 0 {
				// A long key lives outside its entry: covers the key page path.
				key = append(key, make([]byte, 40)...)
			}
			s := db.Shard(key)
			switch x := rng.IntN(100); {
			case x < 70:
				s.Lock()
				s.Set(key, Value{Kind: KindGCRA, N: rng.Uint64()})
				s.Unlock()
			case x < 98:
				s.Lock()
				s.Delete(key, 0)
				s.Unlock()
			case x < 99:
				db.Flush(false)
			default:
				ks.FlushAll(false)
			}
		}
		ks.CollectChanges(m)
		want := contents(ks)
		for d := range want {
			if !maps.Equal(m.dbs[d], want[d]) {
				t.Fatalf("round %d db %d: the collected (%d keys) differs from the keyspace (%d keys)", r, d, len(m.dbs[d]), len(want[d]))
			}
		}
		checked++
	}
	t.Logf("%d collections over %d random changes checked", checked, rounds*opsPerRound)
}

// TestCollectChangesOnce: a key changed many times is reported once, a
// second collection reports nothing, and Restore (the startup load) is not
// tracked.
func TestCollectChangesOnce(t *testing.T) {
	ks, err := New(Config{Shards: 2, Journal: &recJournal{}, TrackChanges: true})
	if err != nil {
		t.Fatal(err)
	}
	ks.Restore(0, []byte("loaded"), Value{Kind: KindGCRA, N: 1})
	s := ks.DB(0).Shard([]byte("hot"))
	for i := range 1000 {
		s.Lock()
		s.Set([]byte("hot"), Value{Kind: KindGCRA, N: uint64(i)})
		s.Unlock()
	}
	m := &collected{dbs: make([]map[string]uint64, 16)}
	for i := range m.dbs {
		m.dbs[i] = map[string]uint64{}
	}
	ks.CollectChanges(m)
	if m.changed != 1 || m.dbs[0]["hot"] != 999 || len(m.dbs[0]) != 1 {
		t.Fatalf("after 1000 changes of one key: %d reported, collected %v; want 1 report of hot=999", m.changed, m.dbs[0])
	}
	if st := ks.Changes(); st.Dirty != 0 || st.Removed != 0 {
		t.Fatalf("after a collection: %+v, want nothing pending", st)
	}
	ks.CollectChanges(m)
	if m.changed != 1 {
		t.Fatalf("a second collection reported %d changes, want none", m.changed-1)
	}
	// A shard whose last key goes drops its table: the entries marked
	// before no longer exist.
	for i := range 300 {
		s.Lock()
		s.Set([]byte(fmt.Sprintf("gone%d", i)), Value{Kind: KindGCRA, N: 1})
		s.Unlock()
	}
	s.Lock()
	s.Delete([]byte("hot"), 0)
	for i := range 300 {
		s.Delete([]byte(fmt.Sprintf("gone%d", i)), 0)
	}
	s.Unlock()
	ks.CollectChanges(m)
	if len(m.dbs[0]) != 0 {
		t.Fatalf("after removing every key: the collection left %d keys", len(m.dbs[0]))
	}
	if m.shards != 3*16*2 {
		t.Fatalf("ShardDone called %d times, want one per shard per collection (%d)", m.shards, 3*16*2)
	}
}

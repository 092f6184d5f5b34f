package keyspace

import (
	"fmt"
	"runtime"
	"testing"
	"weak"
)

// nopJournal is a Journal that keeps nothing.
type nopJournal struct{}

func (nopJournal) Put(int, []byte, *Value) {}
func (nopJournal) Delete(int, []byte)      {}
func (nopJournal) DeleteDB(int)            {}
func (nopJournal) DeleteAll()              {}

// TestRemovedValuesAreCollectable: once a key's object is evicted,
// deleted or replaced and the shard unlocked, nothing of the keyspace
// keeps it alive: not the shard's view (what Lookup returned), not what
// the journal was shown. Each case grows 300 keys' strings to 64 KiB under
// a 1 MiB maxmemory, as SET does (issue 26: a view kept the last value it
// showed, up to one evicted value per shard whatever maxmemory said), and
// counts with weak pointers, after a collection, the objects still alive:
// at most one per key left.
func TestRemovedValuesAreCollectable(t *testing.T) {
	type op func(ks *Keyspace, key []byte, obj []byte)
	set := func(ks *Keyspace, key, obj []byte) { // SET: read, then replace
		sh := ks.DB(0).Shard(key)
		sh.Lock()
		cur := sh.Lookup(key, 0)
		sh.Replace(key, cur, Value{Kind: KindString, Obj: obj})
		sh.Unlock()
	}
	for _, tc := range []struct {
		name    string
		journal Journal
		write   op
		after   func(ks *Keyspace, key []byte) // then, on the same key
	}{
		{"lookup", nil, set, nil},
		{"journal", nopJournal{}, func(ks *Keyspace, key, obj []byte) {
			sh := ks.DB(0).Shard(key)
			sh.Lock()
			sh.Set(key, Value{Kind: KindString, Obj: obj}) // the view is not involved
			sh.Unlock()
		}, nil},
		{"lockall", nopJournal{}, func(ks *Keyspace, key, obj []byte) { // EXEC
			ks.LockAll()
			sh := ks.DB(0).Shard(key)
			cur := sh.Lookup(key, 0)
			sh.Replace(key, cur, Value{Kind: KindString, Obj: obj})
			ks.UnlockAll()
		}, nil},
		{"delete", nil, set, func(ks *Keyspace, key []byte) { // GET then DEL of every other key
			if key[len(key)-1]%2 == 0 {
				sh := ks.DB(0).Shard(key)
				sh.Lock()
				sh.Lookup(key, 0)
				sh.Delete(key, 0)
				sh.Unlock()
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const keys, limit = 300, 1 << 20
			ks, err := New(Config{MaxMemory: limit, Journal: tc.journal, Databases: 1})
			if err != nil {
				t.Fatal(err)
			}
			var objs []weak.Pointer[byte]
			for size := 1 << 10; size <= 64<<10; size *= 2 {
				for i := 0; i < keys; i++ {
					obj := make([]byte, size)
					objs = append(objs, weak.Make(&obj[0]))
					key := []byte(fmt.Sprint("key:", i))
					tc.write(ks, key, obj)
					ks.Evict()
					if tc.after != nil {
						tc.after(ks, key)
					}
				}
			}
			runtime.GC()
			alive := 0
			for _, w := range objs {
				if w.Value() != nil {
					alive++
				}
			}
			n := ks.DB(0).Size(false)
			if mem := ks.Memory(); mem.Used > limit || mem.Evicted == 0 {
				t.Fatalf("memory %+v: want evictions and at most %d bytes", mem, limit)
			}
			if alive > n {
				t.Errorf("%d of %d objects alive after a collection with %d keys left: %d removed ones are kept", alive, len(objs), n, alive-n)
			}
			t.Logf("%d keys left, %d objects alive", n, alive)
			runtime.KeepAlive(ks)
		})
	}
}

package keyspace

import (
	"fmt"
	"sync"
	"testing"
)

func newKS(t *testing.T, shards int) *Keyspace {
	t.Helper()
	ks, err := New(Config{Shards: shards})
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func TestNewRoundsShardsToPowerOfTwo(t *testing.T) {
	for _, tc := range []struct{ in, want int }{{1, 1}, {3, 4}, {256, 256}, {257, 512}} {
		ks := newKS(t, tc.in)
		if got := ks.DB(0).NumShards(); got != tc.want {
			t.Errorf("Shards %d: got %d shards, want %d", tc.in, got, tc.want)
		}
	}
	if ks := newKS(t, 0); ks.NumDB() != 16 || ks.DB(0).NumShards() != 256 {
		t.Errorf("defaults: %d dbs, %d shards", ks.NumDB(), ks.DB(0).NumShards())
	}
	if _, err := New(Config{Databases: -1}); err == nil {
		t.Error("negative databases accepted")
	}
}

func TestLazyExpiry(t *testing.T) {
	ks := newKS(t, 4)
	db := ks.DB(0)
	k := []byte("k")
	sh := db.Shard(k)
	sh.Lock()
	defer sh.Unlock()
	sh.Set(k, Value{Kind: KindGCRA, N: 7, Exp: 1000})
	// Redis keeps a key alive during the millisecond of its expiry.
	if v := sh.Lookup(k, 1000); v == nil || v.N != 7 {
		t.Fatalf("at expiry: got %v, want live value", v)
	}
	if v := sh.Lookup(k, 1001); v != nil {
		t.Fatalf("after expiry: got %v, want nil", v)
	}
	if sh.Len() != 0 {
		t.Fatalf("expired entry not removed on access: len %d", sh.Len())
	}
	sh.Set(k, Value{Kind: KindString, Obj: []byte("x")})
	if v := sh.Lookup(k, 1<<60); v == nil {
		t.Fatal("value without expiry expired")
	}
	if !sh.Delete(k, 0) || sh.Delete(k, 0) {
		t.Fatal("Delete should report true once")
	}
}

func TestSetOverwritesInPlace(t *testing.T) {
	ks := newKS(t, 1)
	sh := ks.DB(0).Shard([]byte("a"))
	sh.Lock()
	defer sh.Unlock()
	sh.Set([]byte("a"), Value{Kind: KindGCRA, N: 1})
	sh.Set([]byte("a"), Value{Kind: KindGCRA, N: 2})
	if p := sh.Lookup([]byte("a"), 0); p.N != 2 || sh.Len() != 1 {
		t.Fatalf("got N=%d len=%d, want 2 and 1", p.N, sh.Len())
	}
}

func TestSweepRemovesExpiredOnly(t *testing.T) {
	ks := newKS(t, 8)
	const live, dead = 300, 700
	for i := 0; i < live+dead; i++ {
		k := []byte(fmt.Sprint("key:", i))
		exp := int64(0)
		if i >= live {
			exp = 50
		}
		sh := ks.DB(i % 2).Shard(k)
		sh.Lock()
		sh.Set(k, Value{Kind: KindGCRA, Exp: exp})
		sh.Unlock()
	}
	removed := 0
	for pass := 0; pass < 100 && removed < dead; pass++ {
		n := ks.Sweep(100, SweepConfig{PerShard: 5, Rounds: 2})
		if n > 2*8*5*2 {
			t.Fatalf("pass removed %d keys, more than the bound %d", n, 2*8*5*2)
		}
		removed += n
	}
	if removed != dead {
		t.Fatalf("removed %d, want %d", removed, dead)
	}
	if got := ks.DB(0).Size(false) + ks.DB(1).Size(false); got != live {
		t.Fatalf("left %d keys, want %d", got, live)
	}
	st := ks.DB(0).Stats(100, false)
	if st.Keys != live/2 || st.Expires != 0 {
		t.Fatalf("stats %+v, want %d keys, 0 expires", st, live/2)
	}
}

func TestShardLockIsExclusive(t *testing.T) {
	ks := newKS(t, 16)
	db := ks.DB(0)
	key := []byte("counter")
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				sh := db.Shard(key)
				sh.Lock()
				if v := sh.Lookup(key, 0); v != nil {
					v.N++
					sh.Changed(key, v)
				} else {
					sh.Set(key, Value{Kind: KindGCRA, N: 1})
				}
				sh.Unlock()
			}
		}()
	}
	wg.Wait()
	sh := db.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	if got := sh.Lookup(key, 0).N; got != workers*each {
		t.Fatalf("lost updates: %d, want %d", got, workers*each)
	}
}

func BenchmarkLookupSet(b *testing.B) {
	ks, _ := New(Config{})
	db := ks.DB(0)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte(fmt.Sprintf("user:%d", i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := keys[i&1023]
		sh := db.Shard(k)
		sh.Lock()
		if v := sh.Lookup(k, 1); v != nil {
			v.N++
			sh.Changed(k, v)
		} else {
			sh.Set(k, Value{Kind: KindGCRA})
		}
		sh.Unlock()
	}
}

func TestMemoryAccountingAndEviction(t *testing.T) {
	ks, err := New(Config{Shards: 4, MaxMemory: 64 * 1024})
	if err != nil {
		t.Fatal(err)
	}
	db := ks.DB(0)
	for i := 0; i < 10000; i++ {
		k := []byte(fmt.Sprint("spray:", i))
		sh := db.Shard(k)
		sh.Lock()
		sh.Set(k, Value{Kind: KindGCRA, N: uint64(i)})
		sh.Unlock()
	}
	m := ks.Memory()
	if m.Used > 64*1024 || m.Used < 60*1024 {
		t.Fatalf("used %d bytes with a cap of %d", m.Used, 64*1024)
	}
	if m.Evicted == 0 || int(m.Evicted)+db.Size(false) != 10000 {
		t.Fatalf("evicted %d, left %d: every insert beyond the cap should evict one", m.Evicted, db.Size(false))
	}
	// Accounting returns to zero when everything goes.
	db.Flush(false)
	if u := ks.Memory().Used; u != 0 {
		t.Fatalf("after FLUSHDB used = %d", u)
	}
}

func TestNoEvictionRefuses(t *testing.T) {
	ks, _ := New(Config{Shards: 1, MaxMemory: 1000, Policy: NoEviction})
	db := ks.DB(0)
	n := 0
	for ; ks.CanInsert(); n++ {
		k := []byte(fmt.Sprint("k", n))
		sh := db.Shard(k)
		sh.Lock()
		sh.Set(k, Value{Kind: KindGCRA})
		sh.Unlock()
	}
	// Keys k0..k9 take EntryOverhead+2 bytes, k10.. EntryOverhead+3.
	want := 0
	for used := 0; used < 1000; want++ {
		used += EntryOverhead + len(fmt.Sprint("k", want))
	}
	if n != want || ks.Memory().Evicted != 0 {
		t.Fatalf("inserted %d before refusing, evicted %d", n, ks.Memory().Evicted)
	}
	sh := db.Shard([]byte("k0"))
	sh.Lock()
	sh.Delete([]byte("k0"), 0)
	sh.Unlock()
	if !ks.CanInsert() {
		t.Fatal("deleting a key did not make room")
	}
}

// growObj is an object whose size a test changes in place.
type growObj struct{ n int }

func (g *growObj) MemSize() int { return g.n }

func set(ks *Keyspace, db int, key string, v Value) {
	k := []byte(key)
	sh := ks.DB(db).Shard(k)
	sh.Lock()
	sh.Set(k, v)
	sh.Unlock()
}

// TestEvictReclaimsGrowth: a value that grows in a shard holding nothing
// else to evict takes the memory past MaxMemory; Evict, going round every
// shard of every database, brings it back under.
func TestEvictReclaimsGrowth(t *testing.T) {
	const limit = 64 << 10
	ks, err := New(Config{MaxMemory: limit, Databases: 2, Shards: 256})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		set(ks, i%2, fmt.Sprint("small:", i), Value{Kind: KindGCRA})
	}
	if n := ks.Evict(); n != 0 {
		t.Fatalf("evicted %d keys below the cap", n)
	}
	for i := 0; i < 20; i++ {
		set(ks, 0, fmt.Sprint("small:", 2*i), Value{Kind: KindString, Obj: make([]byte, 8<<10)})
	}
	if used := ks.Memory().Used; used <= limit {
		t.Fatalf("used %d: the test must grow values past the cap", used)
	}
	n := ks.Evict()
	if m := ks.Memory(); m.Used > limit || n == 0 || m.Evicted < int64(n) {
		t.Fatalf("Evict removed %d keys, memory %+v", n, m)
	}
	// One value larger than the cap: it is evicted (with others, sampled
	// before it), and Evict stops under the cap.
	set(ks, 1, "huge", Value{Kind: KindString, Obj: make([]byte, 2*limit)})
	ks.Evict()
	sh := ks.DB(1).Shard([]byte("huge"))
	sh.Lock()
	huge := sh.Peek([]byte("huge"), 0)
	sh.Unlock()
	if m := ks.Memory(); m.Used > limit || huge != nil {
		t.Fatalf("after a value beyond the cap: %+v, huge kept: %v", m, huge != nil)
	}
	// Every key gone: Evict stops after one round of empty shards.
	ks.FlushAll(false)
	ks.used.Add(limit + 1) // as if an entry had escaped the accounting
	if n := ks.Evict(); n != 0 {
		t.Fatalf("evicted %d keys from an empty keyspace", n)
	}
	ks.used.Add(-limit - 1)
	// NoEviction never evicts.
	ne, _ := New(Config{MaxMemory: 100, Policy: NoEviction, Shards: 1})
	set(ne, 0, "a", Value{Kind: KindString, Obj: make([]byte, 1000)})
	if n := ne.Evict(); n != 0 {
		t.Fatalf("noeviction evicted %d", n)
	}
}

// TestCanReplace: under NoEviction at the cap, a new key or a larger
// object is refused, a smaller or equal one is not.
func TestCanReplace(t *testing.T) {
	ks, _ := New(Config{MaxMemory: 1000, Policy: NoEviction, Shards: 1})
	small := Value{Kind: KindString, Obj: make([]byte, 100)}
	big := Value{Kind: KindString, Obj: make([]byte, 2000)}
	if !ks.CanReplace(nil, big) {
		t.Fatal("refused below the cap")
	}
	set(ks, 0, "k", big)
	sh := ks.DB(0).Shard([]byte("k"))
	sh.Lock()
	cur := sh.Lookup([]byte("k"), 0)
	got := [3]bool{ks.CanReplace(nil, small), ks.CanReplace(cur, Value{Kind: KindString, Obj: make([]byte, 3000)}), ks.CanReplace(cur, small)}
	sh.Unlock()
	if got != [3]bool{false, false, true} {
		t.Fatalf("at the cap: new key, larger, smaller = %v, want false false true", got)
	}
}

// TestAuditSeesUnaccountedChange: Audit's figures agree while every change
// goes through Replace or Changed, and differ when an object grew in place
// without Changed (the check the commands' invariant test relies on).
func TestAuditSeesUnaccountedChange(t *testing.T) {
	ks := newKS(t, 4)
	g := &growObj{n: 100}
	set(ks, 0, "g", Value{Kind: KindLog, Obj: g})
	set(ks, 3, "s", Value{Kind: KindString, Obj: []byte("abc")})
	if e, s, tot := ks.Audit(); e != s || s != tot || e == 0 {
		t.Fatalf("entries %d, shards %d, total %d", e, s, tot)
	}
	k := []byte("g")
	sh := ks.DB(0).Shard(k)
	sh.Lock()
	v := sh.Lookup(k, 0)
	g.n = 500
	sh.Unlock()
	if e, s, tot := ks.Audit(); e != s+400 || s != tot {
		t.Fatalf("after an unrecorded growth: entries %d, shards %d, total %d", e, s, tot)
	}
	sh.Lock()
	v = sh.Lookup(k, 0)
	sh.Changed(k, v)
	sh.Unlock()
	if e, s, tot := ks.Audit(); e != s || s != tot {
		t.Fatalf("after Changed: entries %d, shards %d, total %d", e, s, tot)
	}
}

// TestReplicaModeKeepsExpiredKeys: in replica mode an expired key is
// hidden from Lookup but stays until a Delete (from the primary) removes
// it; Sweep and Evict remove nothing. Back as a primary, Lookup removes it.
func TestReplicaModeKeepsExpiredKeys(t *testing.T) {
	ks, err := New(Config{Shards: 4, MaxMemory: 1, Policy: AllKeysLRU})
	if err != nil {
		t.Fatal(err)
	}
	ks.SetReplica(true)
	db := ks.DB(0)
	for i := 0; i < 50; i++ {
		key := []byte{'k', byte(i)}
		sh := db.Shard(key)
		sh.Lock()
		sh.Set(key, Value{Kind: KindGCRA, N: 1, Exp: 1000})
		sh.Unlock()
	}
	if n := ks.Evict(); n != 0 {
		t.Fatalf("Evict in replica mode removed %d keys", n)
	}
	if n := ks.Sweep(5000, SweepConfig{PerShard: 100, Rounds: 4}); n != 0 {
		t.Fatalf("Sweep in replica mode removed %d keys", n)
	}
	key := []byte{'k', 7}
	sh := db.Shard(key)
	sh.Lock()
	if v := sh.Lookup(key, 5000); v != nil {
		t.Fatalf("expired key visible on a replica: %+v", v)
	}
	sh.Unlock()
	if got := db.Size(false); got != 50 {
		t.Fatalf("replica holds %d keys after reads, sweep and evict, want 50", got)
	}
	ks.SetReplica(false)
	sh.Lock()
	sh.Lookup(key, 5000)
	sh.Unlock()
	if got := db.Size(false); got != 49 {
		t.Fatalf("primary's Lookup left %d keys, want 49 (the expired key removed)", got)
	}
}

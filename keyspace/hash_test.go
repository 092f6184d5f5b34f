package keyspace_test

import (
	"strconv"
	"testing"

	"github.com/cellserver/cellserver/keyspace"
)

// TestHashMethods: the methods that take a key's Hash find the same shard
// and the same entries as those that hash the key themselves, and
// ReplaceHash with hash 0 (unknown) stores the key where Lookup finds it.
func TestHashMethods(t *testing.T) {
	ks, err := keyspace.New(keyspace.Config{Shards: 16})
	if err != nil {
		t.Fatal(err)
	}
	db := ks.DB(0)
	const n = 2000
	for i := range n {
		key := []byte("k" + strconv.Itoa(i))
		h := ks.Hash(key)
		sh := db.ShardHash(h)
		if sh != db.Shard(key) {
			t.Fatalf("%s: ShardHash and Shard differ", key)
		}
		sh.Lock()
		switch i % 3 {
		case 0:
			sh.ReplaceHash(key, h, nil, keyspace.Value{Kind: keyspace.KindGCRA, N: uint64(i)})
		case 1:
			sh.ReplaceHash(key, 0, nil, keyspace.Value{Kind: keyspace.KindGCRA, N: uint64(i)})
		case 2:
			sh.Replace(key, nil, keyspace.Value{Kind: keyspace.KindGCRA, N: uint64(i)})
		}
		sh.Unlock()
	}
	for i := range n {
		key := []byte("k" + strconv.Itoa(i))
		h := ks.Hash(key)
		sh := db.ShardHash(h)
		sh.Lock()
		a, b := sh.LookupHash(key, h, 1), sh.Peek(key, 1)
		if a == nil || b == nil || a.N != uint64(i) || b.N != uint64(i) {
			t.Fatalf("%s: LookupHash %v, Peek %v, want N %d", key, a, b, i)
		}
		if p := sh.PeekHash(key, h, 1); p == nil || p.N != uint64(i) {
			t.Fatalf("%s: PeekHash %v", key, p)
		}
		if u, v := sh.UsageHash(key, h, 1), sh.Usage(key, 1); u != v || u <= 0 {
			t.Fatalf("%s: UsageHash %d, Usage %d", key, u, v)
		}
		if i%2 == 0 && !sh.DeleteHash(key, h, 1) {
			t.Fatalf("%s: DeleteHash found nothing", key)
		}
		sh.Unlock()
	}
	if got := db.Size(false); got != n/2 {
		t.Fatalf("%d keys left, want %d", got, n/2)
	}
	t.Logf("%d keys", n)
}

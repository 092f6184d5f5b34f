package commands

import (
	"bytes"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/cellserver/cellserver/keyspace"
)

// TestDupSortedComparisons: CL.ALL's duplicate-key check over many keys
// makes O(n log n) key comparisons (counted, not timed), and finds a
// repeated key wherever it is. A linear scan per check, as CL.ALL once
// did, makes n(n-1)/2: 1.25e9 for 50,000 keys.
func TestDupSortedComparisons(t *testing.T) {
	const n = 50000
	rng := rand.New(rand.NewPCG(12, 7))
	keys := make([][]byte, n)
	for i := range keys {
		keys[i] = []byte("user:" + strconv.Itoa(rng.IntN(1<<40)) + ":" + strconv.Itoa(i)) // distinct
	}
	bound := 3 * n * bits.Len(uint(n)) // 3 n log2 n
	cases := 0
	for trial := range 20 {
		dupAt, dupOf := -1, -1
		ks := append([][]byte(nil), keys...)
		if trial%2 == 1 {
			dupAt, dupOf = rng.IntN(n), rng.IntN(n)
			if dupAt == dupOf {
				dupOf = (dupOf + 1) % n
			}
			ks[dupAt] = ks[dupOf]
		}
		calls := 0
		cmp := func(a, b []byte) int { calls++; return bytes.Compare(a, b) }
		got := dupSorted(n, func(i int) []byte { return ks[i] }, cmp)
		if got != (dupAt >= 0) {
			t.Fatalf("trial %d: dupSorted = %v with key %d repeated at %d", trial, got, dupOf, dupAt)
		}
		if calls > bound {
			t.Fatalf("trial %d: %d comparisons for %d keys, want at most 3 n log2 n = %d", trial, calls, n, bound)
		}
		cases++
		if trial == 0 {
			t.Logf("%d keys: %d comparisons (bound %d; pairwise: %d)", n, calls, bound, n*(n-1)/2)
		}
	}
	t.Logf("%d trials of %d keys", cases, n)
}

// TestOrderShards: the lock order is sorted by database then index, each
// shard once, whatever the number of shards (insertion for a few, a sort
// for more).
func TestOrderShards(t *testing.T) {
	ks, err := keyspace.New(keyspace.Config{Databases: 3})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	cases := 0
	for _, n := range []int{0, 1, 2, 5, 8, 9, 100, maxAllChecks} {
		for trial := range 10 {
			shards := make([]*keyspace.Shard, n)
			distinct := map[*keyspace.Shard]bool{}
			for i := range shards {
				// Few keys for some trials, so that shards repeat.
				shards[i] = ks.DB(rng.IntN(3)).Shard([]byte("k" + strconv.Itoa(rng.IntN(1<<(trial+1)))))
				distinct[shards[i]] = true
			}
			got := orderShards(shards)
			if len(got) != len(distinct) {
				t.Fatalf("n=%d: %d shards after orderShards, want the %d distinct ones", n, len(got), len(distinct))
			}
			for i := 1; i < len(got); i++ {
				if shardCompare(got[i-1], got[i]) >= 0 {
					d1, a := got[i-1].Order()
					d2, b := got[i].Order()
					t.Fatalf("n=%d: shard %d (db %d index %d) before db %d index %d", n, i-1, d1, a, d2, b)
				}
			}
			cases++
		}
	}
	t.Logf("%d cases", cases)
}

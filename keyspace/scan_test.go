package keyspace

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestShardScanProperty: Shard.Scan from the position the last call
// returned, with random budgets and random keys added and removed between
// calls, returns every key that exists for the whole walk exactly once,
// never looks at more positions than its budget, and no key twice in a
// walk unless it was removed and added again.
func TestShardScanProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 6))
	for walk := 0; walk < 200; walk++ {
		ks := newKS(t, 1)
		sh := ks.DB(0).ShardAt(0)
		sh.Lock()
		stable := map[string]bool{}
		var churn []string
		n := rng.IntN(2000)
		for i := 0; i < n; i++ {
			k := fmt.Sprint("s", i)
			sh.Set([]byte(k), Value{Kind: KindGCRA, N: 1})
			stable[k] = true
			if rng.IntN(2) == 0 { // interleaved keys that go: free positions
				c := fmt.Sprint("c", walk, ":", i)
				sh.Set([]byte(c), Value{Kind: KindGCRA, N: 1})
				churn = append(churn, c)
			}
		}
		seen := map[string]int{}
		pos, calls, added := uint32(0), 0, 0
		for {
			budget := 1 + rng.IntN(50)
			next, end := sh.Scan(0, pos, budget, func(k string, v *Value) bool {
				seen[k]++
				return rng.IntN(20) != 0 // sometimes stop early, as COUNT does
			})
			if next < pos || int(next-pos) > budget {
				t.Fatalf("walk %d: Scan from %d with budget %d returned %d", walk, pos, budget, next)
			}
			pos, calls = next, calls+1
			if end {
				break
			}
			for j := rng.IntN(4); j > 0 && len(churn) > 0; j-- { // remove some
				i := rng.IntN(len(churn))
				sh.Delete([]byte(churn[i]), 0)
				churn = append(churn[:i], churn[i+1:]...)
			}
			for j := rng.IntN(4); j > 0; j-- { // add some (reusing free positions)
				c := fmt.Sprint("a", walk, ":", added)
				added++
				sh.Set([]byte(c), Value{Kind: KindGCRA, N: 1})
				churn = append(churn, c)
			}
		}
		for k := range stable {
			if seen[k] != 1 {
				t.Fatalf("walk %d: %s seen %d times, want once", walk, k, seen[k])
			}
		}
		for k, c := range seen {
			if c != 1 {
				t.Fatalf("walk %d: %s seen %d times (never re-added)", walk, k, c)
			}
		}
		sh.Unlock()
	}
}

package pebblestore

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cellserver/cellserver/persistence"
)

// TestLargeRunOrder: runs of one database past bucketMin are sorted by
// slot buckets (a change log checkpoint's batch), others by a comparison
// sort; either way each key ends in its last change's state.
func TestLargeRunOrder(t *testing.T) {
	s := openT(t, t.TempDir(), Options{})
	defer closeT(t, s)
	rng := rand.New(rand.NewPCG(1, 2))
	m := model{}
	for round, dbs := range []int{1, 1, 3} {
		var ops []persistence.Op
		for range 3 * bucketMin {
			db := rng.IntN(dbs)
			key := fmt.Sprintf("k:%d", rng.IntN(1500))
			if rng.IntN(5) == 0 {
				ops = append(ops, del(db, key))
			} else {
				ops = append(ops, put(db, key, fmt.Sprintf("v%d-%d", round, rng.IntN(1<<20))))
			}
		}
		mustWrite(t, s, false, ops...)
		m.Apply(ops)
		checkRecords(t, s, m.Records())
	}
}

package keyspace

import (
	"math"
	"testing"
)

// TestValueWindowAccessors: what SetFixed and SetSliding store reads back
// through WindowStart, FixedCount and SlidingCounts, at the edges of the
// counts' ranges, and Exp and Obj are kept.
func TestValueWindowAccessors(t *testing.T) {
	starts := []int64{math.MinInt64, -1e9, 0, 1, 1_700_000_000_000_000_000, math.MaxInt64}
	counts := []int64{0, 1, 2, math.MaxUint32 - 1, math.MaxUint32}
	checked := 0
	for _, start := range starts {
		for _, prev := range counts {
			for _, cur := range counts {
				v := Value{Exp: 7, Obj: "kept"}
				v.SetSliding(start, prev, cur)
				p, c := v.SlidingCounts()
				if v.Kind != KindSliding || v.WindowStart() != start || p != prev || c != cur || v.Exp != 7 || v.Obj != "kept" {
					t.Fatalf("SetSliding(%d, %d, %d): %+v reads start %d prev %d cur %d", start, prev, cur, v, v.WindowStart(), p, c)
				}
				checked++
			}
		}
		for _, n := range append(counts, math.MaxInt64) {
			v := Value{Exp: 7}
			v.SetFixed(start, n)
			if v.Kind != KindFixed || v.WindowStart() != start || v.FixedCount() != n || v.Exp != 7 {
				t.Fatalf("SetFixed(%d, %d): %+v reads start %d count %d", start, n, v, v.WindowStart(), v.FixedCount())
			}
			checked++
		}
	}
	t.Logf("%d values checked", checked)
}

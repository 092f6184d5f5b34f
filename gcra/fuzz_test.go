package gcra

import (
	"math"
	"testing"
)

// FuzzDecide checks that Decide never panics, that its result is
// consistent, and that it agrees with the math/big reference. The seeds
// are the spec's worked examples.
func FuzzDecide(f *testing.F) {
	for _, seed := range []struct {
		now        int64
		tat        uint64
		exists     bool
		b, c, p, q int64
	}{
		{t0, 0, false, 15, 30, 60, 1},
		{t0, t0 + 2e9, true, 0, 1, 2, 1},
		{t0 + 2050e6, t0 + 2e9, true, 0, 1, 2, 1},
		{t0 + 1100e6, t0 + 3e9, true, 2, 1, 1, 1},
		{t0 + 1100e6, t0 + 4e9, true, 2, 1, 1, 0},
		{t0, 0, false, 4, 1, 1, 0},
		{t0, 0, false, 4, 1, 1, 6},
		{t0, t0 + 3e9, true, 4, 1, 1, 3},
		{t0, 0, false, -5, 1, 1, 1},
		{t0, 0, false, math.MaxInt64, 1, 1, 1},
		{t0, 0, false, math.MinInt64, 1, 1, 1},
		{t0, 0, false, 1, 1000000001, 1, 1},
		{t0, 0, false, 1, 1000000000, 1, 1},
		{t0, 0, false, 20, 10000000, 1, 1},
		{t0, 0, false, 100, 300000, 1, 0},
		{t0, 0, false, 48, 41221, 3, 1},
		{t0, t0 + 1_000_500_000, true, 0, 2000, 2001, 1},
		{t0, 0, false, 0, 1, math.MaxInt64, 1},
		{t0, 0, false, 5, 1, 9223372036, 1},
		{t0, 0, false, 5, math.MaxInt64, math.MaxInt64, 1},
		{t0, 0, false, 0, -1, 1, 1},
		{t0, 0, false, -3, -1, 1, 0},
		{t0, 0, false, 5, 1000, 1, -1},
		{t0, 0, false, 5, 1, 1, -math.MaxInt64},
		{t0, 0, false, 5, 1, 1, math.MaxInt64},
		{t0, 0, true, 1, 1, 1, 1},
		{t0, math.MaxUint64, true, 1, 1, 1, 1},
		{t0, t0 - 5e9, true, 4, 1, 1, 10},
		{math.MinInt64, math.MaxUint64, true, math.MinInt64, math.MinInt64, math.MinInt64, math.MinInt64},
		{math.MaxInt64, 0, true, math.MaxInt64, -1, math.MaxInt64, math.MaxInt64},
	} {
		f.Add(seed.now, seed.tat, seed.exists, seed.b, seed.c, seed.p, seed.q)
	}
	f.Fuzz(func(t *testing.T, now int64, tat uint64, exists bool, b, c, p, q int64) {
		params := Params{MaxBurst: b, Count: c, Period: p, Quantity: q}
		r, err := Decide(now, tat, exists, params)
		if (err != nil) != (EmissionInterval(c, p) == 0) {
			t.Fatalf("Decide(%+v): error %v with emission interval %d", params, err, EmissionInterval(c, p))
		}
		if err == nil {
			if r.Limit != b+1 {
				t.Errorf("Limit = %d, want %d", r.Limit, b+1)
			}
			if !r.Limited && r.RetryAfter != -1 {
				t.Errorf("allowed with RetryAfter %d", r.RetryAfter)
			}
			if (r.RetryAfter == -1) != (r.RetryAfterMillis == -1) {
				t.Errorf("RetryAfter %d with RetryAfterMillis %d", r.RetryAfter, r.RetryAfterMillis)
			}
			if r.Store != !r.Limited {
				t.Errorf("Store %v with Limited %v", r.Store, r.Limited)
			}
			if !r.Store && (r.NewTAT != 0 || r.TTLMillis != 0) {
				t.Errorf("limited with NewTAT %d TTLMillis %d", r.NewTAT, r.TTLMillis)
			}
		}
		checkAgainstRef(t, now, tat, exists, params)
	})
}

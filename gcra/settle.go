package gcra

// Settle returns the TAT after a reservation settles: delta more units
// (actual - reserved) at ei ns per unit, given back when delta < 0. It
// works as Decide with a quantity of delta that is never refused: the new
// TAT is max(TAT, now) + delta*ei, so units taken beyond the bucket put
// the key into debt (later requests wait until the TAT recedes), and
// units given back bring the TAT back, never before now (a full bucket
// holds no more). tat is read only when exists.
//
// The new TAT is stored as Decide's, a uint64 of ns since the Unix
// epoch, but a debt beyond 2^64-1 ns (the year 2554) saturates there
// rather than wrapping into the past, which would free the key. (Before
// 1970, as in tests, a TAT wraps as Decide's does.)
//
// ttlMillis is trunc((new TAT - now) / 1 ms), >= 0, saturating: how long
// the state matters. Settle does not allocate.
func Settle(now int64, tat uint64, exists bool, ei, delta int64) (newTAT uint64, ttlMillis int64) {
	t0 := i128FromInt64(now)
	base := t0
	if exists {
		if old := i128FromUint64(tat); old.cmp(t0) > 0 {
			base = old
		}
	}
	next := base.add(mulInt64(delta, ei))
	if next.cmp(t0) < 0 {
		next = t0
	}
	if next.hi > 0 { // past 2^64 ns (the year 2554): saturate, never wrap
		next = i128{lo: 1<<64 - 1}
	}
	ms, _ := next.sub(t0).quoRem(nsPerMillisecond)
	return next.lo, satInt64(ms)
}

// satInt64 is a as an int64, saturating at math.MaxInt64 (a >= 0).
func satInt64(a i128) int64 {
	if a.hi != 0 || a.lo > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(a.lo)
}

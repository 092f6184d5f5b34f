package limiter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

type fixedStep struct {
	at        int64
	limit     int64 // 0: the sequence's limit
	q         int64
	want      Decision
	wantCount int64 // count of the returned state
	wantStore bool
}

type fixedSeq struct {
	name   string
	period int64
	limit  int64
	init   *FixedState // stored state before the first step, if any
	steps  []fixedStep
}

// The caller's protocol: store the returned state only when store is true.
func runFixedSeq(t *testing.T, sq fixedSeq) {
	t.Helper()
	var st FixedState
	exists := false
	if sq.init != nil {
		st, exists = *sq.init, true
	}
	for i, sp := range sq.steps {
		limit := sq.limit
		if sp.limit != 0 {
			limit = sp.limit
		}
		next, d, store, exp := Fixed(st, exists, sp.at, Rule{Limit: limit, Period: sq.period}, sp.q)
		where := fmt.Sprintf("step %d (at t0%+dns, limit %d, q %d)", i, sp.at-t0, limit, sp.q)
		if d != sp.want {
			t.Errorf("%s: decision %s, want %s", where, ds(d), ds(sp.want))
		}
		if next.Count != sp.wantCount || store != sp.wantStore {
			t.Errorf("%s: count %d store %v, want count %d store %v", where, next.Count, store, sp.wantCount, sp.wantStore)
		}
		if wantExp := (next.Window + 1) * sq.period; exp != wantExp || exp <= sp.at {
			t.Errorf("%s: expireAt %d, want the end of window %d = %d (> now)", where, exp, next.Window, wantExp)
		}
		if store {
			st, exists = next, true
		}
	}
}

func TestFixedTable(t *testing.T) {
	wt0 := t0 / s // the 1s window starting at t0
	seqs := []fixedSeq{
		{name: "limit 3 per 1s", period: s, limit: 3, steps: []fixedStep{
			{at: t0, q: 1, want: dec(false, 3, 2, -1, s), wantCount: 1, wantStore: true},
			{at: t0 + 250*ms, q: 2, want: dec(false, 3, 0, -1, 750*ms), wantCount: 3, wantStore: true},
			// Full: limited until the window's end.
			{at: t0 + 500*ms, q: 1, want: dec(true, 3, 0, 500*ms, 500*ms), wantCount: 3},
			// Last ns of the window.
			{at: t0 + s - 1, q: 1, want: dec(true, 3, 0, 1, 1), wantCount: 3},
			// Exactly at the next window's start: a fresh window.
			{at: t0 + s, q: 0, want: dec(false, 3, 3, -1, 0), wantCount: 0},
			{at: t0 + s, q: 1, want: dec(false, 3, 2, -1, s), wantCount: 1, wantStore: true},
			// q > limit: never admissible.
			{at: t0 + 1250*ms, q: 4, want: dec(true, 3, 2, -1, 750*ms), wantCount: 1},
			// Partial overflow: 1 + 3 > 3, admissible in the next window.
			{at: t0 + 1500*ms, q: 3, want: dec(true, 3, 2, 500*ms, 500*ms), wantCount: 1},
			// Refund beyond the count: floored at 0.
			{at: t0 + 1500*ms, q: -5, want: dec(false, 3, 3, -1, 0), wantCount: 0, wantStore: true},
			// q = limit on an empty window.
			{at: t0 + 1750*ms, q: 3, want: dec(false, 3, 0, -1, 250*ms), wantCount: 3, wantStore: true},
			{at: t0 + 1750*ms, q: -1, want: dec(false, 3, 1, -1, 250*ms), wantCount: 2, wantStore: true},
			// State from an old window is forgotten.
			{at: t0 + 5*s, q: 2, want: dec(false, 3, 1, -1, s), wantCount: 2, wantStore: true},
			{at: t0 + 6*s - 1, q: 2, want: dec(true, 3, 1, 1, 1), wantCount: 2},
		}},
		{name: "empty: q=0", period: 60 * s, limit: 5, steps: []fixedStep{
			{at: t0 + 30*s, q: 0, want: dec(false, 5, 5, -1, 0)},
		}},
		{name: "empty: q=limit", period: 60 * s, limit: 5, steps: []fixedStep{
			{at: t0 + 30*s, q: 5, want: dec(false, 5, 0, -1, 30*s), wantCount: 5, wantStore: true},
		}},
		{name: "empty: q>limit", period: 60 * s, limit: 5, steps: []fixedStep{
			{at: t0 + 30*s, q: 6, want: dec(true, 5, 5, -1, 0)},
		}},
		{name: "empty: refund", period: 60 * s, limit: 5, steps: []fixedStep{
			{at: t0 + 30*s, q: -3, want: dec(false, 5, 5, -1, 0)},
		}},
		{name: "window start and end ns", period: 60 * s, limit: 1, steps: []fixedStep{
			{at: t0 + 60*s - 1, q: 1, want: dec(false, 1, 0, -1, 1), wantCount: 1, wantStore: true},
			{at: t0 + 60*s, q: 1, want: dec(false, 1, 0, -1, 60*s), wantCount: 1, wantStore: true},
			{at: t0 + 120*s - 1, q: 1, want: dec(true, 1, 0, 1, 1), wantCount: 1},
		}},
		{name: "full previous window is forgotten", period: s, limit: 3,
			init: &FixedState{Window: wt0 - 1, Count: 3}, steps: []fixedStep{
				{at: t0, q: 0, want: dec(false, 3, 3, -1, 0)},
				{at: t0, q: 3, want: dec(false, 3, 0, -1, s), wantCount: 3, wantStore: true},
			}},
		{name: "negative instants (before 1970)", period: s, limit: 2, steps: []fixedStep{
			{at: -1, q: 2, want: dec(false, 2, 0, -1, 1), wantCount: 2, wantStore: true},
			{at: -1, q: 1, want: dec(true, 2, 0, 1, 1), wantCount: 2},
			{at: 0, q: 1, want: dec(false, 2, 1, -1, s), wantCount: 1, wantStore: true},
		}},
		{name: "huge: limit MaxInt64, period MaxPeriod, now 2^62", period: maxP, limit: math.MaxInt64, steps: []fixedStep{
			{at: huge, q: math.MaxInt64, want: dec(false, math.MaxInt64, 0, -1, hugeLeft), wantCount: math.MaxInt64, wantStore: true},
			{at: huge + 1, q: 1, want: dec(true, math.MaxInt64, 0, hugeLeft-1, hugeLeft-1), wantCount: math.MaxInt64},
			{at: hugeEnd - 1, q: 1, want: dec(true, math.MaxInt64, 0, 1, 1), wantCount: math.MaxInt64},
			{at: hugeEnd, q: math.MaxInt64, want: dec(false, math.MaxInt64, 0, -1, maxP), wantCount: math.MaxInt64, wantStore: true},
			{at: hugeEnd, q: math.MinInt64, want: dec(false, math.MaxInt64, math.MaxInt64, -1, 0), wantCount: 0, wantStore: true},
			{at: hugeEnd + maxP - 1, q: math.MaxInt64 - 1, want: dec(false, math.MaxInt64, 1, -1, 1), wantCount: math.MaxInt64 - 1, wantStore: true},
			{at: hugeEnd + maxP - 1, q: 2, want: dec(true, math.MaxInt64, 1, 1, 1), wantCount: math.MaxInt64 - 1},
		}},
		{name: "clock backwards within a window", period: s, limit: 3, steps: []fixedStep{
			{at: t0 + 500*ms, q: 2, want: dec(false, 3, 1, -1, 500*ms), wantCount: 2, wantStore: true},
			{at: t0 + 100*ms, q: 1, want: dec(false, 3, 0, -1, 900*ms), wantCount: 3, wantStore: true},
			{at: t0 + 50*ms, q: 1, want: dec(true, 3, 0, 950*ms, 950*ms), wantCount: 3},
		}},
		// The clock steps back across a window edge (NTP step, or two
		// servers 1ms apart): the later window's units must still count,
		// else that window admits 2*limit once the clock is back.
		{name: "clock backwards across a window edge", period: s, limit: 3, steps: []fixedStep{
			{at: t0 + s, q: 3, want: dec(false, 3, 0, -1, s), wantCount: 3, wantStore: true},
			{at: t0 + s - ms, q: 1, want: dec(true, 3, 0, s+ms, s+ms), wantCount: 3},
			{at: t0 + s - ms, q: 0, want: dec(false, 3, 0, -1, s+ms), wantCount: 3},
			{at: t0 + s, q: 1, want: dec(true, 3, 0, s, s), wantCount: 3},
			{at: t0 + s - ms, q: -1, want: dec(false, 3, 1, -1, s+ms), wantCount: 2, wantStore: true},
			{at: t0 + s, q: 2, want: dec(true, 3, 1, s, s), wantCount: 2},
			{at: t0 + 2*s, q: 3, want: dec(false, 3, 0, -1, s), wantCount: 3, wantStore: true},
		}},
		// The limit of a key can change between calls (it is an argument of
		// every command): a count above the new limit must not make
		// Remaining negative, limit q=0 or refuse a refund.
		{name: "limit lowered below the count", period: s, limit: 3,
			init: &FixedState{Window: wt0, Count: 5}, steps: []fixedStep{
				{at: t0 + 100*ms, q: 0, want: dec(false, 3, 0, -1, 900*ms), wantCount: 5},
				{at: t0 + 100*ms, q: 1, want: dec(true, 3, 0, 900*ms, 900*ms), wantCount: 5},
				{at: t0 + 100*ms, q: 4, want: dec(true, 3, 0, -1, 900*ms), wantCount: 5},
				{at: t0 + 100*ms, q: -1, want: dec(false, 3, 0, -1, 900*ms), wantCount: 4, wantStore: true},
				{at: t0 + 100*ms, q: -2, want: dec(false, 3, 1, -1, 900*ms), wantCount: 2, wantStore: true},
				{at: t0 + 100*ms, q: 1, want: dec(false, 3, 0, -1, 900*ms), wantCount: 3, wantStore: true},
			}},
	}
	n := 0
	for _, sq := range seqs {
		t.Run(sq.name, func(t *testing.T) { runFixedSeq(t, sq) })
		n += len(sq.steps)
	}
	t.Logf("%d sequences, %d steps", len(seqs), n)
}

// refWindow is floor(now/period), computed independently of floorDiv.
func refWindow(now, period int64) int64 {
	if now >= 0 {
		return now / period
	}
	return -((-now + period - 1) / period)
}

// fixedRef is a reference model of a fixed window: the count of every
// window seen.
type fixedRef struct {
	period, limit int64
	counts        map[int64]int64
}

func (r *fixedRef) decide(now, q int64) (d Decision, count int64) {
	w := refWindow(now, r.period)
	end := (w + 1) * r.period
	count = r.counts[w]
	d = Decision{Limit: r.limit, RetryAfter: -1}
	switch {
	case q == 0:
	case q < 0:
		count = max(0, count+q)
	case q > r.limit:
		d.Limited = true
	case q > r.limit-count:
		d.Limited, d.RetryAfter = true, end-now
	default:
		count += q
	}
	d.Remaining = r.limit - count
	if count > 0 {
		d.ResetAfter = end - now
	}
	return d, count
}

func randFixedParams(rng *rand.Rand) (period, limit int64) {
	switch rng.IntN(6) {
	case 0:
		period = 1 + rng.Int64N(3)
	case 1:
		period = maxP - rng.Int64N(3)
	case 2:
		period = 1 + rng.Int64N(maxP)
	default:
		period = 1 + rng.Int64N(1000)
	}
	switch rng.IntN(8) {
	case 0:
		limit = math.MaxInt64 - rng.Int64N(3)
	case 1:
		limit = 1
	default:
		limit = 1 + rng.Int64N(12)
	}
	return period, limit
}

func randQ(rng *rand.Rand, limit int64, refunds bool) int64 {
	switch r := rng.IntN(20); {
	case r == 0:
		return 0
	case r == 1:
		return limit
	case r == 2 && limit < math.MaxInt64-3:
		return limit + 1 + rng.Int64N(3)
	case r < 5 && refunds:
		return -1 - rng.Int64N(min(limit, 1<<40))
	case limit > 64 && r < 8:
		return 1 + rng.Int64N(limit)
	default:
		return 1 + rng.Int64N(min(limit, 4))
	}
}

// randStep returns the gap to the next request: often 0, often within the
// window, sometimes exactly a period or several.
func randStep(rng *rand.Rand, period int64) int64 {
	switch rng.IntN(10) {
	case 0:
		return 0
	case 1:
		return period
	case 2:
		return period * (1 + rng.Int64N(3))
	case 3:
		return 1
	default:
		return rng.Int64N(period/2 + 1)
	}
}

func randStart(rng *rand.Rand, period int64) int64 {
	const span = int64(1) << 62
	start := rng.Int64N(span) - span/2
	if rng.IntN(2) == 0 {
		start = refWindow(start, period)*period + rng.Int64N(3) // near a window start
	}
	return start
}

// TestFixedProperties runs random request sequences against a reference
// model, checks that no window admits more than limit units and that
// RetryAfter is exact.
func TestFixedProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	sequences, length := 4000, 60
	if testing.Short() {
		sequences = 500
	}
	var requests, retries, windows int
	for seq := 0; seq < sequences; seq++ {
		period, limit := randFixedParams(rng)
		refunds := seq%3 == 0
		ref := &fixedRef{period: period, limit: limit, counts: map[int64]int64{}}
		admitted := map[int64]int64{} // gross units admitted per window
		var st FixedState
		exists := false
		now := randStart(rng, period)
		for i := 0; i < length; i++ {
			if now += randStep(rng, period); now > huge {
				break // stay within the instants the package supports
			}
			q := randQ(rng, limit, refunds)
			where := fmt.Sprintf("seq %d step %d: period %d limit %d now %d q %d", seq, i, period, limit, now, q)
			next, d, store, _ := Fixed(st, exists, now, Rule{Limit: limit, Period: period}, q)
			want, wantCount := ref.decide(now, q)
			requests++
			if d != want || next.Count != wantCount {
				t.Fatalf("%s: got %s count %d, want %s count %d (state %+v exists %v)", where, ds(d), next.Count, ds(want), wantCount, st, exists)
			}
			checkShape(t, where, d, limit, q, period, period)
			if checkRetryExact(t, where, fixedLimiter, st, exists, now, period, limit, q, d) {
				retries++
			}
			if store {
				st, exists = next, true
			}
			ref.counts[refWindow(now, period)] = wantCount
			if !d.Limited && q > 0 {
				admitted[refWindow(now, period)] += q
			}
		}
		if !refunds {
			for w, n := range admitted {
				windows++
				if n > limit {
					t.Fatalf("seq %d: window %d admitted %d > limit %d units", seq, w, n, limit)
				}
			}
		}
	}
	t.Logf("%d sequences, %d requests, %d RetryAfter exactness checks, %d windows checked against the limit", sequences, requests, retries, windows)
}

// TestFixedClockBackwards runs random sequences whose clock sometimes steps
// back (by up to two periods). Only one window is stored, so a request in a
// window the clock already left counts in the stored, later one; what must
// hold is that the window of the latest instant seen never admits more than
// limit units, however the clock went back and forth meanwhile.
func TestFixedClockBackwards(t *testing.T) {
	testClockBackwards(t, fixedLimiter, rand.New(rand.NewPCG(3, 4)), func(st FixedState, _ bool, now, period int64) int64 {
		return max(period, (st.Window+1)*period-now)
	})
}

func FuzzFixed(f *testing.F) {
	f.Add(t0, s, int64(3), int64(1), int8(0), int64(2), true)
	f.Add(t0+s-1, s, int64(3), int64(3), int8(0), int64(1), true)
	f.Add(huge, maxP, int64(math.MaxInt64), int64(math.MaxInt64), int8(-1), int64(5), true)
	f.Add(int64(-1), int64(1), int64(1), int64(-1), int8(1), int64(math.MaxInt64), true)
	f.Add(t0, s, int64(3), int64(0), int8(0), int64(9), true)
	f.Add(t0+999*ms, s, int64(3), int64(1), int8(1), int64(3), true)
	f.Add(int64(0), int64(7), int64(1), int64(math.MinInt64), int8(0), int64(0), false)
	f.Fuzz(func(t *testing.T, now, period, limit, q int64, dw int8, count int64, exists bool) {
		now, period = fuzzNow(now), fuzzPeriod(period)
		if CheckLimit(limit) != nil || count < 0 {
			return
		}
		w := refWindow(now, period)
		st := FixedState{Window: w + int64(dw%4), Count: count} // a stored window up to 3 away
		next, d, store, exp := Fixed(st, exists, now, Rule{Limit: limit, Period: period}, q)
		// Durations are at most 2 periods, more only if the stored window
		// is later than now (the clock went back).
		bound := 2 * period
		if exists && st.Window > w {
			bound = max(bound, (st.Window+1)*period-now)
		}
		checkShape(t, "Fixed", d, limit, q, bound, bound)
		if next.Count < 0 || (q > 0 && !d.Limited && next.Count > limit) {
			t.Fatalf("Fixed: count %d after %s", next.Count, ds(d))
		}
		if exp <= now || exp != (next.Window+1)*period {
			t.Fatalf("Fixed: expireAt %d, window %d", exp, next.Window)
		}
		if q != 0 && !d.Limited && !store && (exists || next.Count != 0) {
			t.Fatalf("Fixed: admitted q=%d but nothing to store", q)
		}
		checkClockBack(t, fixedLimiter, st, exists, now, period, limit, q, d)
		checkRetryExact(t, "fuzz", fixedLimiter, st, exists, now, period, limit, q, d)
	})
}

func BenchmarkFixed(b *testing.B) {
	b.ReportAllocs()
	var st FixedState
	exists := false
	now := t0
	for range b.N {
		now += 997
		next, d, store, _ := Fixed(st, exists, now, Rule{Limit: 1000, Period: s}, 1)
		if store {
			st, exists = next, true
		}
		_ = d
	}
}

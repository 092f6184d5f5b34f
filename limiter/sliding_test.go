package limiter

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"
)

type slidingStep struct {
	at        int64
	limit     int64 // 0: the sequence's limit
	q         int64
	want      Decision
	wantPrev  int64 // counts of the returned state
	wantCur   int64
	wantStore bool
}

type slidingSeq struct {
	name   string
	period int64
	limit  int64
	init   *SlidingState
	steps  []slidingStep
}

func runSlidingSeq(t *testing.T, sq slidingSeq) {
	t.Helper()
	var st SlidingState
	exists := false
	if sq.init != nil {
		st, exists = *sq.init, true
	}
	for i, sp := range sq.steps {
		limit := sq.limit
		if sp.limit != 0 {
			limit = sp.limit
		}
		next, d, store, exp := Sliding(st, exists, sp.at, Rule{Limit: limit, Period: sq.period}, sp.q)
		where := fmt.Sprintf("step %d (at t0%+dns, limit %d, q %d)", i, sp.at-t0, limit, sp.q)
		if d != sp.want {
			t.Errorf("%s: decision %s, want %s", where, ds(d), ds(sp.want))
		}
		if next.Prev != sp.wantPrev || next.Cur != sp.wantCur || store != sp.wantStore {
			t.Errorf("%s: prev %d cur %d store %v, want prev %d cur %d store %v",
				where, next.Prev, next.Cur, store, sp.wantPrev, sp.wantCur, sp.wantStore)
		}
		if wantExp := (next.Window + 2) * sq.period; exp != wantExp {
			t.Errorf("%s: expireAt %d, want %d", where, exp, wantExp)
		}
		if store {
			st, exists = next, true
		}
	}
}

func TestSlidingTable(t *testing.T) {
	const L = MaxSlidingLimit
	wt0 := t0 / s
	seqs := []slidingSeq{
		{name: "limit 10 per 1s", period: s, limit: 10, steps: []slidingStep{
			{at: t0, q: 4, want: dec(false, 10, 6, -1, 2*s), wantCur: 4, wantStore: true},
			{at: t0 + 250*ms, q: 6, want: dec(false, 10, 0, -1, 1750*ms), wantCur: 10, wantStore: true},
			// cur=10: admissible in the next window once 10*(1s-e)/1s + 1 <= 10,
			// e >= 100ms: at t0+1.1s.
			{at: t0 + 500*ms, q: 1, want: dec(true, 10, 0, 600*ms, 1500*ms), wantCur: 10},
			// Exactly at the next window's start: prev=10 weighs fully.
			{at: t0 + s, q: 0, want: dec(false, 10, 0, -1, s), wantPrev: 10},
			{at: t0 + s, q: 1, want: dec(true, 10, 0, 100*ms, s), wantPrev: 10},
			// 1ns before it fits: the weight is 10*(900ms+1)/1s, a partial unit.
			{at: t0 + 1100*ms - 1, q: 1, want: dec(true, 10, 0, 1, 900*ms+1), wantPrev: 10},
			// 10*0.9 + 1 == 10 exactly: admitted.
			{at: t0 + 1100*ms, q: 1, want: dec(false, 10, 0, -1, 1900*ms), wantPrev: 10, wantCur: 1, wantStore: true},
			{at: t0 + 1100*ms, q: 1, want: dec(true, 10, 0, 100*ms, 1900*ms), wantPrev: 10, wantCur: 1},
			// Refund beyond cur: cur floored at 0; 7.5 units weigh as 8.
			{at: t0 + 1250*ms, q: -3, want: dec(false, 10, 2, -1, 750*ms), wantPrev: 10, wantStore: true},
			{at: t0 + 1250*ms, q: 11, want: dec(true, 10, 2, -1, 750*ms), wantPrev: 10},
			// 7.5 + 2 <= 10 although Remaining said 2 before: admitted.
			{at: t0 + 1250*ms, q: 2, want: dec(false, 10, 0, -1, 1750*ms), wantPrev: 10, wantCur: 2, wantStore: true},
			{at: t0 + 1250*ms, q: 1, want: dec(true, 10, 0, 50*ms, 1750*ms), wantPrev: 10, wantCur: 2},
			// Two windows later: the state is forgotten; q = limit on empty.
			{at: t0 + 3*s, q: 10, want: dec(false, 10, 0, -1, 2*s), wantCur: 10, wantStore: true},
			// q = limit with cur = limit: only once both windows are empty.
			{at: t0 + 3500*ms, q: 10, want: dec(true, 10, 0, 1500*ms, 1500*ms), wantCur: 10},
			{at: t0 + 5*s - 1, q: 10, want: dec(true, 10, 9, 1, 1), wantPrev: 10},
			{at: t0 + 5*s, q: 10, want: dec(false, 10, 0, -1, 2*s), wantCur: 10, wantStore: true},
		}},
		{name: "empty: q=0, q>limit, refund", period: 60 * s, limit: 5, steps: []slidingStep{
			{at: t0 + 30*s, q: 0, want: dec(false, 5, 5, -1, 0)},
			{at: t0 + 30*s, q: 6, want: dec(true, 5, 5, -1, 0)},
			{at: t0 + 30*s, q: -1, want: dec(false, 5, 5, -1, 0)},
			{at: t0 + 30*s, q: 5, want: dec(false, 5, 0, -1, 90*s), wantCur: 5, wantStore: true},
		}},
		// prev=3 at e=1ns weighs 2.999999997: a partial unit takes room in
		// Remaining, but the exact comparison admits 2.999999997 + 2 <= 5.
		{name: "partial unit", period: s, limit: 5,
			init: &SlidingState{Window: wt0 - 1, Cur: 3}, steps: []slidingStep{
				{at: t0 + 1, q: 0, want: dec(false, 5, 2, -1, s-1), wantPrev: 3},
				{at: t0 + 1, q: 3, want: dec(true, 5, 2, 333333333, s-1), wantPrev: 3},
				{at: t0 + 333333333, q: 3, want: dec(true, 5, 2, 1, 666666667), wantPrev: 3},
				{at: t0 + 333333334, q: 3, want: dec(false, 5, 0, -1, 2*s-333333334), wantPrev: 3, wantCur: 3, wantStore: true},
			}},
		{name: "state from an old window", period: s, limit: 4,
			init: &SlidingState{Window: wt0 - 2, Prev: 4, Cur: 4}, steps: []slidingStep{
				{at: t0, q: 0, want: dec(false, 4, 4, -1, 0)},
				{at: t0, q: 4, want: dec(false, 4, 0, -1, 2*s), wantCur: 4, wantStore: true},
			}},
		{name: "negative instants (before 1970)", period: s, limit: 2, steps: []slidingStep{
			{at: -s, q: 2, want: dec(false, 2, 0, -1, 2*s), wantCur: 2, wantStore: true},
			{at: -1, q: 1, want: dec(true, 2, 0, s/2+1, s+1), wantCur: 2},
			{at: s / 2, q: 1, want: dec(false, 2, 0, -1, 3*s/2), wantPrev: 2, wantCur: 1, wantStore: true},
		}},
		// limit = MaxSlidingLimit, period = MaxPeriod, now = 2^62: the
		// products need 128 bits. In window 15 at e=1: prev weighs
		// L*(P-1)/P (not an integer, so it takes L); q=1 fits once
		// L*(P-e) <= (L-1)*P, e >= P - floor((L-1)*P/L) = 73425472.
		{name: "huge", period: maxP, limit: L, steps: []slidingStep{
			{at: huge, q: L, want: dec(false, L, 0, -1, 2*maxP-hugeE), wantCur: L, wantStore: true},
			{at: hugeEnd + 1, q: 1, want: dec(true, L, 0, 73425471, maxP-1), wantPrev: L},
			{at: hugeEnd + 73425471, q: 1, want: dec(true, L, 0, 1, maxP-73425471), wantPrev: L},
			{at: hugeEnd + 73425472, q: 1, want: dec(false, L, 0, -1, 2*maxP-73425472), wantPrev: L, wantCur: 1, wantStore: true},
			{at: hugeEnd + 73425472, q: -L, want: dec(false, L, 1, -1, maxP-73425472), wantPrev: L, wantStore: true},
			{at: hugeEnd + maxP, q: L, want: dec(false, L, 0, -1, 2*maxP), wantCur: L, wantStore: true},
		}},
		{name: "clock backwards within a window", period: s, limit: 4, steps: []slidingStep{
			{at: t0 + 500*ms, q: 3, want: dec(false, 4, 1, -1, 1500*ms), wantCur: 3, wantStore: true},
			{at: t0 + 100*ms, q: 1, want: dec(false, 4, 0, -1, 1900*ms), wantCur: 4, wantStore: true},
			{at: t0 + 50*ms, q: 1, want: dec(true, 4, 0, 1950*ms-750*ms, 1950*ms), wantCur: 4},
		}},
		// The clock steps back 1ms across a window edge: the later window's
		// units still count (decided as at that window's start, durations
		// measured from now), else they are forgotten and the window
		// admits twice its limit.
		{name: "clock backwards across a window edge", period: s, limit: 10, steps: []slidingStep{
			{at: t0 + s, q: 10, want: dec(false, 10, 0, -1, 2*s), wantCur: 10, wantStore: true},
			{at: t0 + s - ms, q: 1, want: dec(true, 10, 0, 1101*ms, 2*s+ms), wantCur: 10},
			{at: t0 + s - ms, q: 0, want: dec(false, 10, 0, -1, 2*s+ms), wantCur: 10},
			{at: t0 + s, q: 1, want: dec(true, 10, 0, 1100*ms, 2*s), wantCur: 10},
			{at: t0 + s - ms, q: -2, want: dec(false, 10, 2, -1, 2*s+ms), wantCur: 8, wantStore: true},
			{at: t0 + s, q: 3, want: dec(true, 10, 2, 1125*ms, 2*s), wantCur: 8},
			{at: t0 + 2*s, q: 3, want: dec(true, 10, 2, 125*ms, s), wantPrev: 8},
		}},
		{name: "limit lowered below the counts", period: s, limit: 5,
			init: &SlidingState{Window: wt0, Prev: 7, Cur: 8}, steps: []slidingStep{
				{at: t0 + 500*ms, q: 0, want: dec(false, 5, 0, -1, 1500*ms), wantPrev: 7, wantCur: 8},
				{at: t0 + 500*ms, q: 1, want: dec(true, 5, 0, s, 1500*ms), wantPrev: 7, wantCur: 8},
				{at: t0 + 500*ms, q: -1, want: dec(false, 5, 0, -1, 1500*ms), wantPrev: 7, wantCur: 7, wantStore: true},
			}},
	}
	n := 0
	for _, sq := range seqs {
		t.Run(sq.name, func(t *testing.T) { runSlidingSeq(t, sq) })
		n += len(sq.steps)
	}
	t.Logf("%d sequences, %d steps", len(seqs), n)
}

// slidingRef is a reference sliding-window counter: the count of every
// window seen, the estimate in exact rationals.
type slidingRef struct {
	period, limit int64
	counts        map[int64]int64
}

// estimate returns prev*(period-e)/period + cur at now and its two parts.
func (r *slidingRef) estimate(now int64) (est *big.Rat, prev, cur, e int64) {
	w := refWindow(now, r.period)
	prev, cur = r.counts[w-1], r.counts[w]
	e = now - w*r.period
	est = big.NewRat(0, 1).SetFrac(
		new(big.Int).Mul(big.NewInt(prev), big.NewInt(r.period-e)), big.NewInt(r.period))
	return est.Add(est, big.NewRat(cur, 1)), prev, cur, e
}

func (r *slidingRef) admits(now, q int64) bool {
	est, _, _, _ := r.estimate(now)
	return est.Add(est, big.NewRat(q, 1)).Cmp(big.NewRat(r.limit, 1)) <= 0
}

// decide returns the reference decision without RetryAfter and ResetAfter
// (which are checked for exactness instead) and the new current count.
func (r *slidingRef) decide(now, q int64) (limited bool, remaining, cur int64) {
	_, prev, cur, e := r.estimate(now)
	switch {
	case q == 0:
	case q < 0:
		cur = max(0, cur+q)
	case q > r.limit || !r.admits(now, q):
		limited = true
	default:
		cur += q
	}
	// Remaining = limit - cur - ceil(prev*(period-e)/period), at least 0.
	num := new(big.Int).Mul(big.NewInt(prev), big.NewInt(r.period-e))
	num.Add(num, big.NewInt(r.period-1))
	w := num.Div(num, big.NewInt(r.period)).Int64()
	return limited, max(0, r.limit-cur-w), cur
}

func randSlidingParams(rng *rand.Rand) (period, limit int64) {
	period, _ = randFixedParams(rng)
	switch rng.IntN(8) {
	case 0:
		limit = MaxSlidingLimit - rng.Int64N(3)
	case 1:
		limit = 1
	case 2:
		limit = 1 + rng.Int64N(MaxSlidingLimit)
	default:
		limit = 1 + rng.Int64N(12)
	}
	return period, limit
}

// TestSlidingProperties runs random request sequences against the
// reference, and checks that RetryAfter and ResetAfter are exact: the
// request is admitted at now+RetryAfter and not 1ns before; the estimate is
// 0 at now+ResetAfter and not 1ns before.
func TestSlidingProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	sequences, length := 4000, 60
	if testing.Short() {
		sequences = 500
	}
	var requests, retries, resets int
	zero := new(big.Rat)
	for seq := 0; seq < sequences; seq++ {
		period, limit := randSlidingParams(rng)
		ref := &slidingRef{period: period, limit: limit, counts: map[int64]int64{}}
		var st SlidingState
		exists := false
		now := randStart(rng, period)
		for i := 0; i < length; i++ {
			if now += randStep(rng, period); now > huge {
				break
			}
			q := randQ(rng, limit, seq%2 == 0)
			where := fmt.Sprintf("seq %d step %d: period %d limit %d now %d q %d", seq, i, period, limit, now, q)
			next, d, store, _ := Sliding(st, exists, now, Rule{Limit: limit, Period: period}, q)
			requests++
			limited, remaining, cur := ref.decide(now, q)
			if d.Limited != limited || d.Remaining != remaining || next.Cur != cur {
				t.Fatalf("%s: got %s cur %d, want limited %v remaining %d cur %d (state %+v)", where, ds(d), next.Cur, limited, remaining, cur, st)
			}
			checkShape(t, where, d, limit, q, 2*period, 2*period)
			if d.Limited && q <= limit {
				retries++
				if !ref.admits(now+d.RetryAfter, q) || ref.admits(now+d.RetryAfter-1, q) {
					t.Fatalf("%s: RetryAfter %d is not the first instant the reference admits", where, d.RetryAfter)
				}
				checkRetryExact(t, where, slidingLimiter, st, exists, now, period, limit, q, d)
			}
			ref.counts[refWindow(now, period)] = cur
			resets++
			if est, _, _, _ := ref.estimate(now + d.ResetAfter); est.Cmp(zero) != 0 {
				t.Fatalf("%s: estimate %v at now+ResetAfter (%d), want 0", where, est, d.ResetAfter)
			}
			if d.ResetAfter > 0 {
				if est, _, _, _ := ref.estimate(now + d.ResetAfter - 1); est.Cmp(zero) == 0 {
					t.Fatalf("%s: estimate already 0 1ns before ResetAfter %d", where, d.ResetAfter)
				}
			}
			if store {
				st, exists = next, true
			}
		}
	}
	t.Logf("%d sequences, %d requests, %d RetryAfter and %d ResetAfter exactness checks", sequences, requests, retries, resets)
}

// TestSlidingClockBackwards: with a clock that steps back, the units
// admitted in the window of the latest instant seen never exceed limit, and
// RetryAfter stays exact.
func TestSlidingClockBackwards(t *testing.T) {
	testClockBackwards(t, slidingLimiter, rand.New(rand.NewPCG(7, 8)), func(st SlidingState, exists bool, now, period int64) int64 {
		if exists && st.Window*period > now {
			return 2*period + st.Window*period - now
		}
		return 2 * period
	})
}

func FuzzSliding(f *testing.F) {
	f.Add(t0+500*ms, s, int64(10), int64(1), int8(0), uint32(0), uint32(10), true)
	f.Add(t0+1, s, int64(5), int64(3), int8(-1), uint32(0), uint32(3), true)
	f.Add(huge, maxP, int64(MaxSlidingLimit), int64(1), int8(0), uint32(MaxSlidingLimit), uint32(MaxSlidingLimit), true)
	f.Add(int64(-1), int64(1), int64(1), int64(-1), int8(1), uint32(1), uint32(1), true)
	f.Add(t0+s-ms, s, int64(10), int64(1), int8(1), uint32(3), uint32(10), true)
	f.Add(t0, int64(7), int64(3), int64(0), int8(0), uint32(9), uint32(9), false)
	f.Fuzz(func(t *testing.T, now, period, limit, q int64, dw int8, prev, cur uint32, exists bool) {
		now, period = fuzzNow(now), fuzzPeriod(period)
		if CheckLimit(limit) != nil {
			return
		}
		if limit > MaxSlidingLimit {
			limit = 1 + limit%MaxSlidingLimit
		}
		w := refWindow(now, period)
		st := SlidingState{Window: w + int64(dw%4), Prev: int64(prev), Cur: int64(cur)}
		next, d, store, exp := Sliding(st, exists, now, Rule{Limit: limit, Period: period}, q)
		bound := 2 * period
		if exists && st.Window > w {
			bound += st.Window*period - now
		}
		checkShape(t, "Sliding", d, limit, q, bound, bound)
		if next.Prev < 0 || next.Cur < 0 || next.Prev > MaxSlidingLimit || next.Cur > MaxSlidingLimit {
			t.Fatalf("Sliding: counts %d %d do not fit 32 bits", next.Prev, next.Cur)
		}
		if q > 0 && !d.Limited && (!store || next.Cur > limit) {
			t.Fatalf("Sliding: admitted q=%d: store %v cur %d", q, store, next.Cur)
		}
		if exp <= now || exp != (next.Window+2)*period {
			t.Fatalf("Sliding: expireAt %d, window %d", exp, next.Window)
		}
		if exists && st.Window <= w {
			// The reference: the stored counts are those of window st.Window.
			ref := &slidingRef{period: period, limit: limit, counts: map[int64]int64{st.Window - 1: st.Prev, st.Window: st.Cur}}
			if limited, remaining, cur := ref.decide(now, q); d.Limited != limited || d.Remaining != remaining || next.Cur != cur {
				t.Fatalf("Sliding: %s cur %d, reference limited %v remaining %d cur %d", ds(d), next.Cur, limited, remaining, cur)
			}
		}
		checkClockBack(t, slidingLimiter, st, exists, now, period, limit, q, d)
		checkRetryExact(t, "fuzz", slidingLimiter, st, exists, now, period, limit, q, d)
	})
}

func BenchmarkSliding(b *testing.B) {
	b.ReportAllocs()
	var st SlidingState
	exists := false
	now := t0
	for range b.N {
		now += 997
		next, d, store, _ := Sliding(st, exists, now, Rule{Limit: 1000, Period: s}, 1)
		if store {
			st, exists = next, true
		}
		_ = d
	}
}

package limiter

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// windowLimiter is one of the window limiters (Fixed, Sliding) as the
// property harness sees it: a pure decision over a stored state S whose
// Window field is the index of the window it counts.
type windowLimiter[S any] struct {
	name     string
	decide   func(st S, exists bool, now, period, limit, q int64) (next S, d Decision, store bool, expireAt int64)
	windowOf func(st S) int64
}

// The harness's only calls into Fixed and Sliding.
var (
	fixedLimiter = windowLimiter[FixedState]{
		name: "Fixed",
		decide: func(st FixedState, exists bool, now, period, limit, q int64) (FixedState, Decision, bool, int64) {
			return Fixed(st, exists, now, Rule{Limit: limit, Period: period}, q)
		},
		windowOf: func(st FixedState) int64 { return st.Window },
	}
	slidingLimiter = windowLimiter[SlidingState]{
		name: "Sliding",
		decide: func(st SlidingState, exists bool, now, period, limit, q int64) (SlidingState, Decision, bool, int64) {
			return Sliding(st, exists, now, Rule{Limit: limit, Period: period}, q)
		},
		windowOf: func(st SlidingState) int64 { return st.Window },
	}
)

// checkRetryExact: a request limited with q <= limit is admitted at
// now+RetryAfter and not 1ns before. It reports whether it checked.
func checkRetryExact[S any](t testing.TB, where string, w windowLimiter[S], st S, exists bool, now, period, limit, q int64, d Decision) bool {
	t.Helper()
	if !d.Limited || q > limit {
		return false
	}
	if _, d2, _, _ := w.decide(st, exists, now+d.RetryAfter, period, limit, q); d2.Limited {
		t.Fatalf("%s: %s: limited with RetryAfter %d, still limited then: %s", where, w.name, d.RetryAfter, ds(d2))
	}
	if _, d2, _, _ := w.decide(st, exists, now+d.RetryAfter-1, period, limit, q); !d2.Limited {
		t.Fatalf("%s: %s: limited with RetryAfter %d, admitted 1ns earlier", where, w.name, d.RetryAfter)
	}
	return true
}

// checkClockBack: when the stored window is later than now's (the clock
// went back), the decision is the one at the start of the stored window:
// nothing stored is forgotten.
func checkClockBack[S any](t testing.TB, w windowLimiter[S], st S, exists bool, now, period, limit, q int64, d Decision) {
	t.Helper()
	sw := w.windowOf(st)
	if !exists || sw <= refWindow(now, period) {
		return
	}
	_, d2, _, _ := w.decide(st, exists, sw*period, period, limit, q)
	if d2.Limited != d.Limited || d2.Remaining != d.Remaining {
		t.Fatalf("%s: clock back %dns: %s, at the stored window's start %s", w.name, sw*period-now, ds(d), ds(d2))
	}
}

// testClockBackwards runs random sequences whose clock sometimes steps back
// (by up to two periods): the window of the latest instant seen never
// admits more than limit units, however the clock went back and forth
// meanwhile, every decision has the shape bound(state) allows, and
// RetryAfter stays exact.
func testClockBackwards[S any](t *testing.T, w windowLimiter[S], rng *rand.Rand, bound func(st S, exists bool, now, period int64) int64) {
	const sequences, length = 3000, 60
	var requests, retries, windows, backs int
	for seq := 0; seq < sequences; seq++ {
		period := 1 + rng.Int64N(100)
		limit := 1 + rng.Int64N(6)
		var st S
		exists := false
		admitted := map[int64]int64{}
		now := randStart(rng, period)
		latest := now
		for i := 0; i < length; i++ {
			if rng.IntN(5) == 0 {
				now -= 1 + rng.Int64N(2*period)
				backs++
			} else {
				now += randStep(rng, period)
			}
			latest = max(latest, now)
			q := 1 + rng.Int64N(limit)
			next, d, store, _ := w.decide(st, exists, now, period, limit, q)
			requests++
			where := fmt.Sprintf("seq %d step %d", seq, i)
			b := bound(st, exists, now, period)
			checkShape(t, where, d, limit, q, b, b)
			if checkRetryExact(t, where, w, st, exists, now, period, limit, q, d) {
				retries++
			}
			if store {
				st, exists = next, true
			}
			if win := refWindow(now, period); !d.Limited && win == refWindow(latest, period) {
				admitted[win] += q
				if admitted[win] > limit {
					t.Fatalf("%s: window %d admitted %d > limit %d units", where, win, admitted[win], limit)
				}
			}
		}
		windows += len(admitted)
	}
	t.Logf("%s: %d sequences, %d requests (%d clock steps back), %d RetryAfter exactness checks, %d windows checked",
		w.name, sequences, requests, backs, retries, windows)
}

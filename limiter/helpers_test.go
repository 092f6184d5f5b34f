package limiter

import (
	"fmt"
	"testing"
	"time"
)

// Instants and durations used by the table tests, in ns. t0 is
// 2025-01-01T00:00:00Z, a multiple of every period the tables use (1s, 1m),
// so t0 is exactly the start of a window.
const (
	t0 = int64(1735689600000000000)
	ns = int64(1)
	ms = int64(time.Millisecond)
	s  = int64(time.Second)

	// Huge values: now near 2^62 (year 2116) with period = MaxPeriod.
	//   2^62 / MaxPeriod = 14 rem 196646018427387904
	maxP     = int64(MaxPeriod)           // 315360000000000000
	huge     = int64(1) << 62             // 4611686018427387904
	hugeW    = int64(14)                  // floor(huge / maxP)
	hugeEnd  = int64(4730400000000000000) // (hugeW+1) * maxP
	hugeE    = int64(196646018427387904)  // huge - hugeW*maxP
	hugeLeft = int64(118713981572612096)  // hugeEnd - huge
)

// dec builds the expected Decision [limited, limit, remaining, retry after,
// reset after].
func dec(limited bool, limit, remaining, retry, reset int64) Decision {
	return Decision{Limited: limited, Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// ds formats a Decision as CL.THROTTLE's reply.
func ds(d Decision) string {
	l := 0
	if d.Limited {
		l = 1
	}
	return fmt.Sprintf("[%d %d %d %d %d]", l, d.Limit, d.Remaining, d.RetryAfter, d.ResetAfter)
}

// checkShape checks the invariants every Decision must satisfy whatever the
// algorithm: Remaining in [0, limit], RetryAfter -1 exactly when admitted
// (or never admissible), otherwise in (0, maxRetry], ResetAfter in [0,
// maxReset].
func checkShape(t testing.TB, what string, d Decision, limit, q, maxRetry, maxReset int64) {
	t.Helper()
	if d.Limit != limit {
		t.Fatalf("%s: %s: Limit %d, want %d", what, ds(d), d.Limit, limit)
	}
	if d.Remaining < 0 || d.Remaining > limit {
		t.Fatalf("%s: %s: Remaining %d outside [0, %d]", what, ds(d), d.Remaining, limit)
	}
	switch {
	case q == 0 && d.Limited:
		t.Fatalf("%s: %s: q=0 must never be limited", what, ds(d))
	case q > limit && (!d.Limited || d.RetryAfter != -1):
		t.Fatalf("%s: %s: q=%d > limit=%d must be limited with RetryAfter -1", what, ds(d), q, limit)
	case !d.Limited && d.RetryAfter != -1:
		t.Fatalf("%s: %s: admitted with RetryAfter %d, want -1", what, ds(d), d.RetryAfter)
	case d.Limited && q <= limit && (d.RetryAfter <= 0 || d.RetryAfter > maxRetry):
		t.Fatalf("%s: %s: RetryAfter %d outside (0, %d]", what, ds(d), d.RetryAfter, maxRetry)
	}
	if d.ResetAfter < 0 || d.ResetAfter > maxReset {
		t.Fatalf("%s: %s: ResetAfter %d outside [0, %d]", what, ds(d), d.ResetAfter, maxReset)
	}
}

// fuzzNow maps an arbitrary fuzz input onto [-2^62, 2^62], the instants the
// package must handle without overflow (the doc promises up to year 2200;
// 2^62 ns is year 2116, and negative instants are before 1970).
func fuzzNow(x int64) int64 {
	const span = int64(1) << 62
	if x >= -span && x <= span {
		return x
	}
	return x % span
}

// fuzzPeriod maps an arbitrary input onto a valid period, favouring small
// ones and the extremes.
func fuzzPeriod(x int64) int64 {
	switch {
	case x == 0:
		return 1
	case x < 0 && x != -x:
		x = -x
	case x < 0: // MinInt64
		return maxP
	}
	if CheckPeriod(x) == nil {
		return x
	}
	return 1 + x%maxP
}

// TestZeroAllocs holds the benchmarks' expectation: deciding on the scalar
// kinds, and a steady-state log's Decide + Apply, allocate nothing.
func TestZeroAllocs(t *testing.T) {
	now := t0
	var fst FixedState
	var sst SlidingState
	var l Log
	for i := 0; i < 200; i++ { // fill the log to its steady state
		now += 10 * ms
		l.Apply(now, Rule{Period: s}, 1)
	}
	for name, fn := range map[string]func(){
		"Fixed": func() {
			now += 997
			fst, _, _, _ = Fixed(fst, true, now, Rule{Limit: 1000, Period: s}, 1)
		},
		"Sliding": func() {
			now += 997
			sst, _, _, _ = Sliding(sst, true, now, Rule{Limit: 1000, Period: s}, 1)
		},
		"Log": func() {
			now += 10 * ms
			if !l.Decide(now, Rule{Limit: 100, Period: s}, 1).Limited {
				l.Apply(now, Rule{Period: s}, 1)
			}
		},
	} {
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s: %v allocs per call, want 0", name, n)
		}
	}
}

// Package testwait waits, in tests, for a state that another goroutine or
// process brings about: a replica in sync, a writer that caught up, a
// sentinel that switched. Every wait has a deadline and a description,
// and a wait that times out fails the test with what the condition saw
// last, so a failure says where things stood, not only that time ran out.
//
// # Polling
//
// A condition is called at once, then after 1 ms, and then after twice
// the previous pause each time, up to MaxPause: a state that comes
// quickly is seen quickly, and a slow one (a failover over seconds) is
// not polled hundreds of times a second.
//
// # Budgets
//
// SetBudget bounds every wait of a test (and of its subtests) to a time
// from now, so that a test made of many waits ends in bounded time
// whichever of them fails.
package testwait

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// MaxPause is the longest pause between two calls of a condition.
const MaxPause = 50 * time.Millisecond

// Poll calls cond until it holds or timeout has passed, and returns
// whether it held and its last explanation. It is the wait of a test that
// goes on after a failed wait (t.Errorf); For fails the test instead.
func Poll(timeout time.Duration, cond func() (ok bool, last string)) (bool, string) {
	deadline := time.Now().Add(timeout)
	pause := time.Millisecond
	for {
		ok, last := cond()
		if ok {
			return true, last
		}
		if !time.Now().Before(deadline) {
			return false, last
		}
		time.Sleep(min(pause, max(time.Until(deadline), 0)))
		pause = min(2*pause, MaxPause)
	}
}

// For calls cond until it holds; once timeout (or t's budget, whichever
// ends first) has passed, it fails the test with what, the time waited
// and cond's last explanation of why it did not hold.
func For(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, last string)) {
	t.Helper()
	timeout = bounded(t, timeout)
	if ok, last := Poll(timeout, cond); !ok {
		t.Fatalf("waited %v for %s; last: %s", timeout, what, last)
	}
}

// Until is For for a condition with nothing to report but whether it
// holds.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	timeout = bounded(t, timeout)
	if ok, _ := Poll(timeout, func() (bool, string) { return cond(), "" }); !ok {
		t.Fatalf("waited %v for %s", timeout, what)
	}
}

// budgets maps a test's name to the end of its budget.
var budgets sync.Map // string -> time.Time

// SetBudget bounds every wait of t and of its subtests (For, Until) to d
// from now, until t ends.
func SetBudget(t testing.TB, d time.Duration) {
	budgets.Store(t.Name(), time.Now().Add(d))
	t.Cleanup(func() { budgets.Delete(t.Name()) })
}

// bounded returns timeout cut to the budget of t or of the nearest test
// above it that has one.
func bounded(t testing.TB, timeout time.Duration) time.Duration {
	name := t.Name()
	for {
		if end, ok := budgets.Load(name); ok {
			return min(timeout, max(time.Until(end.(time.Time)), 0))
		}
		i := strings.LastIndexByte(name, '/')
		if i < 0 {
			return timeout
		}
		name = name[:i]
	}
}

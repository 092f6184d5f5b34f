package testwait

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// recorder is a testing.TB whose Fatalf records the message instead of
// ending the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

func TestForReturnsOnceCondHolds(t *testing.T) {
	calls := 0
	For(t, 10*time.Second, "the third call", func() (bool, string) {
		calls++
		return calls == 3, fmt.Sprint(calls, " calls")
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}

func TestForFailsWithTheLastState(t *testing.T) {
	r := &recorder{TB: t}
	calls := 0
	start := time.Now()
	For(r, 30*time.Millisecond, "a state that never comes", func() (bool, string) {
		calls++
		return false, fmt.Sprintf("seen %d", calls)
	})
	if took := time.Since(start); took < 30*time.Millisecond || took > 5*time.Second {
		t.Errorf("For returned after %v, want about 30ms", took)
	}
	want := fmt.Sprintf("waited 30ms for a state that never comes; last: seen %d", calls)
	if r.failed != want || calls < 2 {
		t.Errorf("failure %q after %d calls, want %q", r.failed, calls, want)
	}
}

func TestUntilFails(t *testing.T) {
	r := &recorder{TB: t}
	Until(r, 0, "never", func() bool { return false })
	if r.failed != "waited 0s for never" {
		t.Errorf("failure %q", r.failed)
	}
}

func TestPollPausesGrowToMaxPause(t *testing.T) {
	var at []time.Time
	Poll(300*time.Millisecond, func() (bool, string) {
		at = append(at, time.Now())
		return false, ""
	})
	// 0, 1, 2, 4, 8, 16, 32 ms, then every 50 ms: about 11 calls in 300 ms.
	if len(at) < 6 || len(at) > 14 {
		t.Errorf("%d calls in 300ms, want about 11", len(at))
	}
	for i := 2; i < len(at); i++ {
		if d := at[i].Sub(at[i-1]); d < time.Millisecond {
			t.Errorf("pause %d was %v, want at least 1ms", i, d)
		}
	}
}

func TestBudgetBoundsSubtests(t *testing.T) {
	SetBudget(t, 20*time.Millisecond)
	t.Run("sub", func(t *testing.T) {
		r := &recorder{TB: t}
		start := time.Now()
		For(r, time.Hour, "never", func() (bool, string) { return false, "no" })
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("a wait of an hour under a 20ms budget took %v", took)
		}
		if !strings.HasPrefix(r.failed, "waited ") || !strings.HasSuffix(r.failed, " for never; last: no") {
			t.Errorf("failure %q", r.failed)
		}
	})
}

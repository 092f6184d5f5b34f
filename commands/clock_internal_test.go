package commands

import (
	"testing"
	"time"
)

// wallNS derives the wall clock from the monotonic one: each reading lies
// between time.Now taken just before and just after it (give or take NTP's
// slewing, bounded here by a millisecond), and readings go back by no more
// than a rebase can undo while the wall clock is not stepped.
func TestWallNSFollowsTimeNow(t *testing.T) {
	const n = 200000
	base := time.Now()
	var cl client
	var last int64
	rebases := 0
	for i := range n {
		before := time.Now().UnixNano()
		prev := cl.clock.baseMono
		got := cl.wallNS(base)
		after := time.Now().UnixNano()
		if cl.clock.baseMono != prev {
			rebases++
		}
		if got < before-int64(time.Millisecond) || got > after+int64(time.Millisecond) {
			t.Fatalf("reading %d: %d outside [%d, %d]", i, got, before, after)
		}
		if got < last-int64(time.Microsecond) { // a rebase may undo up to 0.5 µs of slewing
			t.Fatalf("reading %d went back by %d ns", i, last-got)
		}
		last = got
	}
	if rebases == 0 || rebases == n {
		t.Errorf("%d rebases in %d readings: the offset is never reused, or never refreshed", rebases, n)
	}
	t.Logf("%d readings, %d rebases", n, rebases)
}

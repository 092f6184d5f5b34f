package partition

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// limit is a rate-limiting command under test: its arguments for a key,
// its steady rate, and how the admissions a client saw on one key are
// checked against it.
type limit interface {
	name() string
	args(key int) []any
	rate() float64 // admissions per second per key, in the long run
	window() time.Duration
	// ready reports whether the load l has run into the state in which
	// a fault shows the most at now (beyond the suite's common warm-up).
	ready(l *load, now time.Time) bool
	// over returns the over-admission of adm (the admissions of one key,
	// in no particular order).
	over(adm []reply) keyOver
}

// keyOver is the over-admission found on one key.
type keyOver struct {
	max   int64 // the largest excess of one key-window (one interval for GCRA)
	total int64 // the sum of the key-windows' excesses (GCRA: max)
	// ambiguous counts admissions whose window the reply did not tell
	// (CL.FIXED: a reply slower than the window); they are put in the
	// window with the fewest admissions, which can only hide excess.
	ambiguous int
	// skewed counts admissions placed only with clockSlack (CL.FIXED).
	skewed int
	worst  string // the admissions of the worst window, for a report
}

func keyName(k int) string { return fmt.Sprintf("partition:%d", k) }

// fixedLimit is CL.FIXED key limit period 1 MS: at most limit admissions
// in each window [k*period, (k+1)*period) of the Unix epoch.
type fixedLimit struct {
	limit  int64
	period time.Duration
	// phase, if not 0, is how far into a window a fault is injected (to
	// 200 ms later): at twice the rate a window admits during its first
	// half only, so a fault late in a window can lose nothing the rest
	// of the window would admit again. 0: whenever the warm-up ends.
	phase time.Duration
}

func (f fixedLimit) name() string { return "CL.FIXED" }

func (f fixedLimit) args(key int) []any {
	return []any{"CL.FIXED", keyName(key), f.limit, f.period.String(), 1, "MS"}
}

func (f fixedLimit) rate() float64 { return float64(f.limit) / f.period.Seconds() }

func (f fixedLimit) window() time.Duration { return f.period }

func (f fixedLimit) ready(_ *load, now time.Time) bool {
	if f.phase == 0 {
		return true
	}
	in := time.Duration(now.UnixNano() % int64(f.period))
	return in >= f.phase && in < f.phase+200*time.Millisecond
}

// windowOf returns the window (its end, in Unix ns) that an admission
// counted in, from its reply: reset_after is the time from the server's
// decision to the window's end in ms rounded up, so the end E satisfies
// now+(ra-1)ms < E <= now+ra ms, and the decision time now lies between
// the command's send and the reply's receipt. The window ends at a
// multiple of the period in [send+(ra-1)ms, recv+ra ms]: the windows
// returned are lo..hi (as indices end/period), several for a reply
// slower than a window, none (lo > hi) for a reply no correct server
// gives.
//
// slack widens the interval by that much each way: the server's clock is
// not the client's (cellserver derives the wall clock from the monotonic
// one and rebases every millisecond, and a slewing clock can move tens of
// µs apart in that time), so a reply whose reset_after fits no window by
// the client's clock is placed again with clockSlack.
func (f fixedLimit) windowOf(r reply, slack time.Duration) (lo, hi int64) {
	p := int64(f.period)
	from := r.send - int64(slack) + (r.resetAfter-1)*int64(time.Millisecond)
	to := r.recv + int64(slack) + r.resetAfter*int64(time.Millisecond)
	return (from + p - 1) / p, to / p
}

// clockSlack is how far the server's clock may be from the client's when
// an admission fits no window without it.
const clockSlack = time.Millisecond

func (f fixedLimit) over(adm []reply) keyOver {
	var ko keyOver
	count := map[int64]int64{} // window index (end/period) -> admissions
	members := map[int64][]reply{}
	var ambiguous []reply
	for _, r := range adm {
		lo, hi := f.windowOf(r, 0)
		if lo > hi {
			if lo, hi = f.windowOf(r, clockSlack); lo <= hi {
				ko.skewed++
			}
		}
		switch {
		case lo > hi:
			// No window fits: the reply contradicts the window model. It
			// is reported as an excess of its own, not hidden.
			ko.max = max(ko.max, 1)
			ko.total++
			ko.worst += fmt.Sprintf("admission fits no window: %s\n", f.describe(r))
		case lo == hi:
			count[lo]++
			members[lo] = append(members[lo], r)
		default:
			ambiguous = append(ambiguous, r)
		}
	}
	ko.ambiguous = len(ambiguous)
	for _, r := range ambiguous {
		lo, hi := f.windowOf(r, 0)
		if lo > hi {
			lo, hi = f.windowOf(r, clockSlack)
		}
		best := lo
		for w := lo; w <= hi; w++ {
			if count[w] < count[best] {
				best = w
			}
		}
		count[best]++
		members[best] = append(members[best], r)
	}
	var worstW int64
	for w, n := range count {
		if e := n - f.limit; e > 0 {
			ko.total += e
			if e > ko.max {
				ko.max, worstW = e, w
			}
		}
	}
	if ko.max > 0 && worstW != 0 {
		ms := members[worstW]
		slices.SortFunc(ms, func(a, b reply) int { return int(a.send - b.send) })
		end := time.Unix(0, worstW*int64(f.period))
		var b strings.Builder
		fmt.Fprintf(&b, "window ending %s: %d admissions, limit %d:\n", end.Format("15:04:05.000"), len(ms), f.limit)
		b.WriteString(excerpt(ms, f.describe, func(prev, cur int64) bool { return cur != prev-1 }))
		ko.worst += b.String()
	}
	return ko
}

func (f fixedLimit) describe(r reply) string {
	return fmt.Sprintf("sent %s replied %s remaining %d reset_after %d ms",
		time.Unix(0, r.send).Format("15:04:05.000000"), time.Unix(0, r.recv).Format("15:04:05.000000"), r.remaining, r.resetAfter)
}

// throttleLimit is CL.THROTTLE key burst count period 1: GCRA with
// emission interval T = period/count and a tolerance of burst intervals.
// Whatever the arrivals, its admissions at instants t1 <= ... <= tk obey
// k <= burst+1 + (tk-t1)/T: each admission moves the theoretical arrival
// time (TAT) on by T, and one at t needs TAT <= t + burst*T.
type throttleLimit struct {
	burst, count int64
	period       time.Duration
}

func (g throttleLimit) name() string { return "CL.THROTTLE" }

func (g throttleLimit) args(key int) []any {
	return []any{"CL.THROTTLE", keyName(key), g.burst, g.count, int64(g.period / time.Second), 1}
}

func (g throttleLimit) rate() float64 { return float64(g.count) / g.period.Seconds() }

func (g throttleLimit) window() time.Duration { return g.period }

// ready waits until every key has used up its burst: before, GCRA has
// slack (burst+1 admissions at once), and admissions a failover forgets
// only show once the slack is gone. At twice the rate the burst lasts
// burst+1 emission intervals: 1 s with a 1 s period, 10 s with 10 s.
func (g throttleLimit) ready(l *load, _ time.Time) bool { return l.allKeysRefused() }

// allowed is the most admissions GCRA gives in an interval of span ns.
func (g throttleLimit) allowed(span int64) int64 {
	return g.burst + 1 + span*g.count/int64(g.period)
}

// over returns the largest excess of admissions over allowed(b-a) in any
// interval [a, b], where the server decided each admission at an unknown
// instant between its send and its reply. It counts conservatively: the
// admissions of a set S were decided within max(recv) - min(send) over
// S, so S shows an over-admission of at least |S| - allowed(max recv -
// min send); with a = min send and b = max recv, S holds every admission
// sent from a on and replied by b. A correct server never shows an excess
// this way, however slow its replies: the instants it decided at span no
// more than that.
func (g throttleLimit) over(adm []reply) keyOver {
	rs := slices.Clone(adm)
	slices.SortFunc(rs, func(a, b reply) int { return int(a.recv - b.recv) })
	send := make([]int64, len(rs))
	recv := make([]int64, len(rs))
	for i, r := range rs {
		send[i], recv[i] = r.send, r.recv
	}
	var best int64
	bestA, bestB := -1, -1
	for ai := range rs {
		a := send[ai]
		var k int64
		for j := range rs {
			if send[j] < a {
				continue
			}
			k++
			if e := k - g.allowed(recv[j]-a); e > best {
				best, bestA, bestB = e, ai, j
			}
		}
	}
	ko := keyOver{max: best, total: best}
	if best > 0 {
		a, b := send[bestA], recv[bestB]
		var sb strings.Builder
		fmt.Fprintf(&sb, "interval %s..%s (%v): %d admissions, GCRA allows %d:\n",
			time.Unix(0, a).Format("15:04:05.000000"), time.Unix(0, b).Format("15:04:05.000000"),
			time.Duration(b-a), g.allowed(b-a)+best, g.allowed(b-a))
		var in []reply
		for _, r := range rs {
			if r.send >= a && r.recv <= b {
				in = append(in, r)
			}
		}
		describe := func(r reply) string {
			return fmt.Sprintf("sent %s replied %s remaining %d",
				time.Unix(0, r.send).Format("15:04:05.000000"), time.Unix(0, r.recv).Format("15:04:05.000000"), r.remaining)
		}
		// Remaining moves by a unit or two per admission at twice the
		// rate; a jump is a state the server lost or went back to.
		sb.WriteString(excerpt(in, describe, func(prev, cur int64) bool { return cur-prev > 3 || prev-cur > 3 }))
		ko.worst = sb.String()
	}
	return ko
}

// excerpt describes the admissions rs (in the order given), one a line,
// keeping the first and last, each where jump says the remaining count
// broke its course, and their neighbours; the others are counted.
func excerpt(rs []reply, describe func(reply) string, jump func(prev, cur int64) bool) string {
	keep := make([]bool, len(rs))
	for i := range rs {
		if i == 0 || i == len(rs)-1 || jump(rs[i-1].remaining, rs[i].remaining) {
			for j := max(0, i-2); j <= min(len(rs)-1, i+2); j++ {
				keep[j] = true
			}
		}
	}
	var b strings.Builder
	skipped := 0
	for i, r := range rs {
		if !keep[i] {
			skipped++
			continue
		}
		if skipped > 0 {
			fmt.Fprintf(&b, "  ... %d more\n", skipped)
			skipped = 0
		}
		b.WriteString("  " + describe(r) + "\n")
	}
	return b.String()
}

// figures are one run's results.
type figures struct {
	requests, admitted, refused, failed int
	errs                                map[string]int // failed commands by kind
	maxOver                             int64          // the largest excess of one key-window
	totalOver                           int64          // summed over keys (and windows)
	ambiguous                           int
	skewed                              int
	maxGapKey                           time.Duration // longest time without an admission on one key
	maxGap                              time.Duration // longest time without any admission
	worst                               string        // the worst key's admissions, when over-admitted
}

// analyze computes a run's figures from every reply of the load, which
// ran until end.
func analyze(lim limit, replies []reply, end time.Time) figures {
	f := figures{errs: map[string]int{}}
	perKey := make([][]reply, keys)
	var all []int64
	for _, r := range replies {
		f.requests++
		switch r.outcome {
		case admitted:
			f.admitted++
			perKey[r.key] = append(perKey[r.key], r)
			all = append(all, r.recv)
		case refused:
			f.refused++
		case failed:
			f.failed++
			f.errs[r.err]++
		}
	}
	var worstKey int64
	for k, adm := range perKey {
		ko := lim.over(adm)
		f.totalOver += ko.total
		f.ambiguous += ko.ambiguous
		f.skewed += ko.skewed
		if ko.worst != "" && (f.worst == "" || ko.max > worstKey) {
			worstKey = ko.max
			f.worst = fmt.Sprintf("key %s: %s", keyName(k), ko.worst)
		}
		f.maxOver = max(f.maxOver, ko.max)
		times := make([]int64, len(adm))
		for i, r := range adm {
			times[i] = r.recv
		}
		f.maxGapKey = max(f.maxGapKey, longestGap(times, end))
	}
	f.maxGap = longestGap(all, end)
	return f
}

// longestGap is the longest time between two consecutive instants of ts
// (Unix ns, any order), or from the last one to end.
func longestGap(ts []int64, end time.Time) time.Duration {
	if len(ts) == 0 {
		return 0
	}
	ts = slices.Clone(ts)
	slices.Sort(ts)
	var g int64
	for i := 1; i < len(ts); i++ {
		g = max(g, ts[i]-ts[i-1])
	}
	return time.Duration(max(g, end.UnixNano()-ts[len(ts)-1]))
}

// errSummary lists the error kinds and counts, most frequent first.
func (f figures) errSummary() string {
	if f.failed == 0 {
		return "0"
	}
	kinds := make([]string, 0, len(f.errs))
	for k := range f.errs {
		kinds = append(kinds, k)
	}
	slices.SortFunc(kinds, func(a, b string) int {
		if f.errs[a] != f.errs[b] {
			return f.errs[b] - f.errs[a]
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%d %s", f.errs[k], k))
	}
	return fmt.Sprintf("%d (%s)", f.failed, strings.Join(parts, ", "))
}

// The checks below run the checkers on histories of a simulated server,
// with and without a lost update, so that they are seen to find 0 where
// the limit held and the excess where it did not.

// simulate returns the admissions of decide at n requests on one key, 2
// per emission interval every on average, each decided at an instant
// between its send (up to 2 ms before) and its reply (up to 5 ms after),
// with rnd's randomness. decide gets the decision instant (Unix ns) and
// returns whether it admitted, with the reply's remaining and reset_after.
func simulate(rnd *rand.Rand, start int64, n int, every time.Duration,
	decide func(now int64) (bool, int64, int64)) []reply {
	var adm []reply
	now := start
	for range n {
		now += rnd.Int64N(int64(every))
		ok, remaining, resetAfter := decide(now)
		if ok {
			adm = append(adm, reply{send: now - rnd.Int64N(int64(2*time.Millisecond)), recv: now + rnd.Int64N(int64(5*time.Millisecond)),
				remaining: remaining, resetAfter: resetAfter})
		}
	}
	return adm
}

// fixedServer is CL.FIXED's model: a count per window.
type fixedServer struct {
	f      fixedLimit
	window int64 // the current window's index (end/period)
	count  int64
}

func (s *fixedServer) decide(now int64) (bool, int64, int64) {
	p := int64(s.f.period)
	if w := now/p + 1; w != s.window {
		s.window, s.count = w, 0
	}
	end := s.window * p
	ra := (end - now + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	if s.count >= s.f.limit {
		return false, 0, ra
	}
	s.count++
	return true, s.f.limit - s.count, ra
}

// TestFixedCheck runs the CL.FIXED checker on the suite's limits (1 s
// and 10 s windows).
func TestFixedCheck(t *testing.T) {
	for _, ws := range windowSets {
		f := ws.limits[0].(fixedLimit)
		t.Run(ws.name, func(t *testing.T) { checkFixed(t, f) })
	}
}

func checkFixed(t *testing.T, f fixedLimit) {
	rnd := rand.New(rand.NewPCG(1, 2))
	start := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).UnixNano()
	// At twice the limit: 2*limit per window, 2 per every on average.
	every := time.Duration(float64(f.period) / float64(2*f.limit))
	n := int(10 * 2 * f.limit) // 10 windows

	s := &fixedServer{f: f}
	adm := simulate(rnd, start, n, 2*every, s.decide)
	if ko := f.over(adm); ko.total != 0 || ko.max != 0 || ko.ambiguous != 0 {
		t.Errorf("exact limit: over %+v, want 0", ko)
	}

	// A failover 30% into a window (while it still admits) to a replica
	// that missed the window's last 30 admissions: the window admits
	// them again.
	s = &fixedServer{f: f}
	failAt := start + int64(4*f.period+3*f.period/10)
	lost := false
	adm = simulate(rnd, start, n, 2*every, func(now int64) (bool, int64, int64) {
		if now >= failAt && !lost {
			lost = true
			s.count = max(0, s.count-30)
		}
		return s.decide(now)
	})
	want := fmt.Sprintf("%d admissions, limit %d", f.limit+30, f.limit)
	if ko := f.over(adm); ko.total != 30 || ko.max != 30 || !strings.Contains(ko.worst, want) {
		t.Errorf("30 lost admissions: over %d max %d, want 30 30\n%s", ko.total, ko.max, ko.worst)
	}

	// A reply slower than a window could be in two windows: it is put in
	// the emptier one and counted as ambiguous.
	ms := func(d int64) int64 { return int64(time.Duration(d) * f.period / 1000) } // thousandths of a window
	adm = []reply{
		{send: start + ms(300), recv: start + ms(1900), resetAfter: ms(500) / int64(time.Millisecond)},
		{send: start + ms(900), recv: start + ms(900), resetAfter: ms(100) / int64(time.Millisecond)},
	}
	if ko := f.over(adm); ko.ambiguous != 1 || ko.total != 0 {
		t.Errorf("slow reply: %+v, want 1 ambiguous, 0 over", ko)
	}
	// A server clock behind the client's (seen once in a 10 s run): sent
	// 13 µs after the latest instant that reset_after allows, the reply
	// fits its window only with the slack, and is no excess.
	end := start + int64(10*f.period)
	ra := int64(765)
	adm = []reply{{send: end - (ra-1)*int64(time.Millisecond) + int64(13*time.Microsecond), resetAfter: ra}}
	adm[0].recv = adm[0].send + int64(100*time.Microsecond)
	if ko := f.over(adm); ko.skewed != 1 || ko.total != 0 {
		t.Errorf("server clock behind: %+v, want 1 skewed, 0 over", ko)
	}
	if ko := f.over([]reply{{send: adm[0].send - int64(20*time.Microsecond), recv: adm[0].recv, resetAfter: ra}}); ko.skewed != 0 || ko.total != 0 {
		t.Errorf("clocks agreeing: %+v, want 0 skewed, 0 over", ko)
	}
	// A reset_after no window fits is an excess, not hidden.
	adm = []reply{{send: start + ms(100), recv: start + ms(101), resetAfter: ms(300) / int64(time.Millisecond)}}
	if ko := f.over(adm); ko.total != 1 {
		t.Errorf("impossible reset_after: %+v, want 1 over", ko)
	}
}

// gcraServer is CL.THROTTLE's model: a TAT.
type gcraServer struct {
	g   throttleLimit
	tat int64
}

func (s *gcraServer) decide(now int64) (bool, int64, int64) {
	T := int64(s.g.period) / s.g.count
	newTAT := max(s.tat, now) + T
	if newTAT-(s.g.burst+1)*T > now {
		return false, 0, 0
	}
	s.tat = newTAT
	return true, (s.g.burst+1)*T - (newTAT - now), 0
}

// TestThrottleCheck runs the CL.THROTTLE checker on the suite's limits
// (1 s and 10 s periods).
func TestThrottleCheck(t *testing.T) {
	for _, ws := range windowSets {
		g := ws.limits[1].(throttleLimit)
		t.Run(ws.name, func(t *testing.T) { checkThrottle(t, g) })
	}
}

func checkThrottle(t *testing.T, g throttleLimit) {
	rnd := rand.New(rand.NewPCG(3, 4))
	start := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC).UnixNano()
	every := time.Duration(float64(g.period) / float64(2*g.count)) // twice the rate
	n := int(10 * 2 * g.count)                                     // 10 periods

	s := &gcraServer{g: g}
	adm := simulate(rnd, start, n, 2*every, s.decide)
	if ko := g.over(adm); ko.total != 0 {
		t.Errorf("exact limit: over %d, want 0\n%s", ko.total, ko.worst)
	}

	// A failover to a replica whose TAT is one period old: about count
	// more in the same interval, less what the reply times hide.
	s = &gcraServer{g: g}
	failAt := start + int64(4*g.period+3*g.period/10)
	var stale []int64 // TATs by decision, to roll back to
	var at []int64
	lost := false
	adm = simulate(rnd, start, n, 2*every, func(now int64) (bool, int64, int64) {
		if now >= failAt && !lost {
			lost = true
			for i := len(at) - 1; i >= 0; i-- {
				if at[i] <= now-int64(g.period) {
					s.tat = stale[i]
					break
				}
			}
		}
		ok, rem, ra := s.decide(now)
		at, stale = append(at, now), append(stale, s.tat)
		return ok, rem, ra
	})
	if ko := g.over(adm); ko.total < g.count*9/10 || ko.total > g.count {
		t.Errorf("TAT rolled back one period: over %d, want about %d\n%s", ko.total, g.count, ko.worst)
	}
}

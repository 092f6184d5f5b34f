package limiter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

type logStep struct {
	at    int64
	limit int64 // 0: the sequence's limit
	q     int64
	want  Decision
	// wantLog, if not nil, is the log expected after the step.
	wantLog []LogEntry
}

type logSeq struct {
	name   string
	period int64
	limit  int64
	steps  []logStep
}

// runLogSeq follows the callers' protocol: Decide, then Apply the request
// when it was admitted.
func runLogSeq(t *testing.T, sq logSeq) {
	t.Helper()
	var l Log
	for i, sp := range sq.steps {
		limit := sq.limit
		if sp.limit != 0 {
			limit = sp.limit
		}
		where := fmt.Sprintf("step %d (at t0%+dns, limit %d, q %d)", i, sp.at-t0, limit, sp.q)
		d := l.Decide(sp.at, Rule{Limit: limit, Period: sq.period}, sp.q)
		if d != sp.want {
			t.Errorf("%s: decision %s, want %s", where, ds(d), ds(sp.want))
		}
		if !d.Limited && sp.q > 0 {
			exp := l.Apply(sp.at, Rule{Period: sq.period}, sp.q)
			if n := len(l.Entries); n == 0 || exp != l.Entries[n-1].T+sq.period {
				t.Errorf("%s: Apply returned %d, log %v", where, exp, l.Entries)
			}
			// ResetAfter is when the newest unit leaves: the log's expiry.
			if d.ResetAfter != exp-sp.at {
				t.Errorf("%s: ResetAfter %d but the log expires %d after now", where, d.ResetAfter, exp-sp.at)
			}
		}
		if sp.wantLog != nil && !slices.Equal(l.Entries, sp.wantLog) {
			t.Errorf("%s: log %v, want %v", where, l.Entries, sp.wantLog)
		}
	}
}

func TestLogTable(t *testing.T) {
	const M = math.MaxInt64
	seqs := []logSeq{
		{name: "limit 3 per 1s", period: s, limit: 3, steps: []logStep{
			{at: t0, q: 1, want: dec(false, 3, 2, -1, s)},
			{at: t0 + 250*ms, q: 1, want: dec(false, 3, 1, -1, s)},
			{at: t0 + 500*ms, q: 1, want: dec(false, 3, 0, -1, s)},
			// Full: the unit at t0 leaves at t0+1s.
			{at: t0 + 750*ms, q: 1, want: dec(true, 3, 0, 250*ms, 750*ms)},
			{at: t0 + 750*ms, q: 2, want: dec(true, 3, 0, 500*ms, 750*ms)},
			{at: t0 + 750*ms, q: 3, want: dec(true, 3, 0, 750*ms, 750*ms)},
			{at: t0 + s - 1, q: 1, want: dec(true, 3, 0, 1, 500*ms+1)},
			// Exactly period after it, the unit at t0 is out of (now-period, now].
			{at: t0 + s, q: 1, want: dec(false, 3, 0, -1, s),
				wantLog: []LogEntry{{t0 + 250*ms, 1}, {t0 + 500*ms, 1}, {t0 + s, 1}}},
			{at: t0 + s, q: 4, want: dec(true, 3, 0, -1, s)},
			{at: t0 + s, q: 0, want: dec(false, 3, 0, -1, s)},
			// Clock back 100ms: no unit leaves early.
			{at: t0 + 900*ms, q: 1, want: dec(true, 3, 0, 350*ms, 1100*ms)},
			{at: t0 + 1500*ms, q: 2, want: dec(false, 3, 0, -1, s),
				wantLog: []LogEntry{{t0 + s, 1}, {t0 + 1500*ms, 2}}},
			// Clock back 300ms, after Apply dropped the old entries.
			{at: t0 + 1200*ms, q: 1, want: dec(true, 3, 0, 800*ms, 1300*ms)},
			// Everything left: q = limit on an empty log.
			{at: t0 + 2500*ms, q: 3, want: dec(false, 3, 0, -1, s),
				wantLog: []LogEntry{{t0 + 2500*ms, 3}}},
		}},
		{name: "empty: q=0, q=limit, q>limit", period: 60 * s, limit: 5, steps: []logStep{
			{at: t0, q: 0, want: dec(false, 5, 5, -1, 0), wantLog: []LogEntry{}},
			{at: t0, q: 6, want: dec(true, 5, 5, -1, 0), wantLog: []LogEntry{}},
			{at: t0, q: 5, want: dec(false, 5, 0, -1, 60*s)},
			{at: t0, q: 6, want: dec(true, 5, 0, -1, 60*s)},
			// Requests at the same instant share one entry.
			{at: t0 + 60*s, q: 2, want: dec(false, 5, 3, -1, 60*s)},
			{at: t0 + 60*s, q: 3, want: dec(false, 5, 0, -1, 60*s), wantLog: []LogEntry{{t0 + 60*s, 5}}},
			{at: t0 + 120*s - 1, q: 1, want: dec(true, 5, 0, 1, 1)},
			{at: t0 + 120*s, q: 0, want: dec(false, 5, 5, -1, 0)},
		}},
		// A request whose clock is behind the newest entry is recorded at
		// that entry's time, so that it does not leave early either.
		{name: "clock backwards: recorded at the newest entry", period: s, limit: 5, steps: []logStep{
			{at: t0 + s, q: 1, want: dec(false, 5, 4, -1, s)},
			{at: t0 + 500*ms, q: 2, want: dec(false, 5, 2, -1, 1500*ms), wantLog: []LogEntry{{t0 + s, 3}}},
			{at: t0 + 2*s - 1, q: 3, want: dec(true, 5, 2, 1, 1)},
			{at: t0 + 2*s, q: 5, want: dec(false, 5, 0, -1, s), wantLog: []LogEntry{{t0 + 2*s, 5}}},
		}},
		{name: "negative instants (before 1970)", period: s, limit: 2, steps: []logStep{
			{at: -s, q: 2, want: dec(false, 2, 0, -1, s)},
			{at: -1, q: 1, want: dec(true, 2, 0, 1, 1)},
			{at: 0, q: 2, want: dec(false, 2, 0, -1, s), wantLog: []LogEntry{{0, 2}}},
		}},
		{name: "huge: limit MaxInt64, period MaxPeriod, now 2^62", period: maxP, limit: M, steps: []logStep{
			{at: huge, q: M - 1, want: dec(false, M, 1, -1, maxP)},
			{at: huge + 1, q: 2, want: dec(true, M, 1, maxP-1, maxP-1)},
			{at: huge + 1, q: 1, want: dec(false, M, 0, -1, maxP)},
			{at: huge + maxP, q: M, want: dec(true, M, M-1, 1, 1)},
			{at: huge + maxP + 1, q: M, want: dec(false, M, 0, -1, maxP),
				wantLog: []LogEntry{{huge + maxP + 1, M}}},
			{at: huge + 2*maxP, q: M, want: dec(true, M, 0, 1, 1)},
		}},
		// The limit is an argument of every command: a log holding more
		// units than the new limit must not make Remaining negative nor
		// limit q=0.
		{name: "limit lowered below the units", period: s, limit: 3, steps: []logStep{
			{at: t0, q: 2, want: dec(false, 3, 1, -1, s)},
			{at: t0 + 100*ms, q: 1, want: dec(false, 3, 0, -1, s)},
			{at: t0 + 200*ms, limit: 2, q: 0, want: dec(false, 2, 0, -1, 900*ms)},
			{at: t0 + 200*ms, limit: 2, q: 1, want: dec(true, 2, 0, 800*ms, 900*ms)},
			{at: t0 + 200*ms, limit: 1, q: 1, want: dec(true, 1, 0, 900*ms, 900*ms)},
			{at: t0 + 200*ms, limit: 1, q: 2, want: dec(true, 1, 0, -1, 900*ms)},
		}},
	}
	n := 0
	for _, sq := range seqs {
		t.Run(sq.name, func(t *testing.T) { runLogSeq(t, sq) })
		n += len(sq.steps)
	}
	t.Logf("%d sequences, %d steps", len(seqs), n)
}

// logRef is the brute-force reference: every admitted request.
type logRef struct {
	period, limit int64
	times, units  []int64
}

// inWindow sums the admitted units with T in (now-period, now].
func (r *logRef) inWindow(now int64) (sum, newest int64, any bool) {
	for i, t := range r.times {
		if t > now-r.period && t <= now {
			sum += r.units[i]
			newest, any = t, true
		}
	}
	return sum, newest, any
}

func (r *logRef) admits(now, q int64) bool {
	sum, _, _ := r.inWindow(now)
	return q == 0 || q <= r.limit-sum
}

// TestLogProperties runs random sequences (non-decreasing clock) against the
// brute-force reference. It checks every decision, that RetryAfter and
// ResetAfter are exact, that the log holds at most limit entries, and at the
// end that no half-open interval of length period holds more than limit
// admitted units.
func TestLogProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const sequences, length = 3000, 80
	var requests, retries, intervals int
	for seq := 0; seq < sequences; seq++ {
		period, limit := randFixedParams(rng)
		if limit > 12 && rng.IntN(2) == 0 {
			limit = 1 + rng.Int64N(100) // logs with many entries
		}
		ref := &logRef{period: period, limit: limit}
		var l Log
		now := randStart(rng, period)
		for i := 0; i < length; i++ {
			step := randStep(rng, period)
			if limit <= 100 && rng.IntN(2) == 0 {
				step = rng.Int64N(period/limit + 1) // dense: many live entries
			}
			if now += step; now > huge {
				break
			}
			q := randQ(rng, limit, false)
			where := fmt.Sprintf("seq %d step %d: period %d limit %d now %d q %d", seq, i, period, limit, now, q)
			d := l.Decide(now, Rule{Limit: limit, Period: period}, q)
			requests++
			sum, newest, any := ref.inWindow(now)
			limited := q > 0 && q > limit-sum
			if d.Limited != limited {
				t.Fatalf("%s: %s, reference has %d units in the window", where, ds(d), sum)
			}
			if !limited && q > 0 {
				sum += q
				newest, any = now, true
			}
			want := dec(limited, limit, limit-sum, -1, 0)
			if any {
				want.ResetAfter = newest + period - now
			}
			if limited && q <= limit {
				retries++
				if !ref.admits(now+d.RetryAfter, q) || ref.admits(now+d.RetryAfter-1, q) {
					t.Fatalf("%s: RetryAfter %d is not the first instant the reference admits", where, d.RetryAfter)
				}
				rule := Rule{Limit: limit, Period: period}
				if l.Decide(now+d.RetryAfter, rule, q).Limited || !l.Decide(now+d.RetryAfter-1, rule, q).Limited {
					t.Fatalf("%s: RetryAfter %d is not exact for the log itself", where, d.RetryAfter)
				}
				want.RetryAfter = d.RetryAfter
			}
			if d != want {
				t.Fatalf("%s: %s, want %s", where, ds(d), ds(want))
			}
			checkShape(t, where, d, limit, q, period, period)
			if !d.Limited && q > 0 || rng.IntN(8) == 0 { // sometimes Apply only to drop old entries
				applied := q
				if d.Limited {
					applied = 0
				}
				l.Apply(now, Rule{Period: period}, applied)
				if applied > 0 {
					ref.times = append(ref.times, now)
					ref.units = append(ref.units, applied)
				}
			}
			if int64(len(l.Entries)) > limit {
				t.Fatalf("%s: %d entries > limit %d", where, len(l.Entries), limit)
			}
			var total int64
			for _, e := range l.Entries {
				total += e.N
			}
			if total != l.Units {
				t.Fatalf("%s: Units %d, entries hold %d", where, l.Units, total)
			}
		}
		// Every interval (x-period, x] with the most units ends at an
		// admitted instant.
		for _, x := range ref.times {
			intervals++
			if sum, _, _ := ref.inWindow(x); sum > limit {
				t.Fatalf("seq %d: (%d, %d] holds %d > limit %d units", seq, x-period, x, sum, limit)
			}
		}
	}
	t.Logf("%d sequences, %d requests, %d RetryAfter exactness checks, %d intervals checked", sequences, requests, retries, intervals)
}

// TestLogClockBackwardsProperty: with a clock that steps back, a unit
// admitted at T still counts at every instant in [T, T+period) of the
// caller's clock, as long as the log was not pruned past it (Apply at an
// instant >= T+period drops it for good).
func TestLogClockBackwardsProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	const sequences, length = 2000, 60
	var requests, backs int
	for seq := 0; seq < sequences; seq++ {
		period := 1 + rng.Int64N(100)
		limit := 1 + rng.Int64N(8)
		var l Log
		type rec struct{ at, q int64 }
		var admitted []rec
		now := randStart(rng, period)
		latest := now // the latest instant passed to Apply
		for i := 0; i < length; i++ {
			if rng.IntN(4) == 0 {
				now -= 1 + rng.Int64N(period)
				backs++
			} else {
				now += rng.Int64N(period/2 + 1)
			}
			q := 1 + rng.Int64N(limit)
			d := l.Decide(now, Rule{Limit: limit, Period: period}, q)
			requests++
			// The units admitted at instants in (now-period, now] that no
			// Apply could have dropped (latest-period < at).
			var sum int64
			for _, r := range admitted {
				if r.at > now-period && r.at <= now && r.at > latest-period {
					sum += r.q
				}
			}
			if !d.Limited && sum+q > limit {
				t.Fatalf("seq %d step %d: admitted %d with %d units admitted in (now-period, now], limit %d", seq, i, q, sum, limit)
			}
			if d.Limited {
				rule := Rule{Limit: limit, Period: period}
				if l.Decide(now+d.RetryAfter, rule, q).Limited || !l.Decide(now+d.RetryAfter-1, rule, q).Limited {
					t.Fatalf("seq %d step %d: RetryAfter %d is not exact", seq, i, d.RetryAfter)
				}
				continue
			}
			l.Apply(now, Rule{Period: period}, q)
			latest = max(latest, now)
			admitted = append(admitted, rec{now, q})
			for j := 1; j < len(l.Entries); j++ {
				if l.Entries[j-1].T >= l.Entries[j].T {
					t.Fatalf("seq %d step %d: log out of order: %v", seq, i, l.Entries)
				}
			}
		}
	}
	t.Logf("%d sequences, %d requests (%d clock steps back)", sequences, requests, backs)
}

func FuzzLog(f *testing.F) {
	f.Add(t0, s, int64(3), int64(1), []byte{0, 1, 10, 1, 20, 1})
	f.Add(huge, maxP, int64(math.MaxInt64), int64(math.MaxInt64), []byte{255, 255})
	f.Add(int64(-1), int64(1), int64(1), int64(1), []byte{})
	f.Add(t0, int64(1000), int64(100), int64(50), []byte{1, 50, 2, 50, 3, 1, 0, 7, 200, 9})
	f.Add(t0, int64(7), int64(2), int64(0), []byte{0, 2, 0, 2, 0, 2, 0, 2})
	f.Add(t0, int64(100), int64(4), int64(1), []byte{200, 4, 1})
	f.Fuzz(func(t *testing.T, now, period, limit, q int64, ops []byte) {
		now, period = fuzzNow(now), fuzzPeriod(period)
		if CheckLimit(limit) != nil || q < 0 {
			return // a negative quantity is an error for the log
		}
		// Build a log from up to 64 requests at non-decreasing instants
		// in [now-2*period, now]: each pair of bytes is (gap in 1/64ths
		// of the period, quantity; 0 asks Apply to prune only).
		var l Log
		ref := &logRef{period: period, limit: limit}
		at := now - 2*period
		for i := 0; i+1 < len(ops) && i < 128; i += 2 {
			at = min(now, at+int64(ops[i])*(period/64+1))
			n := int64(ops[i+1])
			if ops[i+1] == 255 {
				n = limit // a full request
			}
			d := l.Decide(at, Rule{Limit: limit, Period: period}, n)
			checkShape(t, "Log build", d, limit, n, period, period)
			if d.Limited != !ref.admits(at, n) {
				t.Fatalf("Log: at %d q %d: %s, reference disagrees", at, n, ds(d))
			}
			if !d.Limited {
				l.Apply(at, Rule{Period: period}, n)
				if n > 0 {
					ref.times, ref.units = append(ref.times, at), append(ref.units, n)
				}
			}
			if int64(len(l.Entries)) > limit {
				t.Fatalf("Log: %d entries > limit %d", len(l.Entries), limit)
			}
		}
		// An odd number of bytes lowers the limit for the last request (the
		// limit is an argument of every command): the log may then hold
		// more units than the limit.
		if len(ops)%2 == 1 {
			limit = 1 + (limit-1)/2
			ref.limit = limit
		}
		d := l.Decide(now, Rule{Limit: limit, Period: period}, q)
		checkShape(t, "Log", d, limit, q, period, period)
		if d.Limited != !ref.admits(now, q) {
			t.Fatalf("Log: %s, reference disagrees", ds(d))
		}
		if d.Limited && q <= limit {
			if !ref.admits(now+d.RetryAfter, q) || ref.admits(now+d.RetryAfter-1, q) {
				t.Fatalf("Log: RetryAfter %d is not exact", d.RetryAfter)
			}
		}
		if d.Limited {
			return
		}
		before := len(l.Entries)
		if exp := l.Apply(now, Rule{Period: period}, q); exp < now {
			t.Fatalf("Log: Apply returned %d < now %d", exp, now)
		}
		if len(l.Entries) > before+1 {
			t.Fatalf("Log: Apply added %d entries", len(l.Entries)-before)
		}
	})
}

// BenchmarkLog is a log of limit 100 per 1s in its steady state: a request
// every 10ms, each Decide + Apply drops one entry and appends one.
func BenchmarkLog(b *testing.B) {
	b.ReportAllocs()
	var l Log
	now := t0
	for range b.N {
		now += 10 * ms
		if d := l.Decide(now, Rule{Limit: 100, Period: s}, 1); !d.Limited {
			l.Apply(now, Rule{Period: s}, 1)
		}
	}
}

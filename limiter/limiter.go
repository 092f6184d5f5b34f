package limiter

import (
	"errors"
	"math"
	"math/bits"
	"time"
)

// MaxPeriod is the longest period or lease accepted: 10 years.
const MaxPeriod = 10 * 365 * 24 * time.Hour

// Errors returned by the argument checks.
var (
	ErrLimit    = errors.New("limiter: limit must be a positive integer")
	ErrPeriod   = errors.New("limiter: period must be positive and at most 10 years")
	ErrNegative = errors.New("limiter: quantity must not be negative")
)

// CheckLimit validates a limit.
func CheckLimit(limit int64) error {
	if limit < 1 {
		return ErrLimit
	}
	return nil
}

// CheckPeriod validates a period or lease in ns.
func CheckPeriod(p int64) error {
	if p < 1 || p > int64(MaxPeriod) {
		return ErrPeriod
	}
	return nil
}

// Decision is the outcome of one request, shaped like CL.THROTTLE's reply.
type Decision struct {
	Limited   bool
	Limit     int64
	Remaining int64
	// RetryAfter is how long until the same request could be admitted, in
	// ns: -1 when it was admitted, or when it can never be (quantity above
	// the limit).
	RetryAfter int64
	// ResetAfter is how long until the limiter is back to its full
	// allowance if nothing else arrives, in ns (0 when it is full now).
	ResetAfter int64
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// mulDiv returns floor(a*b/c) and whether a*b%c != 0, for non-negative a,
// b and positive c with a*b/c < 2^64.
func mulDiv(a, b, c int64) (q int64, inexact bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	quo, rem := bits.Div64(hi, lo, uint64(c))
	if quo > math.MaxInt64 {
		return math.MaxInt64, true
	}
	return int64(quo), rem != 0
}

// mulLE reports whether a*b <= c*d for non-negative operands, exactly.
func mulLE(a, b, c, d int64) bool {
	h1, l1 := bits.Mul64(uint64(a), uint64(b))
	h2, l2 := bits.Mul64(uint64(c), uint64(d))
	return h1 < h2 || (h1 == h2 && l1 <= l2)
}

// FixedState is a fixed window's state: the window it counts and the units
// admitted in it. Window w covers [w*period, (w+1)*period) ns since the
// Unix epoch, so windows are aligned to multiples of the period.
type FixedState struct {
	Window int64
	Count  int64
}

// Fixed decides a request of q units on a fixed window of limit units per
// period ns at now. It returns the state to store (when store is true) and
// the instant in ns at which the key can be forgotten (the window's end).
//
// If the stored window is later than now's (the clock went back), the
// request counts in the stored window, so that its units are not forgotten
// and no window admits more than limit units; durations are then measured
// from now to that window's end. The count may exceed limit if the limit
// was lowered since it was stored: Remaining is then 0.
func Fixed(st FixedState, exists bool, now, period, limit, q int64) (next FixedState, d Decision, store bool, expireAt int64) {
	w := floorDiv(now, period)
	if exists && st.Window > w {
		w = st.Window // the clock went back: keep counting the later window
	}
	end := (w + 1) * period
	count := int64(0)
	if exists && st.Window == w {
		count = st.Count
	}
	d = Decision{Limit: limit, RetryAfter: -1}
	switch {
	case q == 0:
	case q < 0:
		count += q
		if count < 0 {
			count = 0 // a refund never goes below zero
		}
		store = exists
	case q > limit:
		d.Limited = true
	case q > limit-count:
		d.Limited = true
		d.RetryAfter = end - now
	default:
		count += q
		store = true
	}
	d.Remaining = max(limit-count, 0)
	if count > 0 {
		d.ResetAfter = end - now
	}
	return FixedState{Window: w, Count: count}, d, store, end
}

// SlidingState is a sliding-window counter's state: the units admitted in
// window Window (Cur) and in the window before it (Prev), windows aligned
// as for Fixed.
type SlidingState struct {
	Window    int64
	Prev, Cur int64
}

// MaxSlidingLimit is the largest limit of a sliding-window counter: its two
// counts are stored in 32 bits each.
const MaxSlidingLimit = math.MaxUint32

// Sliding decides a request of q units on a sliding-window counter of limit
// units per period ns at now. The sliding window (now-period, now] overlaps
// the previous fixed window by period-e, where e is the time since the
// current window began; the estimate of the units in it is
//
//	prev*(period-e)/period + cur
//
// (the previous window's units assumed evenly spread). A request is
// admitted iff estimate + q <= limit, compared exactly in 128-bit integers.
//
// If the stored window is later than now's (the clock went back), the
// request is decided as at the start of the stored window, so that its
// units are not forgotten, and RetryAfter and ResetAfter are measured from
// now.
func Sliding(st SlidingState, exists bool, now, period, limit, q int64) (next SlidingState, d Decision, store bool, expireAt int64) {
	w := floorDiv(now, period)
	var back int64 // how far the clock went back behind the stored window
	if exists && st.Window > w {
		w = st.Window
		back = w*period - now
		now += back
	}
	start := w * period
	e := now - start
	var prev, cur int64
	if exists {
		switch st.Window {
		case w:
			prev, cur = st.Prev, st.Cur
		case w - 1:
			prev = st.Cur
		}
	}
	d = Decision{Limit: limit, RetryAfter: -1}
	switch {
	case q > limit:
		d.Limited = true
	case q < 0:
		cur += q
		if cur < 0 {
			cur = 0
		}
		store = exists
	case q == 0:
	case limit-cur-q >= 0 && mulLE(prev, period-e, limit-cur-q, period):
		cur += q
		store = true
	default:
		d.Limited = true
		d.RetryAfter = slidingRetry(prev, cur, e, period, limit, q)
	}
	weighted, inexact := mulDiv(prev, period-e, period)
	if inexact {
		weighted++ // a partial unit still occupies room
	}
	d.Remaining = limit - cur - weighted
	if d.Remaining < 0 {
		d.Remaining = 0
	}
	switch {
	case cur > 0:
		d.ResetAfter = 2*period - e + back
	case prev > 0:
		d.ResetAfter = period - e + back
	}
	if d.RetryAfter > 0 {
		d.RetryAfter += back
	}
	return SlidingState{Window: w, Prev: prev, Cur: cur}, d, store, start + 2*period
}

// slidingRetry returns the time from now until prev*(period-e')/period +
// cur + q <= limit holds, moving into the next window if needed. 0 < q <=
// limit and the request is limited now.
func slidingRetry(prev, cur, e, period, limit, q int64) int64 {
	if need := limit - cur - q; need >= 0 {
		// Within this window: the first e' with prev*(period-e') <= need*period.
		f, _ := mulDiv(need, period, prev) // prev > 0: else not limited
		return period - f - e
	}
	// In the next window cur becomes the previous count and nothing is new.
	if cur <= limit-q {
		return period - e
	}
	f, _ := mulDiv(limit-q, period, cur)
	return (period - e) + (period - f)
}

// LogEntry is one admitted request of a sliding log: N units at time T (ns).
type LogEntry struct {
	T int64
	N int64
}

// LogEntryBytes is the memory one LogEntry takes in a log.
const LogEntryBytes = 16

// Log is a sliding log: the admitted requests of the last period, oldest
// first, and their total units. The zero value is an empty log. Memory is
// at most limit entries, since every entry holds at least one unit.
type Log struct {
	Entries []LogEntry
	Units   int64
}

// live returns the index of the first entry still inside (now-period, now]
// and the units of the entries before it.
func (l *Log) live(now, period int64) (first int, gone int64) {
	for first < len(l.Entries) && l.Entries[first].T <= now-period {
		gone += l.Entries[first].N
		first++
	}
	return first, gone
}

// Decide decides a request of q >= 0 units on the log for limit units per
// period ns at now: admitted iff the units of the last period plus q stay
// within limit. It does not change the log; Apply does.
func (l *Log) Decide(now, period, limit, q int64) Decision {
	first, gone := l.live(now, period)
	units := l.Units - gone
	d := Decision{Limit: limit, RetryAfter: -1}
	switch {
	case q == 0: // never limited, even above a lowered limit
	case q > limit:
		d.Limited = true
	case q > limit-units:
		d.Limited = true
		// The oldest entries must leave until the request fits: entry i
		// leaves the window at T+period.
		for i := first; i < len(l.Entries); i++ {
			units -= l.Entries[i].N
			if q <= limit-units {
				d.RetryAfter = l.Entries[i].T + period - now
				break
			}
		}
		units = l.Units - gone
	case q > 0:
		units += q
	}
	d.Remaining = max(limit-units, 0) // units > limit if the limit was lowered
	// Reset: when the newest unit in the log (after this request) leaves.
	newest, have := int64(0), false
	if n := len(l.Entries); n > first {
		newest, have = l.Entries[n-1].T, true
	}
	if !d.Limited && q > 0 {
		if !have || now > newest {
			newest = now
		}
		have = true
	}
	if have {
		d.ResetAfter = newest + period - now
	}
	return d
}

// Apply drops the entries that left the window and, for q > 0, records q
// units at now (or at the newest entry's time if the clock went back, so
// that entries stay in order and none leaves early). It returns the instant
// in ns after which the log is empty.
func (l *Log) Apply(now, period, q int64) (expireAt int64) {
	first, gone := l.live(now, period)
	if first > 0 {
		n := copy(l.Entries, l.Entries[first:])
		l.Entries = l.Entries[:n]
		l.Units -= gone
	}
	if q > 0 {
		t := now
		if n := len(l.Entries); n > 0 && l.Entries[n-1].T >= t {
			t = l.Entries[n-1].T
			l.Entries[n-1].N += q
		} else {
			l.Entries = append(l.Entries, LogEntry{T: t, N: q})
		}
		l.Units += q
	}
	if cap(l.Entries) > 64 && len(l.Entries) < cap(l.Entries)/4 {
		l.Entries = append([]LogEntry(nil), l.Entries...)
	}
	if len(l.Entries) == 0 {
		return now
	}
	return l.Entries[len(l.Entries)-1].T + period
}

// Leases is a concurrency limiter's state: the tokens holding a lease and
// when each lease ends (ns). The zero value holds no lease.
type Leases struct {
	m map[string]int64
}

// Held returns the number of live leases at now.
func (ls *Leases) Held(now int64) int64 {
	var n int64
	for _, exp := range ls.m {
		if exp > now {
			n++
		}
	}
	return n
}

// Acquire decides whether token may hold one of limit leases at now. A
// token that already holds a live lease is always admitted (its lease is
// extended). It does not change the state; Apply does.
func (ls *Leases) Acquire(now, lease, limit int64, token string) Decision {
	d := Decision{Limit: limit, RetryAfter: -1}
	held := ls.Held(now)
	exp, mine := ls.m[token]
	mine = mine && exp > now
	var soonest, latest int64 = math.MaxInt64, now
	for _, e := range ls.m {
		if e > now {
			soonest = min(soonest, e)
			latest = max(latest, e)
		}
	}
	switch {
	case mine:
	case held < limit:
		held++
	default:
		d.Limited = true
		d.RetryAfter = soonest - now
	}
	if !d.Limited {
		latest = max(latest, now+lease)
	}
	d.Remaining = max(limit-held, 0) // held > limit if the limit was lowered
	if held > 0 {
		d.ResetAfter = latest - now
	}
	return d
}

// Apply gives token a lease until now+lease (or keeps its live lease if
// that ends later: a re-acquire extends, never shortens) and drops expired
// ones. It returns the instant in ns after which no lease is live.
func (ls *Leases) Apply(now, lease int64, token string) (expireAt int64) {
	if ls.m == nil {
		ls.m = make(map[string]int64)
	}
	if exp, ok := ls.m[token]; !ok || exp < now+lease {
		ls.m[token] = now + lease
	}
	return ls.prune(now)
}

// Release ends token's lease and reports whether it held a live one. It
// returns the instant after which no lease is live (now if none is).
func (ls *Leases) Release(now int64, token string) (released bool, expireAt int64) {
	if exp, ok := ls.m[token]; ok {
		released = exp > now
		delete(ls.m, token)
	}
	return released, ls.prune(now)
}

func (ls *Leases) prune(now int64) int64 {
	latest := now
	for t, e := range ls.m {
		if e <= now {
			delete(ls.m, t)
			continue
		}
		latest = max(latest, e)
	}
	return latest
}

// Tokens returns the live tokens at now (for inspection), unordered.
func (ls *Leases) Tokens(now int64) []string {
	var out []string
	for t, e := range ls.m {
		if e > now {
			out = append(out, t)
		}
	}
	return out
}

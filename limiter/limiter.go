package limiter

import (
	"bytes"
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

// Rule is a window limiter's rule: at most Limit units per Period ns. The
// fixed window, the sliding-window counter and the sliding log take one, so
// that a limit cannot be passed as a period or the other way round. A Rule
// is valid when Check accepts it; the zero value is not.
type Rule struct {
	Limit  int64 // units per period, at least 1 (CheckLimit)
	Period int64 // ns, 1 to MaxPeriod (CheckPeriod)
}

// Check validates r: ErrLimit for its limit, else ErrPeriod for its period,
// else nil.
func (r Rule) Check() error {
	if err := CheckLimit(r.Limit); err != nil {
		return err
	}
	return CheckPeriod(r.Period)
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

// Fixed decides a request of q units on a fixed window of r.Limit units
// per r.Period ns at now. It returns the state to store (when store is true) and
// the instant in ns at which the key can be forgotten (the window's end).
//
// If the stored window is later than now's (the clock went back), the
// request counts in the stored window, so that its units are not forgotten
// and no window admits more than limit units; durations are then measured
// from now to that window's end. The count may exceed limit if the limit
// was lowered since it was stored: Remaining is then 0.
func Fixed(st FixedState, exists bool, now int64, r Rule, q int64) (next FixedState, d Decision, store bool, expireAt int64) {
	period, limit := r.Period, r.Limit
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

// counts returns the previous and current counts of st (when it exists)
// as seen from window w: its own if st is w, its current count as the
// previous one if st is the window before, none if older.
func (st SlidingState) counts(exists bool, w int64) (prev, cur int64) {
	if exists {
		switch st.Window {
		case w:
			return st.Prev, st.Cur
		case w - 1:
			return st.Cur, 0
		}
	}
	return 0, 0
}

// MaxLeases is the largest limit of a concurrency limiter, so the most
// live leases one key can hold through Acquire and Apply (which admit a new
// token only below the limit). Acquire, Apply and Release each scan the
// key's leases: an acquire and a release of one token cost about 0.2 µs at
// 10 leases, 70 µs at MaxLeases and 2.3 ms at 200,000
// (BenchmarkAcquireManyLeases), so this bound is what keeps one call on a
// key short.
const MaxLeases = 10000

// MaxSlidingLimit is the largest limit of a sliding-window counter: its two
// counts are stored in 32 bits each.
const MaxSlidingLimit = math.MaxUint32

// Sliding decides a request of q units on a sliding-window counter of
// r.Limit units per r.Period ns (period and limit below) at now. The sliding window (now-period, now] overlaps
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
func Sliding(st SlidingState, exists bool, now int64, r Rule, q int64) (next SlidingState, d Decision, store bool, expireAt int64) {
	period, limit := r.Period, r.Limit
	w := floorDiv(now, period)
	var back int64 // how far the clock went back behind the stored window
	if exists && st.Window > w {
		w = st.Window
		back = w*period - now
		now += back
	}
	start := w * period
	e := now - start
	prev, cur := st.counts(exists, w)
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
	// Res holds the log's reservations (CL.RESERVE), nil when none.
	Res *Reservations
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

// Decide decides a request of q >= 0 units on the log for r.Limit units
// per r.Period ns at now: admitted iff the units of the last period plus q
// stay within the limit. It does not change the log; Apply does.
func (l *Log) Decide(now int64, r Rule, q int64) Decision {
	period, limit := r.Period, r.Limit
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

// Apply drops the entries that left the window of r.Period ns and, for
// q > 0, records q units at now (or at the newest entry's time if the clock
// went back, so that entries stay in order and none leaves early): what
// Decide described for the same r. r.Limit is not read. It returns the
// instant in ns after which the log is empty.
func (l *Log) Apply(now int64, r Rule, q int64) (expireAt int64) {
	period := r.Period
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
//
// The leases are kept in two slices and no per-token string: ents in
// increasing token order, and toks, the tokens' bytes back to back in the
// same order (lease i's token is toks[ents[i-1].end:ents[i].end]).
// Removing a lease compacts both, so they only hold the leases not yet
// pruned. Both start in arrays inside the Leases, so a key with one lease
// and a token of up to 40 bytes (a UUID's text is 36) is one 104-byte
// allocation, read with one cache miss or two; more leases move them to
// the heap. (One lease with a token of up to PackedTokenLen bytes needs no
// Leases at all in the keyspace: see Pack.) A Leases must not be copied once used (the slices may point
// into it).
type Leases struct {
	_    noCopy
	ents []lease
	toks []byte
	ent0 [1]lease
	tok0 [40]byte
}

// noCopy makes go vet's copylocks check report copies of a Leases.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}

// lease is one entry of Leases: when it ends (ns), and the end of its token
// in Leases.toks.
type lease struct {
	exp int64
	end int
}

// leaseBytes is the size of a lease (an entry of Leases.ents) on 64-bit
// machines.
const leaseBytes = 16

// token returns lease i's token, which aliases ls.toks.
func (ls *Leases) token(i int) []byte {
	start := 0
	if i > 0 {
		start = ls.ents[i-1].end
	}
	return ls.toks[start:ls.ents[i].end:ls.ents[i].end]
}

// find returns the index of token's lease and true, or where it would be
// inserted and false.
func (ls *Leases) find(token []byte) (int, bool) {
	n := len(ls.ents)
	// Tokens often arrive in increasing order (a decoder puts them so):
	// check the end first.
	if n == 0 || bytes.Compare(ls.token(n-1), token) < 0 {
		return n, false
	}
	lo, hi := 0, n-1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if bytes.Compare(ls.token(m), token) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, bytes.Equal(ls.token(lo), token)
}

// insert adds a lease for token ending at exp at index i (from find). It
// copies token.
func (ls *Leases) insert(i int, token []byte, exp int64) {
	start := 0
	if i > 0 {
		start = ls.ents[i-1].end
	}
	if cap(ls.ents) == 0 {
		ls.ents = ls.ent0[:0]
	}
	if cap(ls.toks) == 0 && len(token) <= len(ls.tok0) {
		ls.toks = ls.tok0[:0]
	}
	if i == len(ls.ents) {
		ls.toks = append(ls.toks, token...)
		ls.ents = append(ls.ents, lease{exp: exp, end: len(ls.toks)})
		return
	}
	k := len(token)
	ls.toks = append(ls.toks, token...) // grow by k
	copy(ls.toks[start+k:], ls.toks[start:len(ls.toks)-k])
	copy(ls.toks[start:], token)
	ls.ents = append(ls.ents, lease{})
	copy(ls.ents[i+1:], ls.ents[i:])
	ls.ents[i] = lease{exp: exp, end: start + k}
	for j := i + 1; j < len(ls.ents); j++ {
		ls.ents[j].end += k
	}
}

// Held returns the number of live leases at now.
func (ls *Leases) Held(now int64) int64 {
	var n int64
	for _, e := range ls.ents {
		if e.exp > now {
			n++
		}
	}
	return n
}

// Acquire decides whether token may hold one of limit leases at now. A
// token that already holds a live lease is always admitted (its lease is
// extended). It does not change the state; Apply does. It does not retain
// token.
func (ls *Leases) Acquire(now, lease, limit int64, token []byte) Decision {
	d := Decision{Limit: limit, RetryAfter: -1}
	var held int64
	var soonest, latest int64 = math.MaxInt64, now
	for _, e := range ls.ents {
		if e.exp > now {
			held++
			soonest = min(soonest, e.exp)
			latest = max(latest, e.exp)
		}
	}
	i, mine := ls.find(token)
	mine = mine && ls.ents[i].exp > now
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
// ones. It returns the instant in ns after which no lease is live. It
// copies token: the caller may reuse it.
func (ls *Leases) Apply(now, lease int64, token []byte) (expireAt int64) {
	exp := now + lease
	if i, ok := ls.find(token); ok {
		ls.ents[i].exp = max(ls.ents[i].exp, exp)
	} else if exp > now { // a lease that is not live would be pruned at once
		ls.insert(i, token, exp)
	}
	return ls.prune(now)
}

// Release ends token's lease and reports whether it held a live one. It
// returns the instant after which no lease is live (now if none is).
func (ls *Leases) Release(now int64, token []byte) (released bool, expireAt int64) {
	if i, ok := ls.find(token); ok {
		released = ls.ents[i].exp > now
		ls.ents[i].exp = math.MinInt64 // not live at any now: prune drops it
	}
	return released, ls.prune(now)
}

// prune drops the leases that are not live at now, compacting ents and
// toks (and shrinking them when mostly empty), and returns the instant
// after which no lease is live (now if none is).
func (ls *Leases) prune(now int64) int64 {
	latest := now
	w, wend, start := 0, 0, 0
	for r, e := range ls.ents {
		s := start
		start = e.end
		if e.exp <= now {
			continue
		}
		latest = max(latest, e.exp)
		if w != r {
			wend += copy(ls.toks[wend:], ls.toks[s:e.end])
			ls.ents[w] = lease{exp: e.exp, end: wend}
		} else {
			wend = e.end
		}
		w++
	}
	if w == len(ls.ents) {
		return latest
	}
	ls.ents, ls.toks = ls.ents[:w], ls.toks[:wend]
	// Give memory back when at most a quarter of it is used, so it stays
	// proportional to the leases held rather than to the most ever held.
	if c := cap(ls.ents); c > 8 && 4*w <= c {
		ls.ents = append([]lease(nil), ls.ents...)
	}
	if c := cap(ls.toks); c > 64 && 4*wend <= c {
		ls.toks = append([]byte(nil), ls.toks...)
	}
	return latest
}

// Tokens returns the live tokens at now (for inspection), in increasing
// order; nil if there are none.
func (ls *Leases) Tokens(now int64) []string {
	var out []string
	for i, e := range ls.ents {
		if e.exp > now {
			out = append(out, string(ls.token(i)))
		}
	}
	return out
}

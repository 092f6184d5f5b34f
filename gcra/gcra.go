package gcra

import (
	"errors"
	"math"
)

const (
	nsPerMicrosecond = 1_000
	nsPerMillisecond = 1_000_000
	nsPerSecond      = 1_000_000_000
)

// Params are CL.THROTTLE's integer arguments as parsed (i64), with no range
// checks: negative, zero and huge values are all valid input and go through
// the wrapping and saturating arithmetic described in the package doc. The
// zero value is a zero rate, which Decide refuses with ErrZeroRate.
type Params struct {
	// MaxBurst is the number of requests allowed at once on top of the
	// steady rate; the limit is MaxBurst+1.
	MaxBurst int64
	// Count is the number of requests allowed per Period.
	Count int64
	// Period is the length of the rate's period, in seconds.
	Period int64
	// PeriodNS, when not zero, is the period in nanoseconds and replaces
	// Period (cellserver's own commands accept periods such as 250ms).
	// The emission interval is then float64(PeriodNS)/float64(Count),
	// truncated, which for whole seconds equals redis-cell's arithmetic.
	PeriodNS int64
	// Quantity is the cost of this request in units of the rate: 1 for one
	// request, 0 to peek, negative to refund. CL.THROTTLE's default of 1 is
	// applied by the caller; the zero value here means a peek.
	Quantity int64
}

// Result is the decision for one request: the five integers of the
// CL.THROTTLE reply, the same two durations in milliseconds, and the state
// the caller must store.
//
// All durations are relative to the instant passed to Decide. A Result is a
// plain value; Decide returns the zero Result with its error.
type Result struct {
	// Limited reports whether the request was refused (reply field 1).
	Limited bool
	// Limit is MaxBurst+1, wrapping (reply field 2): the number of requests
	// that may be made at once. It can be 0 or negative.
	Limit int64
	// Remaining is how many more requests of quantity 1 the bucket holds
	// (reply field 3). It is computed from whole microseconds and can
	// exceed Limit, be math.MaxInt64, or be negative.
	Remaining int64
	// RetryAfter is how long until this request would be allowed, in whole
	// seconds by the secs() rule (see Seconds) (reply field 4). It is -1
	// when the request was allowed and when it can never be allowed
	// (Quantity*emission interval > delay variation tolerance).
	RetryAfter int64
	// ResetAfter is how long until the TAT, in whole seconds by the secs()
	// rule (reply field 5): the new TAT when allowed, the stored one when
	// limited. On an absent key it is 0 for a limited request and for a
	// peek; a limited request on a TAT already past gets a negative value.
	ResetAfter int64
	// RetryAfterMillis is the RetryAfter duration in milliseconds, rounded
	// toward +Inf; -1 when RetryAfter is -1.
	RetryAfterMillis int64
	// ResetAfterMillis is the ResetAfter duration in milliseconds, rounded
	// toward +Inf (so negative values are truncated toward zero).
	ResetAfterMillis int64

	// Store is true when the request was allowed (!Limited): the caller
	// must store NewTAT, replacing the old value and its TTL. A limited
	// request writes nothing and leaves the TTL alone. Peeks (Quantity 0)
	// and refunds are allowed requests, so they store too.
	Store bool
	// NewTAT is the new theoretical arrival time mod 2^64, in nanoseconds
	// since the Unix epoch: the value redis-cell writes. A TAT before 1970
	// wraps to a huge value (read back as ~year 2554) and vice versa.
	// Zero unless Store.
	NewTAT uint64
	// TTLMillis is trunc((new TAT - now) / 1 ms), toward zero; zero unless
	// Store. What the caller does with it:
	//   - >= 0: the key expires in TTLMillis ms (0 means already expired);
	//   - == -1: the key persists with no TTL;
	//   - < -1: redis-cell still writes NewTAT with no TTL, but replies
	//     "Error while setting key expire" instead of the five integers.
	TTLMillis int64
}

// ErrZeroRate is returned by Decide when the emission interval is 0 ns: a
// count or period of 0, or |period*10^9 / count| < 1. It is checked before
// the stored state is looked at.
var ErrZeroRate = errors.New("gcra: zero rates are not supported")

// EmissionInterval returns the emission interval of count requests per
// period seconds, in nanoseconds: the time between two requests on the
// nominal, equally spaced schedule, or how often a leaky bucket leaks one
// unit. It is period*10^9 / count, computed exactly as redis-cell does:
// the exact product rounded once to float64, divided by float64(count), and
// truncated toward zero with saturation at the int64 range. It is negative
// when exactly one of count and period is, and 0 (a zero rate) when either
// is 0 or the quotient is under 1 ns.
func EmissionInterval(count, period int64) int64 {
	if count == 0 || period == 0 {
		return 0
	}
	p := mulInt64(period, nsPerSecond)
	return satTrunc(p.float64() / float64(count))
}

// EmissionIntervalNS returns p's emission interval in ns (Period or
// PeriodNS over Count, as Decide computes it); 0 is a zero rate, which
// Decide refuses with ErrZeroRate.
func (p Params) EmissionIntervalNS() int64 { return p.emissionInterval() }

func (p *Params) emissionInterval() int64 {
	if p.PeriodNS == 0 {
		return EmissionInterval(p.Count, p.Period)
	}
	if p.Count == 0 {
		return 0
	}
	return satTrunc(float64(p.PeriodNS) / float64(p.Count))
}

// Decide applies one request at instant now to the stored TAT and returns
// the decision. now is in nanoseconds since the Unix epoch; tat is the
// stored value (nanoseconds since the Unix epoch, as an unsigned number)
// and is only read when exists is true. Decide stores nothing: when
// Result.Store is true the caller writes Result.NewTAT with the TTL given
// by Result.TTLMillis.
//
// The only error is ErrZeroRate. Decide does not allocate and is safe for
// concurrent use.
func Decide(now int64, tat uint64, exists bool, p Params) (Result, error) {
	ei := p.emissionInterval()
	if ei == 0 {
		return Result{}, ErrZeroRate
	}
	limit := p.MaxBurst + 1 // wraps
	dvt := ei * limit       // delay variation tolerance, ns; wraps
	inc := ei * p.Quantity  // TAT increment, ns; wraps

	t0 := i128FromInt64(now)
	old := t0 // an absent key behaves as a TAT of now
	if exists {
		old = i128FromUint64(tat)
	}
	// The new TAT counts from now when the old one is in the past: unused
	// allowance does not accumulate beyond the bucket.
	var newTAT i128
	if t0.cmp(old) > 0 {
		newTAT = t0.add(i128FromInt64(inc))
	} else {
		newTAT = old.add(i128FromInt64(inc))
	}
	// The request is allowed once now reaches new TAT - dvt.
	allowAt := newTAT.sub(i128FromInt64(dvt))
	diff := t0.sub(allowAt)

	r := Result{Limit: limit, RetryAfter: -1, RetryAfterMillis: -1}
	var ttl i128 // time from now to the TAT that stays stored, ns
	if diff.isNeg() {
		r.Limited = true
		if inc <= dvt { // otherwise the request can never fit the bucket
			retry := diff.neg()
			r.RetryAfter = secs(retry)
			r.RetryAfterMillis = millisCeil(retry)
		}
		ttl = old.sub(t0)
	} else {
		ttl = newTAT.sub(t0)
		r.Store = true
		r.NewTAT = newTAT.lo // mod 2^64
		ms, _ := ttl.quoRem(nsPerMillisecond)
		r.TTLMillis = ms.int64()
	}

	// remaining = the room left in the bucket (dvt - ttl) in emission
	// intervals, both counted in whole microseconds, divided as float64.
	next := i128FromInt64(dvt).sub(ttl)
	if next.cmp(i128FromInt64(ei).neg()) > 0 {
		nextMicros, _ := next.quoRem(nsPerMicrosecond)
		r.Remaining = satTrunc(nextMicros.float64() / float64(ei/nsPerMicrosecond))
	}
	r.ResetAfter = secs(ttl)
	r.ResetAfterMillis = millisCeil(ttl)
	return r, nil
}

// Seconds converts a duration of ns nanoseconds to whole seconds with
// redis-cell's secs() rule (Duration::as_seconds_f64() as i64, plus one if
// subsec_milliseconds() > 0):
//
//	s = trunc(ns / 10^9)         // whole seconds, toward zero
//	n = ns - s*10^9              // nanoseconds, with the sign of ns
//	r = sat_trunc(float64(s) + float64(n)/1e9)
//	if trunc(n / 10^6) > 0 { r++ }
//
// So it rounds up only when the fraction holds at least one whole
// millisecond (1.0005 s → 1, 1.001 s → 2, 0.999 s → 1), truncates negative
// durations toward zero (-1.5 s → -1), and maps -1 s to exactly -1. Decide
// applies the same rule to durations beyond the int64 range.
func Seconds(ns int64) int64 { return secs(i128FromInt64(ns)) }

// secs is Seconds on a 128-bit duration in ns. The duration must be under
// 2^63 s (a Rust time::Duration), which every value Decide builds is.
func secs(d i128) int64 {
	q, n := d.quoRem(nsPerSecond)
	s := q.int64()
	// For s >= 2^24 and n within a few ns of 1 s the float64 sum rounds up
	// to s+1 and the result becomes s+2: that is redis-cell's answer too.
	r := satTrunc(float64(s) + float64(n)/nsPerSecond)
	if n/nsPerMillisecond > 0 {
		r++
	}
	return r
}

// millisCeil returns d ns in milliseconds rounded toward +Inf: up for
// positive durations, toward zero for negative ones.
func millisCeil(d i128) int64 {
	q, rem := d.quoRem(nsPerMillisecond)
	ms := q.int64()
	if rem > 0 {
		ms++
	}
	return ms
}

// satTrunc converts f to int64 as Rust's `f as i64` does: truncation toward
// zero, saturating at the int64 range, NaN to 0. Go's int64(f) is
// implementation-defined outside the range, so the ends are explicit.
func satTrunc(f float64) int64 {
	switch {
	case f != f:
		return 0
	case f >= 0x1p63:
		return math.MaxInt64
	case f <= -0x1p63:
		return math.MinInt64
	}
	return int64(f)
}

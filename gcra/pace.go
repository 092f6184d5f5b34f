package gcra

import (
	"errors"
	"math"
)

// MaxPaceSpan bounds the durations Pace takes: the delay variation
// tolerance ((MaxBurst+1) emission intervals) and MaxWait are each at most
// 2^62 ns (about 146 years), so that a booked TAT stays below 2^64 ns.
const MaxPaceSpan = int64(1) << 62

// PaceParams are the arguments of one pacing request (CL.PACE). Unlike
// Params they are range-checked: see ErrPaceArgs.
type PaceParams struct {
	// MaxBurst is the number of requests allowed at once on top of the
	// steady rate, >= 0; the limit is MaxBurst+1.
	MaxBurst int64
	// Count requests per PeriodNS nanoseconds, both >= 1; the emission
	// interval is PeriodNS/Count as Params computes it, at least 1 ns
	// (else ErrZeroRate).
	Count, PeriodNS int64
	// Quantity is the cost of this request, >= 1.
	Quantity int64
	// MaxWait is the longest the caller accepts to wait for its turn, in
	// ns, in [0, MaxPaceSpan]. 0 admits exactly what Decide would.
	MaxWait int64
}

// PaceResult is the decision for one pacing request. Durations are in ns
// from the instant passed to Pace.
type PaceResult struct {
	// Limited reports whether the request was refused (nothing booked).
	Limited bool
	// Limit is MaxBurst+1.
	Limit int64
	// Remaining is how many more requests of quantity 1 would go at once
	// after this decision: the room left in the bucket in whole emission
	// intervals, never negative (0 while turns are booked ahead).
	Remaining int64
	// Wait, when admitted, is how long the caller must wait before acting:
	// 0 when it may go now, never more than MaxWait. When limited, it is
	// how long until the same request would go at once (Decide's retry
	// time), or -1 when it never can (Quantity > MaxBurst+1). It
	// saturates at math.MaxInt64 (only for stored TATs beyond 2262).
	Wait int64
	// ResetAfter is how long until the TAT (the new one when admitted,
	// the stored one when limited), when the bucket is empty again; 0 if
	// that is already past. Saturates at math.MaxInt64.
	ResetAfter int64

	// Store is true when admitted: the caller stores NewTAT (nanoseconds
	// since the Unix epoch, as Decide's) and keeps the key until
	// ExpireAtMillis, the new TAT in ms since the epoch rounded up.
	Store          bool
	NewTAT         uint64
	ExpireAtMillis int64
}

// ErrPaceArgs is returned by Pace for arguments outside PaceParams'
// ranges.
var ErrPaceArgs = errors.New("gcra: pace arguments out of range")

// Pace decides a pacing request at instant now (ns since the Unix epoch)
// against the stored TAT (read only when exists), which CL.THROTTLE shares:
// GCRA with booking ahead.
//
// As in Decide, the request's new TAT is max(TAT, now) + Quantity emission
// intervals and its turn is the new TAT minus the delay variation
// tolerance. A turn at or before now goes at once (Wait 0); a turn at most
// MaxWait after now is admitted with Wait = turn - now; both book the new
// TAT, so the next request's turn is at least its own Quantity emission
// intervals later. A turn further than MaxWait is refused and nothing is
// booked. A request that can never fit the bucket (Quantity > MaxBurst+1)
// is refused with Wait -1, whatever MaxWait is.
//
// Pace does not allocate and is safe for concurrent use.
func Pace(now int64, tat uint64, exists bool, p PaceParams) (PaceResult, error) {
	if p.MaxBurst < 0 || p.Count < 1 || p.PeriodNS < 1 || p.Quantity < 1 || p.MaxWait < 0 || p.MaxWait > MaxPaceSpan {
		return PaceResult{}, ErrPaceArgs
	}
	// The emission interval exactly as Decide computes it from PeriodNS,
	// so that CL.PACE and CL.THROTTLE read a shared TAT alike.
	ei := (&Params{Count: p.Count, PeriodNS: p.PeriodNS}).emissionInterval()
	if ei == 0 {
		return PaceResult{}, ErrZeroRate
	}
	if p.MaxBurst >= MaxPaceSpan/ei { // (MaxBurst+1)*ei > MaxPaceSpan
		return PaceResult{}, ErrPaceArgs
	}
	limit := p.MaxBurst + 1
	dvt := ei * limit // <= MaxPaceSpan
	inc := mulInt64(ei, p.Quantity)

	t0 := i128FromInt64(now)
	old := t0
	if exists {
		old = i128FromUint64(tat)
	}
	start := old
	if t0.cmp(old) > 0 {
		start = t0
	}
	newTAT := start.add(inc)
	wait := newTAT.sub(i128FromInt64(dvt)).sub(t0) // turn - now

	r := PaceResult{Limit: limit}
	var ttl i128
	switch {
	case inc.cmp(i128FromInt64(dvt)) > 0:
		r.Limited, r.Wait = true, -1
		ttl = old.sub(t0)
	case wait.cmp(i128FromInt64(p.MaxWait)) > 0:
		r.Limited, r.Wait = true, sat(wait)
		ttl = old.sub(t0)
	default:
		if !wait.isNeg() {
			r.Wait = wait.int64() // <= MaxWait
		}
		ttl = newTAT.sub(t0)
		r.Store = true
		r.NewTAT = newTAT.lo // < 2^64 for now < 2^63: see MaxPaceSpan
		ms, rem := newTAT.quoRem(nsPerMillisecond)
		r.ExpireAtMillis = sat(ms)
		if rem > 0 && r.ExpireAtMillis < math.MaxInt64 {
			r.ExpireAtMillis++
		}
	}
	if ttl.isNeg() {
		ttl = i128{}
	}
	r.ResetAfter = sat(ttl)
	if room := i128FromInt64(dvt).sub(ttl); !room.isNeg() {
		q, _ := room.quoRem(uint64(ei))
		r.Remaining = q.int64() // <= limit
	}
	return r, nil
}

// sat returns a clamped to the int64 range.
func sat(a i128) int64 {
	switch {
	case a.cmp(i128FromInt64(math.MaxInt64)) > 0:
		return math.MaxInt64
	case a.cmp(i128FromInt64(math.MinInt64)) < 0:
		return math.MinInt64
	}
	return a.int64()
}

// Package gcra is the arithmetic of CL.THROTTLE: the generic cell rate
// algorithm (GCRA) exactly as redis-cell 0.5.0 computes it, down to integer
// wrapping, float saturation and rounding.
//
// A rate of Count requests per Period seconds gives the emission interval,
// Period/Count in nanoseconds: the spacing of requests on the nominal,
// equally spaced schedule, or how often a leaky bucket leaks one unit (see
// EmissionInterval).
//
// The theoretical arrival time (TAT) is the instant at which the bucket
// would be empty again if no more requests came: each allowed request of
// Quantity units pushes it Quantity emission intervals further (the
// increment), counting from now if the TAT is already in the past. It is
// the only state, stored as nanoseconds since the Unix epoch.
//
// The delay variation tolerance (DVT) is how far requests may run ahead of
// the nominal schedule, the size of the bucket: limit emission intervals,
// where limit = MaxBurst+1 is the number of requests allowed at once. A
// request is allowed when the new TAT minus the DVT is not after now;
// otherwise it is limited and nothing changes. Along with the decision
// Decide reports how many more single requests fit (Remaining), when this
// one would fit (RetryAfter) and when the bucket empties (ResetAfter).
//
// The package is pure. It has no clock, no I/O, no locks and no state:
// Decide takes the current instant and the stored TAT as arguments and
// returns the decision together with the new TAT for the caller to store.
// Tests and replays therefore step through explicit instants.
//
// Pace (CL.PACE) is the same algorithm booking ahead on the same TAT: a
// request whose allow-at instant (its turn) is at most MaxWait after now
// is admitted with that wait and its new TAT stored, so that the next
// request's turn is at least its own increment later; a later turn is
// refused and books nothing. Unlike Decide it checks its arguments
// (ErrPaceArgs) instead of wrapping, since no redis-cell behaviour is to
// be reproduced; MaxWait 0 admits and books exactly as Decide.
//
// # Exactness
//
// Integer arithmetic on int64 wraps, as in redis-cell's release builds,
// which have no overflow checks: the limit (MaxBurst+1), the DVT
// (emission interval × limit) and the increment (emission interval ×
// Quantity). So MaxBurst = math.MaxInt64 gives a limit of math.MinInt64,
// and a Quantity of -(2^63-1) at 1 per second is an increment of +1 s.
//
// Conversions from float64 to int64 saturate: +Inf and values >= 2^63
// become math.MaxInt64, -Inf and values <= -2^63 math.MinInt64, NaN 0. A
// huge period gives an emission interval of math.MaxInt64 ns (292 years),
// and an emission interval under 1 µs gives a Remaining of math.MaxInt64.
//
// Instants and the durations between them (TAT, new TAT, allow-at, TTL,
// the room left in the bucket) are computed in 128 bits: a stored TAT is
// any uint64 and the increment and DVT reach ±2^63 ns, which overflows
// int64 near today's 1.8e18 ns. Only the stored value is reduced mod 2^64,
// so a TAT before 1970 is written as a huge number.
//
// Zero, negative and huge arguments are all accepted. The only refusal is
// a zero emission interval (ErrZeroRate). A negative count or period makes
// the emission interval negative, a negative Quantity is a refund, and a
// Quantity of 0 is a peek that still counts as allowed and stores.
//
// # Rounding
//
// The emission interval is Period×10^9 computed exactly, rounded once to
// float64, divided by float64(Count) and truncated toward zero.
//
// Remaining is the room left in the bucket divided by the emission
// interval, both first truncated to whole microseconds, divided as
// float64 and truncated. An emission interval that is not a whole number
// of microseconds therefore makes Remaining exceed the limit (3333 ns
// counts as 3 µs).
//
// RetryAfter and ResetAfter use redis-cell's secs() rule (see Seconds):
// truncate to whole seconds, then add one if the fraction holds at least
// one whole millisecond. 1.0005 s is 1, 1.001 s is 2, 0.000073 s is 0 and
// -1.5 s is -1. The Millis variants round the same durations up to whole
// milliseconds instead, and the TTL the caller sets (TTLMillis) is
// truncated toward zero.
package gcra

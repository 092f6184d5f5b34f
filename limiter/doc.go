// Package limiter holds cellserver's rate-limit algorithms other than GCRA
// (which is package gcra): fixed window, sliding-window counter, sliding
// log and concurrency leases.
//
// # Model
//
// Every algorithm is a pure function of (state, now, request): no clock, no
// I/O, no locks. now is in nanoseconds since the Unix epoch; periods and
// leases are in nanoseconds. A Decide function reads the state and returns a
// Decision without changing anything, so a caller can evaluate several
// limits and apply none of them (CL.ALL). For the scalar kinds (fixed and
// sliding windows) Decide also returns the new state; for the kinds with
// variable state (sliding log, leases) an Apply method performs the change
// Decide described.
//
// Every Decision carries the same five fields as CL.THROTTLE's reply:
// limited, limit, remaining, retry after and reset after, the durations in
// nanoseconds (-1 for "not applicable"), so that one client-side parser
// serves every command.
//
// # Quantities
//
// A quantity of 0 reports the state without consuming (and never limits).
// A quantity larger than the limit can never be admitted: it is limited
// with RetryAfter -1. A negative quantity is a refund for the fixed and
// sliding windows (the count goes down, never below zero) and an error for
// the sliding log.
//
// # Bounds
//
// Callers validate arguments with CheckLimit and CheckPeriod: limits must be
// positive, periods positive and at most MaxPeriod, so that no time
// computation can overflow an int64 before the year 2200.
// A concurrency limiter's limit is also at most MaxLeases, which bounds the
// leases a key holds and so the work of each call on it.
package limiter

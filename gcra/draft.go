package gcra

import (
	"errors"
	"math"
)

// Redis's draft GCRA command
//
//	GCRA key max-burst tokens-per-period period [TOKENS n]
//
// as implemented in redis/redis src/gcra.c at commit
// 10040538b194f52abcb8032dfb60cf10ea7e3bb0 (the draft built in Redis
// unstable in 2026 and held out of 8.8). It is the same GCRA as CL.THROTTLE
// with other units and roundings: the TAT is kept in microseconds, "now" is
// the command's time in whole milliseconds times 1000, the emission interval
// is period*1e6/tokens-per-period rounded to the nearest microsecond (at
// least 1), and durations in the reply are rounded up to whole seconds.

// Errors of DecideDraft. The texts after "gcra: " are the draft's wire texts.
var (
	// ErrDraftPeriod: period is not > 0 and < 1e12 (or is NaN).
	ErrDraftPeriod = errors.New("gcra: period must be > 0 and < 1e12")
	// ErrDraftTokensOverflow: emission interval * TOKENS, or the new TAT,
	// does not fit in an int64 of microseconds.
	ErrDraftTokensOverflow = errors.New("gcra: GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and TOKENS would cause an overflow")
	// ErrDraftBurstOverflow: emission interval * (max-burst+1) does not fit.
	ErrDraftBurstOverflow = errors.New("gcra: GCRA limiting uses microsecond accuracy. Combination of period, tokens_per_period and max_burst would cause an overflow")
	// ErrDraftNonPositiveTAT: the stored TAT is <= 0.
	ErrDraftNonPositiveTAT = errors.New("gcra: Negative time is invalid value for GCRA")
	// ErrDraftArgs: an argument outside the ranges the command layer
	// checks (max-burst < 0, tokens-per-period < 1, tokens < 1).
	ErrDraftArgs = errors.New("gcra: argument out of range")
)

// DraftParams are the draft GCRA command's arguments as parsed.
type DraftParams struct {
	MaxBurst        int64   // max-burst, >= 0
	TokensPerPeriod int64   // tokens-per-period, >= 1
	Period          float64 // period in seconds, > 0 and < 1e12
	Tokens          int64   // TOKENS n, >= 1 (1 when absent)
}

// DraftResult is the draft's reply and the state to store.
type DraftResult struct {
	Limited        bool  // reply field 1
	MaxTokens      int64 // reply field 2: max-burst+1 (max-burst when it is MaxInt64)
	Available      int64 // reply field 3
	RetryAfter     int64 // reply field 4: seconds rounded up, -1 when allowed or never possible
	FullBurstAfter int64 // reply field 5: seconds rounded up
	// Store is true when the request was allowed: the caller stores NewTAT
	// (microseconds since the epoch) with the expiry ExpireMS (ms since the
	// epoch).
	Store    bool
	NewTAT   int64
	ExpireMS int64
}

// DraftEmissionInterval is the draft's emission interval in microseconds:
// period*1e6/tokensPerPeriod rounded half up, at least 1.
func DraftEmissionInterval(period float64, tokensPerPeriod int64) int64 {
	e := int64(period*1000000./float64(tokensPerPeriod) + 0.5)
	if e == 0 {
		e = 1
	}
	return e
}

// DecideDraft decides one GCRA call at nowMS (the command's time in ms since
// the epoch) on a key holding tatUS (microseconds; ignored when exists is
// false). It follows gcraCommand in src/gcra.c step by step.
func DecideDraft(nowMS int64, tatUS int64, exists bool, p DraftParams) (DraftResult, error) {
	if p.MaxBurst < 0 || p.TokensPerPeriod < 1 || p.Tokens < 1 {
		return DraftResult{}, ErrDraftArgs
	}
	if !(p.Period > 0 && p.Period < 1e12) {
		return DraftResult{}, ErrDraftPeriod
	}
	maxBurst := p.MaxBurst
	if maxBurst < math.MaxInt64 {
		maxBurst++
	}
	now := nowMS * 1000
	tat := now
	if exists {
		if tatUS <= 0 {
			return DraftResult{}, ErrDraftNonPositiveTAT
		}
		tat = tatUS
	}
	emission := DraftEmissionInterval(p.Period, p.TokensPerPeriod)
	if emission > math.MaxInt64/p.Tokens {
		return DraftResult{}, ErrDraftTokensOverflow
	}
	if emission > math.MaxInt64/maxBurst {
		return DraftResult{}, ErrDraftBurstOverflow
	}
	variance := emission * maxBurst
	increment := emission * p.Tokens
	base := tat
	if now > tat {
		base = now
	}
	if math.MaxInt64-base < increment {
		return DraftResult{}, ErrDraftTokensOverflow
	}
	newTAT := base + increment
	allowAt := newTAT - variance
	diff := now - allowAt
	r := DraftResult{MaxTokens: maxBurst, RetryAfter: -1}
	var ttl int64
	if diff < 0 {
		r.Limited = true
		// A request costing more than the whole bucket can never be
		// allowed: retry_after stays -1.
		if increment <= variance {
			r.RetryAfter = int64(math.Ceil(float64(-diff) / 1000000.))
		}
		ttl = tat - now
	} else {
		ttl = newTAT - now
		r.Store = true
		r.NewTAT = newTAT
		// Rounded up to the next millisecond: the draft's tests (commit
		// 398547e68bf8f2905dbd54728673bf115b3648c8, "sub-millisecond TaT
		// does not expire key at current ms (PXAT ceil)") require it; the
		// gcra.c above still truncated.
		r.ExpireMS = newTAT / 1000
		if newTAT%1000 != 0 {
			r.ExpireMS++
		}
	}
	next := variance - ttl
	if next > -emission {
		r.Available = next / emission
	}
	r.FullBurstAfter = int64(math.Ceil(float64(ttl) / 1000000.))
	return r, nil
}

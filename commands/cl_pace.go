package commands

import (
	"errors"

	"github.com/cellserver/cellserver/gcra"
)

// CL.PACE key max_burst count period [quantity] [MAXWAIT d] [MS]
//
// GCRA with booking ahead (gcra.Pace) on CL.THROTTLE's state: a request
// whose turn comes within MAXWAIT (default 0) is admitted and its turn
// booked; the reply is CL.THROTTLE's five integers with field 4 the wait
// before acting (0: go now). A request whose turn is later is refused,
// booking nothing, field 4 then being the time until it would go at once
// (-1 if it never can). Durations are rounded up, to seconds or (MS) to
// milliseconds, so that waiting the reply's figure is never too short.
func cmdPace(x *ctx) {
	p, ms, msg := paceParams(x.args[2:])
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	lk, tat, exists, ok := x.gcraKey()
	if !ok {
		return
	}
	r, err := gcra.Pace(lk.now, tat, exists, p)
	switch {
	case errors.Is(err, gcra.ErrZeroRate):
		x.errorReply(msgPaceRate)
		return
	case err != nil:
		x.errorReply(msgPaceBurst)
		return
	}
	if r.Store && !x.storeGCRA(&lk, r.NewTAT, r.ExpireAtMillis) {
		return
	}
	x.decided(r.Limited, lk.k.key)
	x.tuple(tuple{r.Limited, r.Limit, r.Remaining, units(r.Wait, ms), units(r.ResetAfter, ms)})
}

// paceParams parses CL.PACE's arguments after the key: max_burst, count,
// period, an optional quantity, then MAXWAIT d and MS in any order, each
// at most once. It returns an error or noErr.
func paceParams(args [][]byte) (p gcra.PaceParams, ms bool, msg wireErr) {
	if len(args) < 3 {
		return p, false, errWrongArity("cl.pace")
	}
	var ok bool
	if p.MaxBurst, ok = parseRedisInt(args[0]); !ok || p.MaxBurst < 0 {
		return p, false, msgPaceMaxBurst
	}
	if p.Count, ok = parseRedisInt(args[1]); !ok || p.Count < 1 {
		return p, false, msgPaceCount
	}
	if p.PeriodNS, ok = parsePeriod(args[2]); !ok {
		return p, false, msgPeriod
	}
	p.Quantity = 1
	rest := args[3:]
	if len(rest) > 0 && !eqFold(rest[0], "maxwait") && !eqFold(rest[0], "ms") {
		if p.Quantity, ok = parseRedisInt(rest[0]); !ok || p.Quantity < 1 {
			return p, false, msgPaceQuantity
		}
		rest = rest[1:]
	}
	seenWait := false
	for len(rest) > 0 {
		switch {
		case eqFold(rest[0], "ms") && !ms:
			ms = true
			rest = rest[1:]
		case eqFold(rest[0], "maxwait") && !seenWait && len(rest) > 1:
			if p.MaxWait, ok = parseSpan(rest[1]); !ok {
				return p, false, msgPaceMaxWait
			}
			seenWait = true
			rest = rest[2:]
		default:
			return p, false, msgSyntax
		}
	}
	return p, ms, noErr
}

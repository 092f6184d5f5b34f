package commands

import (
	"time"
	"unicode/utf8"

	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/keyspace"
)

// CL.THROTTLE <key> <max_burst> <count per period> <period> [<quantity>]
//
// Exactly redis-cell 0.5.0: checks run in the module's order (UTF-8 of every
// argument, argument count, integers left to right, zero rate), then the key
// is read, gcra.Decide runs at one clock reading, and an allowed request
// stores the new TAT with the module's TTL rules. Where the module aborts
// the server (non-UTF-8 arguments, a key of another type, a stored string
// that is not a u64), cellserver replies with an error instead.
func cmdThrottle(x *ctx) {
	args := x.args
	for _, a := range args {
		if !utf8.Valid(a) {
			x.errorReply(msgCellBadUTF8)
			return
		}
	}
	if len(args) != 5 && len(args) != 6 {
		x.errorReply(msgCellUsage)
		return
	}
	p, msg := throttleParams(args[2:])
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	k := &x.keys[0]
	now := x.clockNS()
	nowMS := floorDiv(now, 1e6)
	v := k.lookup(nowMS)
	sv := limiterState(v, nowMS) // v, unless only its reservations live
	tat, msg := storedTAT(sv)
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	r, err := gcra.Decide(now, tat, sv != nil, p)
	if err != nil { // unreachable: the rate was checked above
		x.errorReply(msgCellZeroRate)
		return
	}
	if r.Store && v == nil && !x.s.ks.CanInsert() {
		x.oom()
		return
	}
	if r.Store {
		nv := keyspace.Value{Kind: keyspace.KindGCRA, N: r.NewTAT}
		if r.TTLMillis >= 0 {
			nv.Exp = nowMS + r.TTLMillis
		}
		keepReservations(v, &nv, now)
		k.replace(v, nv)
		if r.TTLMillis < -1 {
			// redis-cell has written the value already and SetExpire fails:
			// the key stays, without a TTL, and the client gets an error.
			x.errorReply(msgCellExpire)
			return
		}
	}
	x.decided(r.Limited, k.key)
	x.tuple(tuple{r.Limited, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter})
}

// storedTAT reads the TAT of a CL.THROTTLE key (0 when v is nil): a GCRA
// value, or a string holding a u64 as redis-cell reads it. Anything else
// gets an error text.
func storedTAT(v *keyspace.Value) (uint64, wireErr) {
	if v == nil {
		return 0, noErr
	}
	switch v.Kind {
	case keyspace.KindGCRA:
		return v.N, noErr
	case keyspace.KindString:
		n, ok := parseRustU64(v.Obj.([]byte))
		if !ok {
			return 0, msgCellBadStored
		}
		return n, noErr
	}
	return 0, msgWrongType
}

// throttleParams parses max_burst, count, period and the optional quantity
// in that order (the first bad one is reported verbatim), then rejects a
// zero rate, as redis-cell does; it returns an error or noErr.
func throttleParams(nums [][]byte) (gcra.Params, wireErr) {
	return gcraParams(nums, false)
}

// gcraParams is throttleParams; with durations (CL.PEEK) the period may
// also be a Go duration such as 250ms (Params.PeriodNS), and a bad one is
// reported as a bad integer, as redis-cell reports its argument.
func gcraParams(nums [][]byte, durations bool) (gcra.Params, wireErr) {
	var v [4]int64
	v[3] = 1
	var periodNS int64
	for i, a := range nums {
		n, ok := parseRustI64(a)
		if !ok && i == 2 && durations {
			if d, err := time.ParseDuration(string(a)); err == nil && d > 0 {
				periodNS, ok = int64(d), true
			}
		}
		if !ok {
			return gcra.Params{}, errCellParseInt(a)
		}
		v[i] = n
	}
	p := gcra.Params{MaxBurst: v[0], Count: v[1], Period: v[2], PeriodNS: periodNS, Quantity: v[3]}
	if p.EmissionIntervalNS() == 0 {
		return p, msgCellZeroRate // checked before the key is looked at
	}
	return p, noErr
}

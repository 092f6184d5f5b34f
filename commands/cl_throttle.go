package commands

import (
	"unicode/utf8"

	"github.com/cellserver/cellserver/gcra"
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
	lk, tat, exists, ok := x.gcraKey()
	if !ok {
		return
	}
	r, err := gcra.Decide(lk.now, tat, exists, p)
	if err != nil { // unreachable: the rate was checked above
		x.errorReply(msgCellZeroRate)
		return
	}
	if r.Store {
		exp := int64(0)
		if r.TTLMillis >= 0 {
			exp = lk.nowMS + r.TTLMillis
		}
		if !x.storeGCRA(&lk, r.NewTAT, exp) {
			return
		}
		if r.TTLMillis < -1 {
			// redis-cell has written the value already and SetExpire fails:
			// the key stays, without a TTL, and the client gets an error.
			x.errorReply(msgCellExpire)
			return
		}
	}
	if x.cl.extAudit != nil { // an Envoy rate limit rule's (cl_audit.go)
		x.extAudit(auditDecision{key: lk.k.key, limited: r.Limited, shadow: x.cl.extAudit.Shadow,
			remaining: r.Remaining, retry: r.RetryAfterMillis, quantity: p.Quantity})
	}
	x.decided(r.Limited, lk.k.key)
	x.tuple(tuple{r.Limited, r.Limit, r.Remaining, r.RetryAfter, r.ResetAfter})
}

// throttleParams parses max_burst, count, period and the optional quantity
// in that order (the first bad one is reported verbatim), then rejects a
// zero rate, as redis-cell does; it returns an error or noErr.
func throttleParams(nums [][]byte) (gcra.Params, wireErr) {
	return gcraParams(nums, false)
}

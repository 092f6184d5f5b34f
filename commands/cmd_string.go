package commands

import (
	"math"
	"strconv"

	"github.com/cellserver/cellserver/keyspace"
)

// The string commands (Redis's t_string.c): GET, SET and STRLEN. A
// CL.THROTTLE key reads as a string, its TAT in decimal (stringValue).

// stringValue returns the bytes GET shows for v, or false for a kind that
// is not a string to Redis clients.
func stringValue(v *keyspace.Value, scratch []byte) ([]byte, bool) {
	switch v.Kind {
	case keyspace.KindString:
		return v.Obj.([]byte), true
	case keyspace.KindGCRA:
		return strconv.AppendUint(scratch, v.N, 10), true
	}
	return nil, false
}

func cmdGet(x *ctx) {
	withString(x, func(b []byte, found bool) {
		if !found {
			x.null()
			return
		}
		x.bulk(b)
	})
}

// STRLEN key: the length of what GET would answer (a CL.THROTTLE key's TAT
// in decimal digits), 0 for a missing key, WRONGTYPE where GET says so.
func cmdStrlen(x *ctx) {
	withString(x, func(b []byte, found bool) { x.int(int64(len(b))) })
}

// withString looks up the key as GET reads it (counting a keyspace hit
// or miss) and calls reply, under the shard lock, with its string form (b
// is valid only during the call) or found false for a missing key. A key
// with no string form gets WRONGTYPE instead.
func withString(x *ctx, reply func(b []byte, found bool)) {
	v := x.keys[0].peek(x.clockMS())
	x.s.lookedUp(v != nil)
	if v == nil {
		reply(nil, false)
		return
	}
	b, ok := stringValue(v, x.cl.scratch.num[:0])
	if !ok {
		x.errorReply(msgWrongType)
		return
	}
	reply(b, true)
}

// SET key value [NX | XX] [GET] [EX seconds | PX milliseconds |
// EXAT unix-time-seconds | PXAT unix-time-milliseconds | KEEPTTL]
func cmdSet(x *ctx) {
	var opt struct {
		nx, xx, get, keepTTL bool
		expUnit              string // "", "ex", "px", "exat", "pxat"
		exp                  []byte // the last expiry argument, parsed after the options
	}
	args := x.args
	for i := 3; i < len(args); i++ {
		a := args[i]
		switch {
		case eqFold(a, "nx") && !opt.xx:
			opt.nx = true
		case eqFold(a, "xx") && !opt.nx:
			opt.xx = true
		case eqFold(a, "get"):
			opt.get = true
		case eqFold(a, "keepttl") && opt.expUnit == "":
			opt.keepTTL = true
		case (eqFold(a, "ex") || eqFold(a, "px") || eqFold(a, "exat") || eqFold(a, "pxat")) &&
			!opt.keepTTL && i+1 < len(args):
			// As Redis: the same unit may be repeated (the last one counts),
			// two different units are a syntax error.
			unit := string(lowerInto(x.cl.scratch.lower[:0], a))
			if opt.expUnit != "" && opt.expUnit != unit {
				x.errorReply(msgSyntax)
				return
			}
			opt.expUnit = unit
			opt.exp = args[i+1]
			i++
		default:
			x.errorReply(msgSyntax)
			return
		}
	}
	now := x.clockMS()
	var exp int64
	if opt.expUnit != "" {
		n, ok := parseRedisInt(opt.exp)
		if !ok {
			x.errorReply(msgNotInt)
			return
		}
		exp, ok = absoluteExpiry(opt.expUnit, n, now)
		if !ok {
			x.errorReply(errInvalidExpire("set"))
			return
		}
	}
	k := &x.keys[0]
	v := k.lookup(now)
	var old []byte
	if opt.get && v != nil {
		b, ok := stringValue(v, nil)
		if !ok {
			x.errorReply(msgWrongType)
			return
		}
		old = b
	}
	if (opt.nx && v != nil) || (opt.xx && v == nil) {
		if opt.get {
			x.bulkOrNull(old, v != nil)
		} else {
			x.null()
		}
		return
	}
	if opt.keepTTL && v != nil {
		exp = v.Exp
	}
	nv := keyspace.Value{Kind: keyspace.KindString, Obj: append([]byte(nil), args[2]...), Exp: exp}
	if !x.s.ks.CanReplace(v, nv) { // a new key, or a longer value
		x.oom()
		return
	}
	k.replace(v, nv)
	if opt.get {
		x.bulkOrNull(old, v != nil)
		return
	}
	x.ok()
}

func (x *ctx) bulkOrNull(b []byte, present bool) {
	if !present {
		x.null()
		return
	}
	x.bulk(b)
}

// absoluteExpiry turns SET's or EXPIRE's argument into an absolute time in
// ms, rejecting what Redis rejects: non-positive values for SET, and values
// whose ms form overflows.
func absoluteExpiry(unit string, n, now int64) (int64, bool) {
	if n <= 0 {
		return 0, false
	}
	switch unit {
	case "ex", "exat":
		if n > math.MaxInt64/1000 {
			return 0, false
		}
		n *= 1000
	}
	switch unit {
	case "ex", "px":
		if n > math.MaxInt64-now {
			return 0, false
		}
		n += now
	}
	return n, true
}

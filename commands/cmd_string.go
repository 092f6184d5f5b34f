package commands

import (
	"math"
	"strconv"

	"github.com/cellserver/cellserver/keyspace"
)

// The string commands (Redis's t_string.c): GET, SET, STRLEN, SETNX,
// SETEX, PSETEX, GETEX, GETDEL, GETSET, MGET, MSET, MSETNX and APPEND (the
// counters are in cmd_counter.go). A CL.THROTTLE key reads as a string,
// its TAT in decimal (stringValue); a command that writes a string over
// it leaves a string. Every write goes through rkey.replace or rkey.del,
// as SET's does: the journal (persistence, replicas), WATCH and client
// tracking see it, and a write that grows memory past maxmemory answers
// OOM (Keyspace.CanReplace).

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

// SETNX key value: SET NX answering 1 or 0.
func cmdSetNX(x *ctx) {
	k := &x.keys[0]
	v := k.lookup(x.clockMS())
	if v != nil {
		x.int(0)
		return
	}
	if x.storeString(k, nil, append([]byte(nil), x.args[2]...), 0) {
		x.int(1)
	}
}

func cmdSetEx(x *ctx)  { setExGeneric(x, "setex", "ex") }
func cmdPSetEx(x *ctx) { setExGeneric(x, "psetex", "px") }

// SETEX key seconds value and PSETEX key milliseconds value.
func setExGeneric(x *ctx, name, unit string) {
	n, ok := parseRedisInt(x.args[2])
	if !ok {
		x.errorReply(msgNotInt)
		return
	}
	now := x.clockMS()
	exp, ok := absoluteExpiry(unit, n, now)
	if !ok {
		x.errorReply(errInvalidExpire(name))
		return
	}
	k := &x.keys[0]
	v := k.lookup(now)
	if x.storeString(k, v, append([]byte(nil), x.args[3]...), exp) {
		x.ok()
	}
}

// GETEX key [EX seconds | PX milliseconds | EXAT unix-time-seconds |
// PXAT unix-time-milliseconds | PERSIST]: GET, then set or remove the
// TTL; an EXAT/PXAT time already past deletes the key, as in Redis.
func cmdGetEx(x *ctx) {
	var opt struct {
		persist bool
		expUnit string // "", "ex", "px", "exat", "pxat"
		exp     []byte
	}
	args := x.args
	for i := 2; i < len(args); i++ {
		a := args[i]
		switch {
		case eqFold(a, "persist") && opt.expUnit == "":
			opt.persist = true
		case (eqFold(a, "ex") || eqFold(a, "px") || eqFold(a, "exat") || eqFold(a, "pxat")) &&
			!opt.persist && i+1 < len(args):
			unit := string(lowerInto(x.cl.scratch.lower[:0], a))
			if opt.expUnit != "" && opt.expUnit != unit {
				x.errorReply(msgSyntax)
				return
			}
			opt.expUnit, opt.exp = unit, args[i+1]
			i++
		default:
			x.errorReply(msgSyntax)
			return
		}
	}
	now := x.clockMS()
	k := &x.keys[0]
	v := k.lookup(now)
	x.s.lookedUp(v != nil)
	if v == nil {
		x.null()
		return
	}
	b, ok := stringValue(v, x.cl.scratch.num[:0])
	if !ok {
		x.errorReply(msgWrongType)
		return
	}
	var exp int64
	if opt.expUnit != "" {
		n, ok := parseRedisInt(opt.exp)
		if !ok {
			x.errorReply(msgNotInt)
			return
		}
		if exp, ok = absoluteExpiry(opt.expUnit, n, now); !ok {
			x.errorReply(errInvalidExpire("getex"))
			return
		}
	}
	x.bulk(b)
	switch {
	case (opt.expUnit == "exat" || opt.expUnit == "pxat") && exp <= now:
		k.del(now)
	case opt.expUnit != "":
		v.Exp = exp
		k.sh.Changed(k.key, v)
	case opt.persist && v.Exp != 0:
		v.Exp = 0
		k.sh.Changed(k.key, v)
	}
}

// GETDEL key: GET, then delete the key.
func cmdGetDel(x *ctx) {
	now := x.clockMS()
	k := &x.keys[0]
	v := k.lookup(now)
	x.s.lookedUp(v != nil)
	if v == nil {
		x.null()
		return
	}
	b, ok := stringValue(v, x.cl.scratch.num[:0])
	if !ok {
		x.errorReply(msgWrongType)
		return
	}
	x.bulk(b)
	k.del(now)
}

// GETSET key value: SET (which drops the TTL) answering the old value.
func cmdGetSet(x *ctx) {
	k := &x.keys[0]
	v := k.lookup(x.clockMS())
	x.s.lookedUp(v != nil)
	var old []byte
	if v != nil {
		b, ok := stringValue(v, x.cl.scratch.num[:0])
		if !ok {
			x.errorReply(msgWrongType)
			return
		}
		old = b
	}
	nv := keyspace.Value{Kind: keyspace.KindString, Obj: append([]byte(nil), x.args[2]...)}
	if !x.s.ks.CanReplace(v, nv) {
		x.oom()
		return
	}
	x.bulkOrNull(old, v != nil) // before replace: old may be v's bytes
	k.replace(v, nv)
}

// MGET key [key ...]: a nil for a missing key or one that is not a string.
func cmdMGet(x *ctx) {
	now := x.clockMS()
	x.array(len(x.keys))
	for i := range x.keys {
		v := x.keys[i].peek(now)
		x.s.lookedUp(v != nil)
		b, ok := []byte(nil), false
		if v != nil {
			b, ok = stringValue(v, x.cl.scratch.num[:0])
		}
		x.bulkOrNull(b, ok)
	}
}

func cmdMSet(x *ctx)   { msetGeneric(x, false) }
func cmdMSetNX(x *ctx) { msetGeneric(x, true) }

// MSET key value [key value ...] and MSETNX (nothing set, 0, if one key
// exists). Every key's shard is locked (the dispatcher), so the keys
// change together; past maxmemory, nothing is set unless no value grows.
func msetGeneric(x *ctx, nx bool) {
	if len(x.args)%2 == 0 {
		x.errorReply(errWrongArity(x.spec.Name))
		return
	}
	now := x.clockMS()
	fits := x.s.ks.CanInsert()
	for i := range x.keys {
		v := x.keys[i].lookup(now)
		if nx && v != nil {
			x.int(0)
			return
		}
		if !fits && !x.s.ks.CanReplace(v, keyspace.Value{Kind: keyspace.KindString, Obj: x.args[2*i+2]}) {
			x.oom()
			return
		}
	}
	for i := range x.keys {
		k := &x.keys[i]
		k.replace(k.lookup(now), keyspace.Value{Kind: keyspace.KindString, Obj: append([]byte(nil), x.args[2*i+2]...)})
	}
	if nx {
		x.int(1)
		return
	}
	x.ok()
}

// APPEND key value: the length after appending; the TTL is kept. The
// result may not exceed proto-max-bulk-len (Config.MaxStringLen).
func cmdAppend(x *ctx) {
	k := &x.keys[0]
	v := k.lookup(x.clockMS())
	add := x.args[2]
	if v == nil {
		if x.storeString(k, nil, append([]byte(nil), add...), 0) {
			x.int(int64(len(add)))
		}
		return
	}
	b, ok := stringValue(v, x.cl.scratch.num[:0])
	if !ok {
		x.errorReply(msgWrongType)
		return
	}
	if int64(len(b))+int64(len(add)) > x.s.maxStringLen {
		x.errorReply(msgStringTooLong)
		return
	}
	nb := make([]byte, 0, len(b)+len(add))
	nb = append(append(nb, b...), add...)
	if x.storeString(k, v, nb, v.Exp) {
		x.int(int64(len(nb)))
	}
}

package commands

import (
	"math"
	"math/big"
	"strconv"

	"github.com/cellserver/cellserver/keyspace"
)

// The string commands (Redis's t_string.c): GET, SET, STRLEN, SETNX,
// SETEX, PSETEX, GETEX, GETDEL, GETSET, MGET, MSET, MSETNX, APPEND, and
// the counters (below). A CL.THROTTLE key reads as a string, its TAT in
// decimal (stringValue); a command that writes a string over it leaves a
// string. Every write goes through rkey.replace or rkey.del,
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
		var ok bool
		if exp, ok = x.expiryArg(opt.expUnit, opt.exp, now, "set"); !ok {
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
	now := x.clockMS()
	exp, ok := x.expiryArg(unit, x.args[2], now, name)
	if !ok {
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
	k, v, b, ok := lookupString(x, now)
	if !ok {
		return
	}
	var exp int64
	if opt.expUnit != "" {
		var ok bool
		if exp, ok = x.expiryArg(opt.expUnit, opt.exp, now, "getex"); !ok {
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
	k, _, b, ok := lookupString(x, now)
	if !ok {
		return
	}
	x.bulk(b)
	k.del(now)
}

// lookupString looks up the first key for a command that reads it as a
// string and then changes it (GETEX, GETDEL): its value and string form
// (b valid during the command), or ok false once it has answered nil
// (no key) or WRONGTYPE.
func lookupString(x *ctx, now int64) (k *rkey, v *keyspace.Value, b []byte, ok bool) {
	k = &x.keys[0]
	v = k.lookup(now)
	x.s.lookedUp(v != nil)
	if v == nil {
		x.null()
		return k, nil, nil, false
	}
	if b, ok = stringValue(v, x.cl.scratch.num[:0]); !ok {
		x.errorReply(msgWrongType)
	}
	return k, v, b, ok
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
		if !x.c.Reserve(len(b) + 32) {
			return // over the output buffer limit: the connection closes
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

// The counters: INCR, DECR, INCRBY, DECRBY, INCRBYFLOAT, and Redis 8.8's
// INCREX. A counter is a string holding a
// number; a CL.THROTTLE key reads as the string of its TAT (stringValue),
// so INCR on one adds to the TAT and leaves a string holding the sum,
// which CL.THROTTLE reads back as a TAT, as a redis-cell key in Redis
// would behave. Every change goes through rkey.replace with the new
// value: the journal, and so persistence and replicas, receive the value
// (INCRBYFLOAT's exact digits, as Redis replicates it as a SET), and
// WATCH and client tracking see the change. The key's TTL is kept.

// storedInt reads v (nil: a missing key, 0) as Redis's
// getLongLongFromObject does, or returns the error to answer.
func storedInt(v *keyspace.Value, scratch []byte) (int64, wireErr) {
	if v == nil {
		return 0, noErr
	}
	b, ok := stringValue(v, scratch)
	if !ok {
		return 0, msgWrongType
	}
	n, ok := parseRedisInt(b)
	if !ok {
		return 0, msgNotInt
	}
	return n, noErr
}

// storedLongDouble reads v (nil: 0) as getLongDoubleFromObject does.
func storedLongDouble(v *keyspace.Value, scratch []byte) (*big.Float, wireErr) {
	if v == nil {
		return newLD(), noErr
	}
	b, ok := stringValue(v, scratch)
	if !ok {
		return nil, msgWrongType
	}
	f, ok := parseLongDouble(b)
	if !ok {
		return nil, msgNotFloat
	}
	return f, noErr
}

// storeString replaces k's value cur (nil: absent) with the string b
// expiring at exp (ms; 0: never), or answers OOM and returns false, as
// SET does (CanReplace).
func (x *ctx) storeString(k *rkey, cur *keyspace.Value, b []byte, exp int64) bool {
	nv := keyspace.Value{Kind: keyspace.KindString, Obj: b, Exp: exp}
	if !x.s.ks.CanReplace(cur, nv) {
		x.oom()
		return false
	}
	k.replace(cur, nv)
	return true
}

// expOf is v's expiry (0 for none or a missing key).
func expOf(v *keyspace.Value) int64 {
	if v == nil {
		return 0
	}
	return v.Exp
}

func cmdIncr(x *ctx) { incrDecr(x, 1) }
func cmdDecr(x *ctx) { incrDecr(x, -1) }

func cmdIncrBy(x *ctx) {
	n, ok := parseRedisInt(x.args[2])
	if !ok {
		x.errorReply(msgNotInt)
		return
	}
	incrDecr(x, n)
}

func cmdDecrBy(x *ctx) {
	n, ok := parseRedisInt(x.args[2])
	if !ok {
		x.errorReply(msgNotInt)
		return
	}
	if n == math.MinInt64 {
		x.errorReply(msgDecrOverflow)
		return
	}
	incrDecr(x, -n)
}

// incrDecr adds incr to the integer at the command's key (0 if absent).
func incrDecr(x *ctx, incr int64) {
	k := &x.keys[0]
	v := k.lookup(x.clockMS())
	cur, msg := storedInt(v, x.cl.scratch.num[:0])
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	if (incr < 0 && cur < 0 && incr < math.MinInt64-cur) ||
		(incr > 0 && cur > 0 && incr > math.MaxInt64-cur) {
		x.errorReply(msgIncrOverflow)
		return
	}
	n := cur + incr
	if !x.storeString(k, v, strconv.AppendInt(nil, n, 10), expOf(v)) {
		return
	}
	x.int(n)
}

// INCRBYFLOAT key increment: in long double, as Redis (longdouble.go);
// the result is stored, replicated and answered as the same digits.
func cmdIncrByFloat(x *ctx) {
	k := &x.keys[0]
	v := k.lookup(x.clockMS())
	cur, msg := storedLongDouble(v, x.cl.scratch.num[:0])
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	incr, ok := parseLongDouble(x.args[2])
	if !ok {
		x.errorReply(msgNotFloat)
		return
	}
	sum, ok := ldAdd(cur, incr)
	if !ok {
		x.errorReply(msgFloatNaNInf)
		return
	}
	b := formatLongDouble(nil, sum)
	if !x.storeString(k, v, b, expOf(v)) {
		return
	}
	x.bulk(b)
}

// ldAdd is a + b in long double, false when the sum is not finite.
func ldAdd(a, b *big.Float) (*big.Float, bool) {
	if a.IsInf() || b.IsInf() {
		return nil, false
	}
	s := newLD().Add(a, b)
	return s, ldFinite(s)
}

// increxOpts is INCREX's parsed arguments.
type increxOpts struct {
	float    bool   // BYFLOAT (else integer mode)
	by       []byte // the increment argument; nil: 1
	lb, ub   []byte // LBOUND, UBOUND arguments; nil: the type's limit
	saturate bool
	expUnit  string // "", "ex", "px", "exat", "pxat" or "persist"
	exp      []byte
	enx      bool
}

// parseIncrexOpts reads INCREX's options (args from the third on). An
// option may come in any order; the same one repeated keeps the last
// value; BYINT with BYFLOAT, or two different expiry options, are a
// syntax error, as are ENX without EX/PX/EXAT/PXAT and ENX with PERSIST.
func parseIncrexOpts(args [][]byte, lower []byte) (increxOpts, wireErr) {
	var o increxOpts
	byKind := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		more := i+1 < len(args)
		switch {
		case (eqFold(a, "byint") || eqFold(a, "byfloat")) && more:
			kind := string(lowerInto(lower[:0], a))
			if byKind != "" && byKind != kind {
				return o, msgSyntax
			}
			byKind, o.float, o.by = kind, kind == "byfloat", args[i+1]
			i++
		case eqFold(a, "lbound") && more:
			o.lb = args[i+1]
			i++
		case eqFold(a, "ubound") && more:
			o.ub = args[i+1]
			i++
		case eqFold(a, "saturate"):
			o.saturate = true
		case eqFold(a, "enx"):
			o.enx = true
		case eqFold(a, "persist"):
			if o.expUnit != "" && o.expUnit != "persist" {
				return o, msgSyntax
			}
			o.expUnit = "persist"
		case (eqFold(a, "ex") || eqFold(a, "px") || eqFold(a, "exat") || eqFold(a, "pxat")) && more:
			unit := string(lowerInto(lower[:0], a))
			if o.expUnit != "" && o.expUnit != unit {
				return o, msgSyntax
			}
			o.expUnit, o.exp = unit, args[i+1]
			i++
		default:
			return o, msgSyntax
		}
	}
	if o.enx && (o.expUnit == "" || o.expUnit == "persist") {
		return o, msgSyntax
	}
	return o, noErr
}

// INCREX key [BYFLOAT increment | BYINT increment] [LBOUND lowerbound]
// [UBOUND upperbound] [SATURATE] [EX seconds | PX milliseconds |
// EXAT unix-time-seconds | PXAT unix-time-milliseconds | PERSIST] [ENX]
//
// Redis 8.8: adds the increment (default BYINT 1) to the number at key (0
// if absent) and replies [new_value, actual_increment]. A result outside
// [LBOUND, UBOUND] (default: the type's limits) is skipped, [current, 0]
// with the key and its TTL untouched, unless SATURATE clamps it to the
// bound. When applied, EX/PX/EXAT/PXAT set the TTL (with ENX only if the
// key has none), PERSIST removes it, and no option keeps it.
func cmdIncrex(x *ctx) {
	o, msg := parseIncrexOpts(x.args[2:], x.cl.scratch.lower[:0])
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	now := x.clockMS()
	var exp int64
	if o.expUnit != "" && o.expUnit != "persist" {
		var ok bool
		if exp, ok = x.expiryArg(o.expUnit, o.exp, now, "increx"); !ok {
			return
		}
	}
	if o.float {
		increxFloat(x, &o, now, exp)
		return
	}
	incr := int64(1)
	lb, ub := int64(math.MinInt64), int64(math.MaxInt64)
	for _, p := range []struct {
		arg []byte
		dst *int64
	}{{o.by, &incr}, {o.lb, &lb}, {o.ub, &ub}} {
		if p.arg == nil {
			continue
		}
		n, ok := parseRedisInt(p.arg)
		if !ok {
			x.errorReply(msgNotInt)
			return
		}
		*p.dst = n
	}
	if lb > ub {
		x.errorReply(msgIncrexBounds)
		return
	}
	k := &x.keys[0]
	v := k.lookup(now)
	cur, msg := storedInt(v, x.cl.scratch.num[:0])
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	n, applied := increxInt(cur, incr, lb, ub, o.saturate)
	if !applied {
		x.increxReplyInt(cur, 0)
		return
	}
	if !x.storeString(k, v, strconv.AppendInt(nil, n, 10), increxExpiry(v, &o, exp)) {
		return
	}
	x.increxReplyInt(n, n-cur)
}

// increxInt is INCREX's integer arithmetic: the new value and whether it
// is applied. cur+incr outside [lb, ub] or the int64 range is skipped, or
// with saturate clamped to the bound it crossed; a clamp whose actual
// increment (new-cur) would not fit an int64 is skipped too.
func increxInt(cur, incr, lb, ub int64, saturate bool) (int64, bool) {
	n := cur + incr
	over := incr > 0 && n < cur  // past MaxInt64
	under := incr < 0 && n > cur // past MinInt64
	switch {
	case over || (!under && n > ub): // n wrapped round when over or under
		if !saturate {
			return cur, false
		}
		n = ub
	case under || n < lb:
		if !saturate {
			return cur, false
		}
		n = lb
	}
	if d := n - cur; (n > cur) != (d > 0) || (n < cur) != (d < 0) {
		return cur, false // the actual increment overflows
	}
	return n, true
}

// increxExpiry is the expiry INCREX stores with an applied change.
func increxExpiry(v *keyspace.Value, o *increxOpts, exp int64) int64 {
	switch {
	case o.expUnit == "persist":
		return 0
	case o.expUnit == "":
		return expOf(v)
	case o.enx && expOf(v) != 0:
		return v.Exp
	}
	return exp
}

func (x *ctx) increxReplyInt(n, d int64) {
	x.array(2)
	x.int(n)
	x.int(d)
}

// increxFloat is INCREX BYFLOAT: long double arithmetic (longdouble.go),
// bounds defaulting to ±LDBL_MAX; a non-finite increment or bound is not
// a valid float.
func increxFloat(x *ctx, o *increxOpts, now, exp int64) {
	one := newLD().SetInt64(1)
	incr, lb, ub := one, (*big.Float)(nil), (*big.Float)(nil)
	for _, p := range []struct {
		arg []byte
		dst **big.Float
	}{{o.by, &incr}, {o.lb, &lb}, {o.ub, &ub}} {
		if p.arg == nil {
			continue
		}
		f, ok := parseLongDouble(p.arg)
		if !ok || f.IsInf() {
			x.errorReply(msgNotFloat)
			return
		}
		*p.dst = f
	}
	if lb != nil && ub != nil && lb.Cmp(ub) > 0 {
		x.errorReply(msgIncrexBounds)
		return
	}
	k := &x.keys[0]
	v := k.lookup(now)
	cur, msg := storedLongDouble(v, x.cl.scratch.num[:0])
	if msg == noErr && cur.IsInf() {
		msg = msgNotFloat
	}
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	n, applied := increxLD(cur, incr, lb, ub, o.saturate)
	if !applied {
		x.increxReplyFloat(cur, newLD())
		return
	}
	b := formatLongDouble(nil, n)
	if !x.storeString(k, v, b, increxExpiry(v, o, exp)) {
		return
	}
	x.increxReplyFloat(n, newLD().Sub(n, cur))
}

// increxLD is increxInt in long double: the limits are ±LDBL_MAX.
func increxLD(cur, incr, lb, ub *big.Float, saturate bool) (*big.Float, bool) {
	n := newLD().Add(cur, incr)
	if !ldFinite(n) {
		if !saturate {
			return cur, false
		}
		if n.Sign() > 0 {
			n = ldMax()
		} else {
			n = ldMax().Neg(ldMax())
		}
	}
	switch {
	case ub != nil && n.Cmp(ub) > 0:
		if !saturate {
			return cur, false
		}
		n = ub
	case lb != nil && n.Cmp(lb) < 0:
		if !saturate {
			return cur, false
		}
		n = lb
	}
	if !ldFinite(newLD().Sub(n, cur)) {
		return cur, false
	}
	return n, true
}

// ldMax is LDBL_MAX: 64 one bits times 2^(16384-64).
func ldMax() *big.Float {
	m := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), ldPrec), big.NewInt(1))
	f := newLD().SetInt(m)
	return f.SetMantExp(f, ldMaxExp-ldPrec)
}

// increxReplyFloat answers BYFLOAT's pair: bulk strings in RESP2 (as
// INCRBYFLOAT writes them), doubles in RESP3.
func (x *ctx) increxReplyFloat(n, d *big.Float) {
	x.array(2)
	for _, f := range []*big.Float{n, d} {
		x.longDouble(f)
	}
}

// expiryArg parses the expiry argument arg of unit ("ex", "px", "exat",
// "pxat") into an absolute time in ms, answering command's error (not an
// integer, or an invalid expire time) when it cannot.
func (x *ctx) expiryArg(unit string, arg []byte, now int64, command string) (int64, bool) {
	n, ok := parseRedisInt(arg)
	if !ok {
		x.errorReply(msgNotInt)
		return 0, false
	}
	exp, ok := absoluteExpiry(unit, n, now)
	if !ok {
		x.errorReply(errInvalidExpire(command))
		return 0, false
	}
	return exp, true
}

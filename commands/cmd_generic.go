package commands

import (
	"math"
	"strconv"

	"github.com/cellserver/cellserver/keyspace"
)

// typeName is what TYPE reports for a kind. CL.THROTTLE keys are strings, as
// with redis-cell, which stores the TAT with RedisModule_StringSet; the
// other limiters report their kind as CL.INFO names it.
func typeName(k keyspace.Kind) string {
	switch k {
	case keyspace.KindString, keyspace.KindGCRA:
		return "string"
	case keyspace.KindFixed:
		return "fixed"
	case keyspace.KindSliding:
		return "sliding"
	case keyspace.KindLog:
		return "slidinglog"
	case keyspace.KindLeases:
		return "concurrency"
	}
	return "none"
}

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
	b, ok := stringValue(v, x.cl.num[:0])
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
			unit := string(lowerInto(x.cl.lower[:0], a))
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

func cmdDel(x *ctx) {
	now := x.clockMS()
	var n int64
	for i := range x.keys {
		if x.keys[i].del(now) {
			n++
		}
	}
	x.int(n)
}

func cmdExists(x *ctx) {
	now := x.clockMS()
	var n int64
	for i := range x.keys {
		found := x.keys[i].peek(now) != nil
		x.s.lookedUp(found)
		if found {
			n++
		}
	}
	x.int(n)
}

func cmdType(x *ctx) {
	v := x.keys[0].peek(x.clockMS())
	x.s.lookedUp(v != nil)
	if v == nil {
		x.status("none")
		return
	}
	x.status(typeName(v.Kind))
}

func cmdTTL(x *ctx)  { ttlReply(x, false) }
func cmdPTTL(x *ctx) { ttlReply(x, true) }

func ttlReply(x *ctx, ms bool) {
	now := x.clockMS()
	v := x.keys[0].peek(now)
	x.s.lookedUp(v != nil)
	switch {
	case v == nil:
		x.int(-2)
	case v.Exp == 0:
		x.int(-1)
	default:
		left := v.Exp - now
		if left < 0 {
			left = 0
		}
		if !ms {
			left = (left + 500) / 1000
		}
		x.int(left)
	}
}

func cmdExpire(x *ctx)  { expireGeneric(x, "expire", 1000) }
func cmdPExpire(x *ctx) { expireGeneric(x, "pexpire", 1) }

// EXPIRE key seconds [NX | XX | GT | LT], and PEXPIRE in ms. A time in the
// past deletes the key, as in Redis.
func expireGeneric(x *ctx, name string, unit int64) {
	n, ok := parseRedisInt(x.args[2])
	if !ok {
		x.errorReply(msgNotInt)
		return
	}
	var nx, xx, gt, lt bool
	for _, a := range x.args[3:] {
		switch {
		case eqFold(a, "nx"):
			nx = true
		case eqFold(a, "xx"):
			xx = true
		case eqFold(a, "gt"):
			gt = true
		case eqFold(a, "lt"):
			lt = true
		default:
			x.errorReply(errExpireOption(a))
			return
		}
	}
	if nx && (xx || gt || lt) {
		x.errorReply(msgExpireNXAndXXGTLT)
		return
	}
	if gt && lt {
		x.errorReply(msgExpireGTAndLT)
		return
	}
	now := x.clockMS()
	if (unit == 1000 && (n > math.MaxInt64/1000 || n < math.MinInt64/1000)) ||
		(n*unit > 0 && n*unit > math.MaxInt64-now) {
		x.errorReply(errInvalidExpire(name))
		return
	}
	when := n*unit + now
	k := &x.keys[0]
	v := k.lookup(now)
	if v == nil {
		x.int(0)
		return
	}
	cur := v.Exp // 0: no expiry, which counts as +infinity for GT/LT
	switch {
	case nx && cur != 0, xx && cur == 0,
		gt && (cur == 0 || when <= cur),
		lt && cur != 0 && when >= cur:
		x.int(0)
		return
	}
	if when <= now {
		k.del(now)
		x.int(1)
		return
	}
	v.Exp = when
	k.sh.Changed(k.key, v)
	x.int(1)
}

func cmdPersist(x *ctx) {
	k := &x.keys[0]
	v := k.lookup(x.clockMS())
	if v == nil || v.Exp == 0 {
		x.int(0)
		return
	}
	v.Exp = 0
	k.sh.Changed(k.key, v)
	x.int(1)
}

func cmdDBSize(x *ctx) { x.int(int64(x.db().Size(x.locked))) }

func cmdFlushDB(x *ctx) {
	if !flushArgsOK(x) {
		return
	}
	x.db().Flush(x.locked)
	x.ok()
}

func cmdFlushAll(x *ctx) {
	if !flushArgsOK(x) {
		return
	}
	x.s.ks.FlushAll(x.locked)
	x.ok()
}

func flushArgsOK(x *ctx) bool {
	if len(x.args) == 2 && (eqFold(x.args[1], "async") || eqFold(x.args[1], "sync")) {
		return true
	}
	if len(x.args) > 1 {
		x.errorReply(msgSyntax)
		return false
	}
	return true
}

// KEYS pattern
func cmdKeys(x *ctx) {
	pat := x.args[1]
	now := x.clockMS()
	db := x.db()
	var keys []string
	all := len(pat) == 1 && pat[0] == '*'
	for i := 0; i < db.NumShards(); i++ {
		sh := db.ShardAt(i)
		x.lock(sh)
		sh.Range(now, func(k string, _ *keyspace.Value) bool {
			if all || globMatch(pat, []byte(k), false) {
				keys = append(keys, k)
			}
			return true
		})
		x.unlock(sh)
	}
	x.array(len(keys))
	for _, k := range keys {
		x.bulkStr(k)
	}
}

const (
	// scanMaxCount caps SCAN's COUNT: one call looks at no more keys, so
	// that a huge COUNT cannot make one call walk a large keyspace and
	// build a reply of all of it (KEYS is the command that does that).
	scanMaxCount = 100000
	// scanWorkPerCount bounds, per COUNT, the table positions one SCAN
	// call looks at when they hold few live keys (free positions left by
	// deletions, expired keys), as Redis's scan stops after 10*COUNT
	// empty buckets. Shards cost a lock each and are not counted: a call
	// goes through at most every shard of the database once.
	scanWorkPerCount = 10
)

// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
//
// The cursor names a shard and a position in its table (position *
// NumShards + shard; 0 is the start, and the shard's index alone the
// start of that shard). A call goes through the shards in order from the
// cursor and stops once it has looked at COUNT keys (at most
// scanMaxCount, whatever COUNT says), or at scanWorkPerCount*COUNT table
// positions, free ones included, so one call's work and reply are bounded
// as Redis's are. A key keeps its position while it
// exists, so every key that exists for the whole iteration is returned
// exactly once; a key added or removed meanwhile may be returned or not
// (twice if it is removed and added again), as Redis promises.
func cmdScan(x *ctx) {
	cursor, ok := parseUintCursor(x.args[1])
	if !ok {
		x.errorReply(msgInvalidCursor)
		return
	}
	count := int64(10)
	var pat, typ []byte
	args := x.args[2:]
	for len(args) > 0 {
		if len(args) < 2 {
			x.errorReply(msgSyntax)
			return
		}
		switch {
		case eqFold(args[0], "match"):
			pat = args[1]
			if len(pat) == 1 && pat[0] == '*' {
				pat = nil // as Redis: "*" is no pattern, so it takes the empty key too
			}
		case eqFold(args[0], "count"):
			n, ok := parseRedisInt(args[1])
			if !ok {
				x.errorReply(msgNotInt)
				return
			}
			if n < 1 {
				x.errorReply(msgSyntax)
				return
			}
			count = n
		case eqFold(args[0], "type"):
			typ = args[1]
		default:
			x.errorReply(msgSyntax)
			return
		}
		args = args[2:]
	}
	db := x.db()
	now := x.clockMS()
	count = min(count, scanMaxCount)
	work := count * scanWorkPerCount
	n := uint64(db.NumShards())
	shard, pos := cursor%n, cursor/n
	var keys []string
	seen, spent := int64(0), int64(0)
	for shard < n && seen < count && spent < work {
		sh := db.ShardAt(int(shard))
		x.lock(sh)
		from := uint32(min(pos, math.MaxUint32)) // a position past the table's end: none left
		next, end := sh.Scan(now, from, int(work-spent), func(k string, v *keyspace.Value) bool {
			seen++
			if (pat == nil || globMatch(pat, []byte(k), false)) && (typ == nil || eqFold(typ, typeName(v.Kind))) {
				keys = append(keys, k)
			}
			return seen < count
		})
		x.unlock(sh)
		spent += int64(next - from)
		if !end {
			pos = uint64(next)
			break
		}
		shard, pos = shard+1, 0
	}
	next := uint64(0) // the iteration is over
	if shard < n {
		next = pos*n + shard // not 0: pos > 0 or shard > 0
	}
	x.array(2)
	var b [20]byte
	x.bulk(strconv.AppendUint(b[:0], next, 10))
	x.array(len(keys))
	for _, k := range keys {
		x.bulkStr(k)
	}
}

// parseUintCursor accepts what Redis's parseScanCursorOrReply accepts: C's
// strtoul(s, &end, 10) over the string up to its first NUL, rejecting a
// leading space, trailing bytes and overflow. So "", "+5", "-0" and "007"
// are cursors, and "-n" is 2^64-n.
func parseUintCursor(b []byte) (uint64, bool) {
	b = []byte(cstr(b))
	if len(b) == 0 {
		return 0, true // strtoul consumed nothing and stopped at the NUL
	}
	neg := false
	if b[0] == '+' || b[0] == '-' {
		neg = b[0] == '-'
		b = b[1:]
	}
	u, ok := parseDigits(b)
	if !ok {
		return 0, false
	}
	if neg {
		u = -u
	}
	return u, true
}

func cmdSelect(x *ctx) {
	n, ok := parseRedisInt(x.args[1])
	if !ok {
		x.errorReply(msgNotInt)
		return
	}
	if n < math.MinInt32 || n > math.MaxInt32 { // Redis reads an int first
		x.errorReply(msgIntRange)
		return
	}
	if x.s.cluster != nil && n != 0 {
		x.errorReply(msgSelectCluster)
		return
	}
	if n < 0 || n >= int64(x.s.ks.NumDB()) {
		x.errorReply(msgDBIndex)
		return
	}
	x.cl.db.Store(int32(n))
	x.ok()
}

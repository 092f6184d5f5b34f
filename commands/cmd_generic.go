package commands

import (
	"encoding/binary"
	"math"
	"strconv"

	"github.com/cellserver/cellserver/glob"
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
		found := x.keys[i].quiet(now) != nil
		x.s.lookedUp(found)
		if found {
			n++
		}
	}
	x.int(n)
}

func cmdType(x *ctx) {
	v := x.keys[0].quiet(x.clockMS())
	x.s.lookedUp(v != nil)
	if v == nil {
		x.status("none")
		return
	}
	x.status(typeName(v.Kind))
}

func cmdTTL(x *ctx)         { ttlGeneric(x, false, false) }
func cmdPTTL(x *ctx)        { ttlGeneric(x, true, false) }
func cmdExpireTime(x *ctx)  { ttlGeneric(x, false, true) }
func cmdPExpireTime(x *ctx) { ttlGeneric(x, true, true) }

// ttlGeneric is TTL, PTTL, EXPIRETIME and PEXPIRETIME key, as Redis 7.0's
// ttlGenericCommand (db.c): the time left (abs: the absolute Unix time of
// the expiry), in ms or in seconds rounded to the nearest ((ms+500)/1000);
// -1 without expiry; -2 for a missing key.
func ttlGeneric(x *ctx, ms, abs bool) {
	now := x.clockMS()
	v := x.keys[0].quiet(now)
	x.s.lookedUp(v != nil)
	switch {
	case v == nil:
		x.int(-2)
	case v.Exp == 0:
		x.int(-1)
	default:
		t := v.Exp
		if !abs {
			t -= now
		}
		t = max(t, 0)
		if !ms {
			t = (t + 500) / 1000
		}
		x.int(t)
	}
}

func cmdExpire(x *ctx)    { expireGeneric(x, "expire", 1000, false) }
func cmdPExpire(x *ctx)   { expireGeneric(x, "pexpire", 1, false) }
func cmdExpireAt(x *ctx)  { expireGeneric(x, "expireat", 1000, true) }
func cmdPExpireAt(x *ctx) { expireGeneric(x, "pexpireat", 1, true) }

// EXPIRE key seconds [NX | XX | GT | LT], PEXPIRE in ms, and EXPIREAT and
// PEXPIREAT (abs) at a Unix time, as Redis's expireGenericCommand: the
// options are checked before the time, and a time in the past deletes
// the key.
func expireGeneric(x *ctx, name string, unit int64, abs bool) {
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
	n, ok := parseRedisInt(x.args[2])
	if !ok {
		x.errorReply(msgNotInt)
		return
	}
	now := x.clockMS()
	base := now
	if abs {
		base = 0
	}
	if (unit == 1000 && (n > math.MaxInt64/1000 || n < math.MinInt64/1000)) || n*unit > math.MaxInt64-base {
		x.errorReply(errInvalidExpire(name))
		return
	}
	when := n*unit + base
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
			if all || glob.Match(pat, []byte(k), false) {
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
			if (pat == nil || glob.Match(pat, []byte(k), false)) && (typ == nil || eqFold(typ, typeName(v.Kind))) {
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

// DUMP, with EXPIRETIME and PEXPIRETIME (ttlGeneric): a key's exact state
// and absolute expiry, so that tests and operators can compare two nodes
// (a primary and its replicas) byte for byte.

// DumpVersion is the format version DUMP writes after the encoded value
// (Redis writes its RDB version there). It names the layout of the payload:
// Config.DumpValue's encoding, then this version, then the CRC. It changes
// when that layout does.
const DumpVersion = 1

// DUMP key: nil for a missing key, else a bulk string made as Redis makes
// its own: the value, as Config.DumpValue encodes it (cellserver's
// persistence codec, expiry included: not Redis's RDB encoding), the 2-byte
// DumpVersion and the CRC-64 (Jones, Redis's crc64) of everything before
// it, both little endian. There is no RESTORE.
func cmdDump(x *ctx) {
	if x.s.persist.dumpValue == nil {
		x.errorReply(msgDumpUnavailable)
		return
	}
	v := x.keys[0].peek(x.clockMS())
	x.s.lookedUp(v != nil)
	if v == nil {
		x.null()
		return
	}
	// Encoded under the shard lock: limiters update their values in place.
	x.bulk(dumpPayload(x.s.persist.dumpValue, *v))
}

// dumpPayload is DUMP's bulk string for v.
func dumpPayload(encode func(dst []byte, v keyspace.Value) []byte, v keyspace.Value) []byte {
	b := encode(make([]byte, 0, 64), v)
	b = binary.LittleEndian.AppendUint16(b, DumpVersion)
	return binary.LittleEndian.AppendUint64(b, crc64Jones(0, b))
}

// crcJonesPoly is the Jones polynomial 0xad93d23594c935a9 bit-reversed: the
// CRC-64 Redis uses for DUMP and RDB files (src/crc64.c: reflected in and
// out, initial value 0, no final xor). hash/crc64 offers only ISO and ECMA
// and inverts the CRC before and after, so it cannot compute this one.
const crcJonesPoly = 0x95ac9329ac4bc9b5

var crcJonesTable = func() (t [256]uint64) {
	for i := range t {
		c := uint64(i)
		for range 8 {
			if c&1 == 1 {
				c = c>>1 ^ crcJonesPoly
			} else {
				c >>= 1
			}
		}
		t[i] = c
	}
	return t
}()

// crc64Jones continues crc over b; crc64Jones(0, b) is Redis's crc64(0, b).
func crc64Jones(crc uint64, b []byte) uint64 {
	for _, c := range b {
		crc = crcJonesTable[byte(crc)^c] ^ crc>>8
	}
	return crc
}

package commands

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/cellserver/cellserver/glob"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
	"github.com/cellserver/cellserver/stream"
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
	case keyspace.KindStream:
		return "stream"
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

func cmdExists(x *ctx) { countKeys(x, false) }

// countKeys answers EXISTS (touch false: no access recorded) and TOUCH
// (each key found counts as an access): the number of keys found, a key
// named twice counted twice.
func countKeys(x *ctx, touch bool) {
	now := x.clockMS()
	var n int64
	for i := range x.keys {
		var found bool
		if touch {
			found = x.keys[i].peek(now) != nil
		} else {
			found = x.keys[i].quiet(now) != nil
		}
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

// The everyday key commands beyond GET/SET/DEL/EXPIRE: RENAME, RENAMENX,
// COPY, TOUCH, RANDOMKEY and OBJECT, as Redis 7.0's db.c and object.c. Their
// changes reach WATCH, client-side caching, persistence and the replicas
// through the keyspace's journal, as every write's do (a RENAME is the
// source's deletion and the destination's store).

func cmdRename(x *ctx)   { renameGeneric(x, false) }
func cmdRenameNX(x *ctx) { renameGeneric(x, true) }

// RENAME key newkey and RENAMENX: the value moves with its expiry and its
// access record (Redis moves the object); an existing newkey is replaced
// (RENAME) or left alone, answering 0 (RENAMENX). A missing key is an
// error even when the names are the same.
func renameGeneric(x *ctx, nx bool) {
	now := x.clockMS()
	src, dst := &x.keys[0], &x.keys[1]
	v := src.lookup(now)
	if v == nil {
		x.errorReply(msgNoSuchKey)
		return
	}
	if string(src.key) == string(dst.key) {
		if nx {
			x.int(0)
		} else {
			x.ok()
		}
		return
	}
	_, acc := src.sh.InspectHash(src.key, src.hash, now)
	val := *v // the view changes with the next lookup on its shard
	if nx && dst.lookup(now) != nil {
		x.int(0)
		return
	}
	src.del(now) // first: inserting newkey must not evict key
	dst.replace(nil, val)
	dst.sh.SetAccessHash(dst.key, dst.hash, acc)
	if nx {
		x.int(1)
		return
	}
	x.ok()
}

// copyOptions parses COPY's options after source and destination (args
// from 3 on): the destination database (db, -1 when not given) and
// REPLACE, with Redis's errors in Redis's order.
func copyOptions(args [][]byte, numDB int) (db int64, replace bool, msg wireErr) {
	db = -1
	for j := 3; j < len(args); j++ {
		switch {
		case eqFold(args[j], "replace"):
			replace = true
		case eqFold(args[j], "db") && j+1 < len(args):
			n, ok := parseRedisInt(args[j+1])
			if !ok {
				return 0, false, msgNotInt
			}
			if n < math.MinInt32 || n > math.MaxInt32 {
				return 0, false, msgIntRange
			}
			if n < 0 || n >= int64(numDB) {
				return 0, false, msgDBIndex
			}
			db = n
			j++
		default:
			return 0, false, msgSyntax
		}
	}
	return db, replace, noErr
}

// copyKeys resolves COPY's keys (Spec.derive): the destination in the
// database DB names, when valid (otherwise the command fails before it
// reads a key).
func copyKeys(x *ctx, db *keyspace.DB) {
	x.keys = x.kbuf[:2]
	x.setKey(&x.kbuf[0], db, x.args[1])
	if n, _, msg := copyOptions(x.args, x.s.ks.NumDB()); msg == noErr && n >= 0 {
		db = x.s.ks.DB(int(n))
	}
	x.setKey(&x.kbuf[1], db, x.args[2])
}

// copyCrossDB is COPY's Spec.crossDB.
func copyCrossDB(x *ctx, args [][]byte) bool {
	n, _, msg := copyOptions(args, x.s.ks.NumDB())
	return msg == noErr && n >= 0 && n != int64(x.cl.db.Load())
}

// COPY source destination [DB destination-db] [REPLACE]: 1 when copied, 0
// when source is missing or destination exists (without REPLACE). The copy
// has source's value and expiry, and a fresh access record (Redis
// duplicates the object). It is denyoom: refused with the OOM error while
// the memory is over maxmemory under noeviction.
func cmdCopy(x *ctx) {
	if !x.s.ks.CanInsert() {
		x.oom()
		return
	}
	dbid, replace, msg := copyOptions(x.args, x.s.ks.NumDB())
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	cur := int64(x.cl.db.Load())
	if dbid < 0 {
		dbid = cur
	}
	if x.s.cluster.state != nil && (cur != 0 || dbid != 0) {
		x.errorReply(msgCopyCluster)
		return
	}
	src, dst := &x.keys[0], &x.keys[1]
	if dbid == cur && string(src.key) == string(dst.key) {
		x.errorReply(msgSameObject)
		return
	}
	now := x.clockMS()
	v := src.lookup(now)
	if v == nil {
		x.int(0)
		return
	}
	nv := *v
	nv.Obj = cloneObj(v.Obj)
	if d := dst.lookup(now); d != nil && !replace {
		x.int(0)
		return
	}
	dst.replace(nil, nv)
	x.int(1)
}

// cloneObj returns a copy of a Value's object that shares no memory with
// it: limiters change theirs in place.
func cloneObj(o any) any {
	switch o := o.(type) {
	case []byte:
		return slices.Clone(o)
	case *limiter.Log:
		c := *o
		c.Entries = slices.Clone(o.Entries)
		if o.Res != nil {
			c.Res = cloneReservations(o.Res)
		}
		return &c
	case *limiter.Leases:
		return o.Clone()
	case *limiter.Reservations:
		return cloneReservations(o)
	case *stream.Stream:
		return o.Clone()
	}
	return o // nil
}

func cloneReservations(r *limiter.Reservations) *limiter.Reservations {
	c := *r
	c.List = slices.Clone(r.List)
	return &c
}

// TOUCH key [key ...]: the number of keys that exist; each counts as an
// access (its idle time starts again, its LFU counter may grow).
func cmdTouch(x *ctx) { countKeys(x, true) }

// RANDOMKEY: a live key of the current database, each as likely as the
// others, or nil when it has none. The shards' table sizes are read one
// lock at a time; then a table position of the whole database is drawn
// (a shard in proportion to its table, a position in it) until one holds
// a live key, at most randomKeyDraws times, and after that each shard is
// searched in turn: the work is a lock per shard plus a bounded number of
// probes, whatever the keyspace holds.
func cmdRandomKey(x *ctx) {
	db := x.db()
	now := x.clockMS()
	n := db.NumShards()
	sizes := make([]int, n)
	total := 0
	for i := range n {
		sh := db.ShardAt(i)
		x.lock(sh)
		sizes[i] = sh.Positions()
		x.unlock(sh)
		total += sizes[i]
	}
	// Rejection sampling over every table position of the database: each
	// live key equally likely, whatever the shards' share of free and
	// expired positions. After randomKeyDraws misses (a keyspace mostly
	// expired) a shard is drawn from and emptied of candidates in turn,
	// which bounds the work.
	for range randomKeyDraws {
		if total == 0 {
			break
		}
		sh := db.ShardAt(pickWeighted(sizes, total))
		x.lock(sh)
		key := sh.RandomDraw(now)
		x.unlock(sh)
		if key != nil {
			x.bulk(key)
			return
		}
	}
	for total > 0 {
		i := pickWeighted(sizes, total)
		sh := db.ShardAt(i)
		x.lock(sh)
		key := sh.RandomKey(now)
		x.unlock(sh)
		if key != nil {
			x.bulk(key)
			return
		}
		total -= sizes[i] // emptied since, or only expired keys left
		sizes[i] = 0
	}
	x.null()
}

// randomKeyDraws bounds RANDOMKEY's uniform draws before it falls back
// to a shard-by-shard search.
const randomKeyDraws = 128

// pickWeighted returns an index of sizes drawn with probability
// sizes[i]/total.
func pickWeighted(sizes []int, total int) int {
	r := rand.IntN(total)
	i := 0
	for r >= sizes[i] {
		r -= sizes[i]
		i++
	}
	return i
}

// OBJECT subcommands read a key without counting it as an access
// (keyspace.Shard.InspectHash, Redis's LOOKUP_NOTOUCH); a missing key
// answers nil.
func (x *ctx) inspect() (*keyspace.Value, keyspace.Access, bool) {
	k := &x.keys[0]
	v, acc := k.sh.InspectHash(k.key, k.hash, x.clockMS())
	x.s.lookedUp(v != nil)
	if v == nil {
		x.null()
		return nil, acc, false
	}
	return v, acc, true
}

// OBJECT ENCODING key. A string is encoded as Redis's SET would encode its
// bytes: "int" for a canonical 64-bit integer of up to 20 characters,
// "embstr" up to 44 bytes, "raw" beyond (a string Redis grew in place
// with APPEND or SETRANGE, which it keeps "raw", is answered by its
// bytes too). A CL.THROTTLE key holds the TAT as a decimal integer, as
// redis-cell's string does: "int". The other limiters' kinds answer
// "raw", as a Redis module type's object does.
func cmdObjectEncoding(x *ctx) {
	v, _, ok := x.inspect()
	if !ok {
		return
	}
	x.bulkStr(objectEncoding(v))
}

func objectEncoding(v *keyspace.Value) string {
	switch v.Kind {
	case keyspace.KindGCRA:
		return "int"
	case keyspace.KindString:
		b, _ := v.Obj.([]byte)
		if _, ok := parseRedisInt(b); ok && len(b) <= 20 {
			return "int"
		}
		if len(b) <= 44 {
			return "embstr"
		}
	case keyspace.KindStream:
		return "stream"
	}
	return "raw"
}

// sharedRefcount is what Redis answers for a shared object (OBJ_SHARED_REFCOUNT).
const sharedRefcount = math.MaxInt32

// OBJECT REFCOUNT key: 1, or, as Redis, sharedRefcount for a string
// holding an integer in [0, 10000) (Redis's shared integers), unless a
// maxmemory cap with an evicting policy is set (Redis then keeps them
// apart, for their access records).
func cmdObjectRefcount(x *ctx) {
	v, _, ok := x.inspect()
	if !ok {
		return
	}
	if v.Kind == keyspace.KindString {
		b, _ := v.Obj.([]byte)
		mem := x.s.ks.Memory()
		shareable := mem.MaxMemory == 0 || mem.Policy == keyspace.NoEviction
		if n, isInt := parseRedisInt(b); isInt && len(b) <= 20 && n >= 0 && n < 10000 && shareable {
			x.int(sharedRefcount)
			return
		}
	}
	x.int(1)
}

// OBJECT IDLETIME key: the seconds since the key's last access; an error
// under allkeys-lfu, which counts accesses instead.
func cmdObjectIdletime(x *ctx) {
	_, acc, ok := x.inspectChecked(false)
	if !ok {
		return
	}
	idle, _ := acc.Idle(x.clockMS())
	x.int(idle)
}

// OBJECT FREQ key: the key's logarithmic access counter (redis-cli
// --hotkeys reads it); an error unless the policy is allkeys-lfu.
func cmdObjectFreq(x *ctx) {
	_, acc, ok := x.inspectChecked(true)
	if !ok {
		return
	}
	f, _ := acc.Freq(x.clockMS())
	x.int(int64(f))
}

// inspectChecked is inspect, then Redis's check of the policy (after the
// key's: a missing key answers nil whatever the policy).
func (x *ctx) inspectChecked(lfu bool) (*keyspace.Value, keyspace.Access, bool) {
	v, acc, ok := x.inspect()
	if !ok {
		return nil, acc, false
	}
	if isLFU := x.s.ks.Memory().Policy == keyspace.AllKeysLFU; isLFU != lfu {
		if lfu {
			x.errorReply(msgNoLFU)
		} else {
			x.errorReply(msgLFUNoIdle)
		}
		return nil, acc, false
	}
	return v, acc, true
}

func cmdObjectHelp(x *ctx) {
	helpReply(x,
		"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
		"ENCODING <key>",
		"    Return the kind of internal representation used in order to store the value",
		"    associated with a <key>.",
		"FREQ <key>",
		"    Return the access frequency index of the <key>. The returned integer is",
		"    proportional to the logarithm of the recent access frequency of the key.",
		"IDLETIME <key>",
		"    Return the idle time of the <key>, that is the approximated number of",
		"    seconds elapsed since the last access to the key.",
		"REFCOUNT <key>",
		"    Return the number of references of the value associated with the specified",
		"    <key>.",
		"HELP",
		"    Prints this help.")
}

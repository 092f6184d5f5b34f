package commands

import (
	"math"
	"math/rand/v2"
	"slices"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
)

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
func cmdTouch(x *ctx) {
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

// RANDOMKEY: a live key of the current database, each as likely as the
// others, or nil when it has none. The shards' sizes are read one lock at
// a time, a shard is drawn in proportion to its keys, and a key of it at
// random (keyspace.Shard.RandomKey): the work is a lock per shard plus a
// few probes, bounded whatever the keyspace holds. Keys expired but not
// yet removed count in the draw of a shard and are skipped within it.
func cmdRandomKey(x *ctx) {
	db := x.db()
	now := x.clockMS()
	n := db.NumShards()
	sizes := make([]int, n)
	total := 0
	for i := range n {
		sh := db.ShardAt(i)
		x.lock(sh)
		sizes[i] = sh.Len()
		x.unlock(sh)
		total += sizes[i]
	}
	for total > 0 {
		r := rand.IntN(total)
		i := 0
		for r >= sizes[i] {
			r -= sizes[i]
			i++
		}
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

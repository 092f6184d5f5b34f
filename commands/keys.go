package commands

import (
	"cmp"
	"slices"

	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/keyspace"
)

// The dispatcher resolves a command's keys from its spec (FirstKey,
// LastKey, Step or Keys) once, before the command is queued or run: each
// key is hashed once (keyspace.Keyspace.Hash), which also picks its
// shard, and in cluster mode its hash slot is computed (keyslot.Of). Before
// the handler runs, the dispatcher takes the locks of the keys' shards,
// each once, in the global order (keyspace.Shard.Order), and releases them
// after it: handlers read and write x.keys without a lock prologue. EXEC
// locks the shards of every queued command at once and runs the commands
// through the same call path (Service.call) with the locks held.

// keyBufs are a client's buffers for commands with more keys than the
// context holds: key positions, resolved keys, shards to lock, a
// transaction's keys, and a bitmap of one database's shards.
type keyBufs struct {
	pos   []int
	keys  []rkey
	locks []*keyspace.Shard
	exec  []execKey
	marks []uint64
	used  bool // one of these was used by the command (ctx.doneKeys)
}

// rkey is one key argument of a command as the dispatcher resolved it.
type rkey struct {
	key  []byte
	hash uint64          // keyspace.Keyspace.Hash(key)
	sh   *keyspace.Shard // the shard that holds key in the command's database
	slot uint16          // keyslot.Of(key); set only in cluster mode
}

// lookup, peek, replace and del are the keyspace.Shard methods for k, with
// its hash. The shard lock must be held (the dispatcher holds it).
func (k *rkey) lookup(now int64) *keyspace.Value { return k.sh.LookupHash(k.key, k.hash, now) }
func (k *rkey) peek(now int64) *keyspace.Value   { return k.sh.PeekHash(k.key, k.hash, now) }
func (k *rkey) del(now int64) bool               { return k.sh.DeleteHash(k.key, k.hash, now) }

// quiet is peek without counting as an access to the key (Redis's
// LOOKUP_NOTOUCH: EXISTS, TYPE, TTL and the like leave OBJECT IDLETIME and
// FREQ alone).
func (k *rkey) quiet(now int64) *keyspace.Value {
	v, _ := k.sh.InspectHash(k.key, k.hash, now)
	return v
}
func (k *rkey) replace(cur *keyspace.Value, nv keyspace.Value) {
	k.sh.ReplaceHash(k.key, k.hash, cur, nv)
}

const (
	// inlineKeys is how many keys (and shards) a command resolves (and
	// locks) in the client's context without allocating.
	inlineKeys = 4
	// keptKeys bounds the buffers a client keeps between commands for
	// commands with more keys: past it they are freed after the command.
	// CL.ALL's most checks (maxAllChecks) fit, whatever append's growth.
	keptKeys = 2 * maxAllChecks
	// markedShards bounds the databases whose shards are told apart with
	// a bitmap (client.marks) rather than by sorting alone.
	markedShards = 1 << 14
	// heldInline is how many held shards a NOLOOP client publishes
	// without allocating (client.held).
	heldInline = 4
)

// resolveKeys sets x.keys to sp's keys in x.args, resolved in database db.
func (x *ctx) resolveKeys(sp *Spec, db *keyspace.DB) {
	x.auditKey, x.auditRedoable = false, false
	x.resolveSpecKeys(sp, db)
	if x.cl.extAudit != nil {
		x.addExtAuditKey(sp, db)
	}
}

func (x *ctx) resolveSpecKeys(sp *Spec, db *keyspace.DB) {
	x.keys = x.kbuf[:0]
	if sp.derive != nil {
		sp.derive(x, db)
		return
	}
	if sp.FirstKey > 0 && sp.FirstKey == sp.LastKey && sp.Keys == nil { // one key, in short
		if sp.FirstKey < len(x.args) {
			x.keys = x.kbuf[:1]
			x.setKey(&x.kbuf[0], db, x.args[sp.FirstKey])
		}
		return
	}
	if sp.Keys != nil {
		cl := x.cl
		cl.keyBuf.pos = sp.Keys(cl.keyBuf.pos[:0], x.args)
		cl.keyBuf.used = true
		x.growKeys(len(cl.keyBuf.pos))
		for _, p := range cl.keyBuf.pos {
			x.addKey(db, x.args[p])
		}
		return
	}
	first, last := sp.keyRange(len(x.args))
	if first > last {
		return
	}
	x.growKeys((last-first)/sp.Step + 1)
	for i := first; i <= last; i += sp.Step {
		x.addKey(db, x.args[i])
	}
}

// growKeys makes room for n keys in x.keys (empty), in the client's
// buffer when the context's is too small.
func (x *ctx) growKeys(n int) {
	if n <= cap(x.keys) {
		return
	}
	cl := x.cl
	if cap(cl.keyBuf.keys) < n {
		cl.keyBuf.keys = make([]rkey, 0, n)
	}
	x.keys = cl.keyBuf.keys[:0]
	cl.keyBuf.used = true
}

func (x *ctx) addKey(db *keyspace.DB, key []byte) {
	x.keys = x.keys[:len(x.keys)+1]
	x.setKey(&x.keys[len(x.keys)-1], db, key)
}

func (x *ctx) setKey(k *rkey, db *keyspace.DB, key []byte) {
	if x.pre != nil { // resolved before (EXEC)
		e := &x.pre[0]
		k.key, k.hash, k.sh, k.slot = key, e.hash, db.ShardHash(e.hash), e.slot
		if x.pre = x.pre[1:]; len(x.pre) == 0 {
			x.pre = nil
		}
		return
	}
	h := x.s.ks.Hash(key)
	k.key, k.hash, k.sh, k.slot = key, h, db.ShardHash(h), 0
	if x.s.cluster.on {
		k.slot = keyslot.Of(key)
	}
}

// doneKeys forgets the command's keys (those in the client's buffers
// point into its arguments) and frees the buffers that a large command
// grew. The context's own few are overwritten by the next command.
func (x *ctx) doneKeys() {
	if x.cl.keyBuf.used {
		x.doneBigKeys()
	}
	x.keys = nil
}

func (x *ctx) doneBigKeys() {
	cl := x.cl
	cl.keyBuf.used = false
	clear(x.keys)
	x.keys = nil
	if cap(cl.keyBuf.keys) > keptKeys {
		cl.keyBuf.keys = nil
	}
	if cap(cl.keyBuf.pos) > keptKeys {
		cl.keyBuf.pos = nil
	}
	if cap(cl.keyBuf.locks) > keptKeys {
		cl.keyBuf.locks = nil
	}
	if cap(cl.keyBuf.exec) > 8*keptKeys { // 16 bytes a key
		cl.keyBuf.exec = nil
	}
}

// runLocked runs sp with the locks of its keys' shards held.
func (x *ctx) runLocked(sp *Spec) {
	if x.auditKey && x.lazyAudit() { // the audit stream's lock, if needed, is the audit's to take
		if x.runAuditLazily(sp) {
			return
		}
		// That lock, out of the lock order, was busy: the command
		// stopped before storing its decision, and runs again with every
		// lock taken up front, reading the clock again under them
		// (another client may have decided on the key meanwhile: see
		// Service.call). The sample's draw stands: drawn again, a kept
		// entry could turn into a dropped one.
		x.auditRedo, x.haveNow = false, false
		x.s.pol.auditRedos.Add(1)
	}
	keys := x.keys
	if len(keys) == 1 && !x.cl.track.noloop { // the common case, in short
		sh := keys[0].sh
		sh.Lock()
		defer sh.Unlock()
		if x.s.migrating(sp) && !x.keysStillServed() {
			return
		}
		if x.trackChg {
			c0 := sh.Changes()
			sp.Run(x)
			x.changed = x.changed || sh.Changes() != c0
			return
		}
		sp.Run(x)
		return
	}
	x.lockShards(x.keyShards(keys))
	defer x.unlockShards()
	if x.s.migrating(sp) && !x.keysStillServed() {
		return
	}
	if sp.Flags&Write != 0 && len(x.keys) > 1 {
		// A write of several keys (an audited CL.APPLY and its entry,
		// MSET, RENAME): its changes are persisted together. (Its locks
		// are all held: a group must not wait for a lock.)
		if g := x.s.ks.BeginGroup(); g != nil {
			defer g.EndGroup()
		}
	}
	if x.trackChg {
		c0 := x.lockedChanges()
		sp.Run(x)
		x.changed = x.changed || x.lockedChanges() != c0
		return
	}
	sp.Run(x)
}

// migrating reports whether a write must check its keys' slots again
// under its locks: slots migrate out of this node (migrationRecheck).
func (s *Service) migrating(sp *Spec) bool {
	return sp.Flags&Write != 0 && s.cluster.state != nil && s.cluster.state.Migrating()
}

// keysStillServed checks, under the locks, that this node still serves
// the command's keys (migrationRecheck); if not it answers the error and
// returns false.
func (x *ctx) keysStillServed() bool {
	msg := x.migrationRecheck(func(yield func(uint16) bool) {
		for i := range x.keys {
			if !yield(x.keys[i].slot) {
				return
			}
		}
	})
	if msg != noErr {
		x.errorReply(msg)
		return false
	}
	return true
}

// lockedChanges sums the change counts of the shards whose locks the
// command holds (keyspace.Shard.Changes): sync-replicas holds the reply
// of a command only if the sum moved.
func (x *ctx) lockedChanges() uint64 {
	var n uint64
	for _, sh := range x.locks {
		n += sh.Changes()
	}
	return n
}

// keyShards returns the shards of keys (all in one database), each once,
// in the lock order.
func (x *ctx) keyShards(keys []rkey) []*keyspace.Shard {
	if len(keys) == 1 {
		x.lbuf[0] = keys[0].sh
		return x.lbuf[:1]
	}
	dst := x.lbuf[:0]
	if len(keys) > len(x.lbuf) {
		dst = x.cl.keyBuf.locks[:0]
		x.cl.keyBuf.used = true
	}
	dst = x.cl.uniqueShards(dst, keys)
	if len(keys) > len(x.lbuf) {
		x.cl.keyBuf.locks = dst
	}
	return orderShards(dst)
}

// uniqueShards appends to dst the shards of keys (all in one database),
// each once, in no particular order.
func (cl *client) uniqueShards(dst []*keyspace.Shard, keys []rkey) []*keyspace.Shard {
	if len(keys) <= 2*inlineKeys {
		for i := range keys {
			dst = append(dst, keys[i].sh)
		}
		return dst // orderShards drops the repeats
	}
	// A bitmap of the database's shards keeps one entry per shard, so
	// that sorting takes at most a database's shards, however many keys.
	n := 0
	for i := range keys {
		_, j := keys[i].sh.Order()
		n = max(n, j+1)
	}
	if n > markedShards {
		for i := range keys {
			dst = append(dst, keys[i].sh)
		}
		return dst
	}
	if w := (n + 63) / 64; len(cl.keyBuf.marks) < w {
		cl.keyBuf.marks = make([]uint64, max(w, 4))
	}
	start := len(dst)
	for i := range keys {
		_, j := keys[i].sh.Order()
		if bit := uint64(1) << (j % 64); cl.keyBuf.marks[j/64]&bit == 0 {
			cl.keyBuf.marks[j/64] |= bit
			dst = append(dst, keys[i].sh)
		}
	}
	for _, sh := range dst[start:] {
		_, j := sh.Order()
		cl.keyBuf.marks[j/64] = 0
	}
	return dst
}

// orderShards sorts shards into the global lock order (database, then
// index) and removes repeats.
func orderShards(shards []*keyspace.Shard) []*keyspace.Shard {
	if len(shards) <= 8 {
		for k := 1; k < len(shards); k++ {
			for j := k; j > 0 && shardLess(shards[j], shards[j-1]); j-- {
				shards[j-1], shards[j] = shards[j], shards[j-1]
			}
		}
	} else {
		slices.SortFunc(shards, shardCompare)
	}
	return slices.Compact(shards)
}

func shardCompare(a, b *keyspace.Shard) int {
	da, ia := a.Order()
	db, ib := b.Order()
	if c := cmp.Compare(da, db); c != 0 {
		return c
	}
	return cmp.Compare(ia, ib)
}

func shardLess(a, b *keyspace.Shard) bool { return shardCompare(a, b) < 0 }

// lockShards locks shards (in the lock order, each once) and, for a
// NOLOOP client, publishes them as held (client.writer).
func (x *ctx) lockShards(shards []*keyspace.Shard) {
	for _, sh := range shards {
		sh.Lock()
	}
	x.locks = shards
	if x.cl.track.noloop {
		x.cl.setHeld(shards)
		x.heldSet = true
	}
}

// unlockShards releases what lockShards took, in the reverse order.
func (x *ctx) unlockShards() {
	if x.heldSet {
		x.cl.setHeld(nil)
		x.heldSet = false
	}
	for i := len(x.locks) - 1; i >= 0; i-- {
		x.locks[i].Unlock()
	}
	x.locks = nil
}

// setHeld publishes the shards whose locks cl holds (nil: none) for
// writer; it is called with those locks held.
func (cl *client) setHeld(shards []*keyspace.Shard) {
	for i := range cl.track.held {
		var sh *keyspace.Shard
		if i < len(shards) {
			sh = shards[i]
		}
		if sh != nil || cl.track.held[i].Load() != nil {
			cl.track.held[i].Store(sh)
		}
	}
	if len(shards) > heldInline {
		more := slices.Clone(shards[heldInline:])
		cl.track.heldMore.Store(&more)
	} else if cl.track.heldMore.Load() != nil {
		cl.track.heldMore.Store(nil)
	}
}

// writer reports whether cl holds the lock of sh (or every lock): then the
// change being journaled under that lock is cl's own (NOLOOP). It is
// called with sh's lock held, so no other client can be publishing sh.
func (cl *client) writer(sh *keyspace.Shard) bool {
	if cl.track.heldAll.Load() {
		return true
	}
	if sh == nil {
		return false
	}
	for i := range cl.track.held {
		if cl.track.held[i].Load() == sh {
			return true
		}
	}
	if more := cl.track.heldMore.Load(); more != nil {
		return slices.Contains(*more, sh)
	}
	return false
}

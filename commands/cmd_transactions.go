package commands

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/stream"
)

// MULTI, EXEC and DISCARD: transactions, with Redis 7.0's semantics
// (src/multi.c). MULTI queues copies of the commands (Service.enqueue),
// EXEC runs them with the locks of every shard they and the watched keys
// are on; WATCH and UNWATCH (below) make EXEC abort when a watched key
// changed.

// multiLimits cap what one client queues between MULTI and EXEC and
// watches (Config.MultiMaxCommands, MultiMaxBytes).
type multiLimits struct {
	maxCommands int
	maxBytes    int64 // queuedSize, and watchedKeyBytes per watched key
}

// multiState is a client's transaction: the queue between MULTI and EXEC
// and the keys it WATCHes.
type multiState struct {
	on    bool // between MULTI and EXEC
	bad   bool // a command failed to queue: EXEC aborts
	queue []queued
	bytes int64        // queuedSize of queue
	mem   atomic.Int64 // bytes, read by CLIENT LIST
	seen  atomic.Int32 // queued commands, -1 outside MULTI; read by CLIENT LIST

	watched    []*watchedKey // WATCHed keys, registered in Service.watch
	watchBytes int64         // their cost against Config.MultiMaxBytes
	// dirty: a watched key changed, EXEC will abort (Redis's
	// CLIENT_DIRTY_CAS). Set by whichever client changes the key.
	dirty atomic.Bool
}

func cmdMulti(x *ctx) {
	if x.cl.multi.on {
		x.errorReply(msgNoMulti)
		return
	}
	x.cl.multi.on = true
	x.cl.multi.seen.Store(0)
	x.ok()
}

func cmdDiscard(x *ctx) {
	if !x.cl.multi.on {
		x.errorReply(msgDiscardNoMult)
		return
	}
	x.cl.resetMulti()
	x.cl.multi.seen.Store(-1)
	x.s.unwatchAll(x.cl)
	x.ok()
}

// The defaults of Config.MultiMaxCommands and Config.MultiMaxBytes. EXEC
// runs its queue holding every shard lock, so these bound how long one
// transaction keeps every other client waiting (about 4 ms for 10000
// CL.THROTTLE: BenchmarkExecFullQueue), as well as its memory.
const (
	DefaultMultiMaxCommands       = 10000
	DefaultMultiMaxBytes    int64 = 64 << 20
)

// queuedArgBytes is what a queued command costs beyond its arguments'
// bytes, per argument: the slice header that holds it.
const queuedArgBytes = 24

// queuedSize is what queuing args counts against Config.MultiMaxBytes:
// the arguments' bytes plus queuedArgBytes each.
func queuedSize(args [][]byte) int64 {
	n := int64(len(args)) * queuedArgBytes
	for _, a := range args {
		n += int64(len(a))
	}
	return n
}

// enqueue queues a command inside MULTI and returns noErr, or the error that
// refuses it when the queue would pass its limits. Once the transaction
// is bound to abort (multiBad), commands are answered QUEUED but not kept,
// as Redis does: EXEC will not run them.
func (s *Service) enqueue(cl *client, sp *Spec, args [][]byte) wireErr {
	if cl.multi.bad {
		return noErr
	}
	if len(cl.multi.queue) >= s.multi.maxCommands {
		return msgMultiQueueCmds
	}
	size := queuedSize(args)
	if size > s.multi.maxBytes-cl.multi.bytes {
		return msgMultiQueueBytes
	}
	cl.multi.bytes += size
	cl.multi.mem.Store(cl.multi.bytes)
	cl.multi.queue = append(cl.multi.queue, queued{spec: sp, args: copyArgs(args)})
	cl.multi.seen.Store(int32(len(cl.multi.queue)))
	return noErr
}

// EXEC runs the queued commands with the locks of every shard they touch
// held (and of the shards of the keys the client watches), so no other
// client's command can interleave with them; a client on other shards is
// not held up. A transaction with a command that needs more than its
// keys (WholeKeyspace) holds every shard lock. EXEC answers a null array
// instead when a watched key changed (see WATCH below); either way the
// client's watched keys are forgotten. Each queued command runs through
// Service.call, as a command outside MULTI does, with its keys resolved
// once.
func cmdExec(x *ctx) {
	cl := x.cl
	if !cl.multi.on {
		x.errorReply(msgExecNoMulti)
		return
	}
	queue, bad := cl.multi.queue, cl.multi.bad
	cl.resetMulti()
	cl.multi.seen.Store(-1)
	if bad {
		x.s.unwatchAll(cl)
		x.errorReply(msgExecAbort)
		return
	}
	if len(queue) == 0 {
		// Nothing runs: the check needs no lock.
		broken := x.watchBroken()
		x.s.unwatchAll(cl)
		if broken {
			x.nullArray()
			return
		}
		x.array(0)
		return
	}
	whole := false
	for _, q := range queue {
		if q.spec.Flags&WholeKeyspace != 0 || q.spec.crossDB != nil && q.spec.crossDB(x, q.args) {
			whole = true
			break
		}
	}
	var keys []execKey // every queued command's keys, in queue order
	if whole {
		x.s.ks.LockAll()
		defer x.s.ks.UnlockAll()
		if cl.track.noloop {
			cl.track.heldAll.Store(true)
			defer cl.track.heldAll.Store(false)
		}
	} else {
		var shards []*keyspace.Shard
		keys, shards = x.resolveQueue(queue)
		// Cluster mode checks the queued commands' slots (execKey.slot)
		// again here, before the locks are taken.
		x.lockShards(shards)
		defer x.unlockShards()
		if x.s.cluster.state != nil && x.s.cluster.state.Migrating() && queuedWrite(queue) {
			msg := x.migrationRecheck(func(yield func(uint16) bool) {
				for _, k := range keys {
					if !yield(k.slot) {
						return
					}
				}
			})
			if msg != noErr {
				x.s.unwatchAll(cl)
				x.errorReply(msg)
				return
			}
		}
	}
	if len(cl.multi.watched) > 0 {
		broken := x.watchBroken()
		x.s.unwatchAll(cl)
		if broken {
			x.nullArray()
			return
		}
	}
	if queuedWrite(queue) {
		// A transaction's changes are persisted together (one batch).
		if g := x.s.ks.BeginGroup(); g != nil {
			defer g.EndGroup()
		}
	}
	x.array(len(queue))
	outer := *x
	var c0 uint64
	if outer.trackChg {
		if whole {
			// Every lock is held: count a transaction with writes as a
			// change (summing every shard's count would cost more).
			outer.changed = queuedWrite(queue)
		} else {
			c0 = x.lockedChanges()
		}
	}
	x.locked, x.inExec, x.trackChg = whole, true, false
	for _, q := range queue {
		x.args = q.args
		if whole {
			// SELECT may have changed the database: resolved as it runs.
			x.resolveKeys(q.spec, x.db())
		} else {
			// Their hashes (and slots) as resolveQueue found them.
			if q.nkeys > 0 {
				x.pre, keys = keys[:q.nkeys], keys[q.nkeys:]
			}
			x.resolveKeys(q.spec, x.db())
			x.pre = nil // used up
		}
		// The user's rules may have changed since the command was
		// queued: checked again, as Redis's execCommand does.
		if st := cl.user.Load().restrict.Load(); st != nil && x.s.aclExecDenied(x, q.spec, st) {
			continue
		}
		x.s.call(x, q.spec)
	}
	x.args, x.spec, x.failed, x.locked, x.inExec = outer.args, outer.spec, false, false, false
	x.keys, x.locks, x.heldSet = outer.keys, outer.locks, outer.heldSet
	x.trackChg, x.changed = outer.trackChg, outer.changed
	if outer.trackChg && !whole {
		x.changed = x.changed || x.lockedChanges() != c0
	}
}

// execKey is a queued command's key as EXEC resolved it (resolveQueue),
// without its bytes and shard, which the hash finds again as the command
// runs: a buffer without pointers costs the garbage collector nothing.
type execKey struct {
	hash uint64
	slot uint16
}

// resolveQueue resolves the keys of a transaction's commands (none needs
// the whole keyspace, so all run in the current database), recording
// each command's count in its nkeys. It returns their hashes, in queue
// order, and the shards to lock, each once, in the lock order: those of
// the keys, and those of the keys the client watches, so that a change to
// a watched key is either before EXEC's check or after the transaction.
func (x *ctx) resolveQueue(queue []queued) ([]execKey, []*keyspace.Shard) {
	cl := x.cl
	db := x.db()
	if cap(cl.keyBuf.exec) < len(queue) {
		cl.keyBuf.exec = make([]execKey, 0, len(queue)) // one key a command, as a rule
	}
	all := cl.keyBuf.exec[:0]
	shards := cl.keyBuf.locks[:0]
	marks := db.NumShards() <= markedShards
	if w := (db.NumShards() + 63) / 64; marks && len(cl.keyBuf.marks) < w {
		cl.keyBuf.marks = make([]uint64, w)
	}
	args := x.args
	for i := range queue {
		q := &queue[i]
		var one [1]rkey
		keys := x.keys[:0]
		if sp := q.spec; sp.FirstKey > 0 && sp.FirstKey == sp.LastKey && sp.Keys == nil && sp.derive == nil {
			// One key, in short (as resolveKeys).
			if sp.FirstKey < len(q.args) {
				x.setKey(&one[0], db, q.args[sp.FirstKey])
				keys = one[:]
			}
		} else {
			x.args = q.args
			x.resolveKeys(sp, db)
			keys = x.keys
		}
		q.nkeys = len(keys)
		for j := range keys {
			k := &keys[j]
			all = append(all, execKey{hash: k.hash, slot: k.slot})
			if !marks {
				shards = append(shards, k.sh)
				continue
			}
			// One entry per shard, so that sorting takes at most a
			// database's shards, however many keys.
			_, s := k.sh.Order()
			if bit := uint64(1) << (s % 64); cl.keyBuf.marks[s/64]&bit == 0 {
				cl.keyBuf.marks[s/64] |= bit
				shards = append(shards, k.sh)
			}
		}
	}
	if marks {
		for _, sh := range shards {
			_, s := sh.Order()
			cl.keyBuf.marks[s/64] = 0
		}
	}
	for _, wk := range cl.multi.watched {
		shards = append(shards, x.s.ks.DB(wk.db).Shard([]byte(wk.key)))
	}
	cl.keyBuf.exec, cl.keyBuf.locks, cl.keyBuf.used = all, shards, true
	x.args, x.keys = args, nil
	return all, orderShards(shards)
}

type queued struct {
	spec  *Spec
	args  [][]byte
	nkeys int // its keys, resolved by EXEC (resolveQueue)
}

func (cl *client) multiFailed() {
	if cl.multi.on {
		cl.multi.bad = true
	}
}

func (cl *client) resetMulti() {
	cl.multi.on = false
	cl.multi.bad = false
	cl.multi.queue = nil
	cl.multi.bytes = 0
	cl.multi.mem.Store(0)
}

// WATCH and UNWATCH: optimistic transactions, with Redis 7.0's semantics
// (src/multi.c). EXEC answers a null array instead of running its queue
// when a key the client watches was changed since WATCH by anyone (the
// client itself included): written (SET, a limiter call that stores new
// state, EXPIRE, PERSIST), deleted (DEL, eviction, removal of the expired
// key), flushed (FLUSHDB, FLUSHALL) or expired. EXEC, DISCARD, RESET and
// UNWATCH forget the client's watched keys; so does closing the connection.
//
// Changes are seen through the keyspace's Journal (watchJournal), which
// the keyspace calls with the changed key's shard lock held, right after
// the change. EXEC holds the locks of the shards of its commands' keys and
// of the watched keys (every shard lock for a WholeKeyspace command) while
// it checks the client's dirty flag and runs its queue, so a change to a
// watched key is either before the check (the transaction aborts) or
// after the queue. While nobody watches or tracks, the journal costs two
// atomic loads per change.
//
// Lock order: shard locks, then a watchStripe's mu. WATCH runs with its
// keys' shard locks held (the dispatcher takes them) while it reads each
// key and registers it, so that no change falls between the two.

// watchedKey is one key one client watches.
type watchedKey struct {
	cl  *client
	db  int
	key string
	// live: the key held a live value at WATCH, whose expiry (ms since
	// the Unix epoch, 0: none) was exp. A key that was absent (or already
	// expired) then is changed only by a write: removing its expired
	// remains is no change, as in Redis (watchedKey.expired).
	live bool
	exp  int64
}

// watchedKeyBytes is what one watched key costs beyond its bytes (the
// struct, its two references and a share of the map), counted against
// Config.MultiMaxBytes.
const watchedKeyBytes = 96

// watchStripes is the number of independently locked parts of the watch
// table (a power of two).
const watchStripes = 64

// watchTable maps keys to the clients that watch them. It is safe for
// concurrent use.
type watchTable struct {
	// n counts (client, key) pairs; the journal looks no further while
	// it is 0.
	n    atomic.Int64
	_    [56]byte // keep n's cache line apart from the stripes' locks
	seed maphash.Seed

	stripes [watchStripes]watchStripe
}

type watchStripe struct {
	mu sync.Mutex               // guards m
	m  map[string][]*watchedKey // key -> its watchers, in every database
	_  [48]byte
}

func newWatchTable() *watchTable {
	w := &watchTable{seed: maphash.MakeSeed()}
	for i := range w.stripes {
		w.stripes[i].m = make(map[string][]*watchedKey)
	}
	return w
}

// stripe returns key's stripe; stripeOf is the same for a key held as a
// string (maphash hashes both alike).
func (w *watchTable) stripe(key []byte) *watchStripe {
	return &w.stripes[maphash.Bytes(w.seed, key)&(watchStripes-1)]
}

func (w *watchTable) stripeOf(key string) *watchStripe {
	return &w.stripes[maphash.String(w.seed, key)&(watchStripes-1)]
}

// has reports whether cl watches key in database db.
func (w *watchTable) has(cl *client, db int, key []byte) bool {
	st := w.stripe(key)
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, o := range st.m[string(key)] {
		if o.cl == cl && o.db == db {
			return true
		}
	}
	return false
}

// add registers wk unless its client already watches that key in that
// database; it reports whether it did.
func (w *watchTable) add(wk *watchedKey) bool {
	st := w.stripeOf(wk.key)
	st.mu.Lock()
	defer st.mu.Unlock()
	list := st.m[wk.key]
	for _, o := range list {
		if o.cl == wk.cl && o.db == wk.db {
			return false
		}
	}
	st.m[wk.key] = append(list, wk)
	w.n.Add(1)
	return true
}

// remove unregisters wk.
func (w *watchTable) remove(wk *watchedKey) {
	st := w.stripeOf(wk.key)
	st.mu.Lock()
	defer st.mu.Unlock()
	list := st.m[wk.key]
	for i, o := range list {
		if o == wk {
			last := len(list) - 1
			list[i] = list[last]
			list[last] = nil
			list = list[:last]
			w.n.Add(-1)
			break
		}
	}
	if len(list) == 0 {
		delete(st.m, wk.key)
	} else {
		st.m[wk.key] = list
	}
}

// touch marks the watchers of key in database db dirty: all of them for a
// write, those that saw the key live for a deletion (del).
func (w *watchTable) touch(db int, key []byte, del bool) {
	st := w.stripe(key)
	st.mu.Lock()
	for _, wk := range st.m[string(key)] {
		if wk.db == db && (wk.live || !del) {
			wk.cl.multi.dirty.Store(true)
		}
	}
	st.mu.Unlock()
}

// flush marks dirty the watchers of database db (every database when db
// is -1) that saw their key live: FLUSHDB and FLUSHALL delete it if it is
// still there, and if it is not, its deletion made them dirty already.
func (w *watchTable) flush(db int) {
	for i := range w.stripes {
		st := &w.stripes[i]
		st.mu.Lock()
		for _, list := range st.m {
			for _, wk := range list {
				if wk.live && (db < 0 || wk.db == db) {
					wk.cl.multi.dirty.Store(true)
				}
			}
		}
		st.mu.Unlock()
	}
}

// inPlaceStream reports whether v is a stream changed in place on a
// primary: its blocked readers are woken only by the commands that say so
// (XADD, XGROUP DESTROY: Service.wakeStream), as Redis's signalKeyAsReady
// is called, not by XSETID, XACK, XCLAIM, XREADGROUP and the others. A
// new stream, another kind of value, and every change a replica applies
// (which come from its primary's commands) wake them.
func inPlaceStream(v *keyspace.Value, ks *keyspace.Keyspace) bool {
	if v.Kind != keyspace.KindStream || ks.Replica() {
		return false
	}
	st, ok := v.Obj.(*stream.Stream)
	return ok && !st.Fresh()
}

// wakeStream marks k's stream ready for its blocked readers after a
// change in place that Redis signals (XADD, XGROUP DESTROY). The key's
// shard lock is held.
func (x *ctx) wakeStream(k *rkey) {
	if x.s.kwait.n.Load() != 0 {
		db, _ := k.sh.Order()
		x.s.kwait.signal(db, k.key)
	}
}

// watchJournal is the Service's link in the keyspace's journal chain
// (Service.Journal): it tells the watch table and the tracking table
// (cmd_tracking.go) about every change.
type watchJournal struct {
	w  *watchTable
	t  *trackTable
	kw *keyWaits // clients blocked on keys (stream_block.go)
	ks *keyspace.Keyspace
}

func (j *watchJournal) Put(db int, key []byte, v *keyspace.Value) {
	if j.w.n.Load() != 0 {
		j.w.touch(db, key, false)
	}
	if j.kw.n.Load() != 0 && !inPlaceStream(v, j.ks) {
		j.kw.signal(db, key)
	}
	if j.t.active.Load() != 0 {
		j.t.touch(j.ks, db, key)
	}
}

func (j *watchJournal) Delete(db int, key []byte) {
	if j.w.n.Load() != 0 {
		j.w.touch(db, key, true)
	}
	if j.kw.n.Load() != 0 {
		j.kw.signal(db, key)
	}
	if j.t.active.Load() != 0 {
		j.t.touch(j.ks, db, key)
	}
}

func (j *watchJournal) DeleteDB(db int) {
	if j.w.n.Load() != 0 {
		j.w.flush(db)
	}
	if j.kw.n.Load() != 0 {
		j.kw.signalDB(db)
	}
	if j.t.clients.Load() != 0 {
		j.t.flush()
	}
}

func (j *watchJournal) DeleteAll() {
	if j.w.n.Load() != 0 {
		j.w.flush(-1)
	}
	if j.kw.n.Load() != 0 {
		j.kw.signalDB(-1)
	}
	if j.t.clients.Load() != 0 {
		j.t.flush()
	}
}

// installWatch makes the watch and tracking tables; Journal feeds them.
func (s *Service) installWatch(trackMaxKeys int64) {
	s.watch = newWatchTable()
	s.track = newTrackTable(trackMaxKeys)
}

// Journal returns the keyspace.Journal that tells WATCH and client-side
// caching (tracking) about every change to the keyspace. Its owner puts
// it in the keyspace's journal chain (server.New); New does so itself for
// a keyspace it makes (Config.Keyspace nil).
func (s *Service) Journal() keyspace.Journal {
	return &watchJournal{w: s.watch, t: s.track, kw: &s.kwait, ks: s.ks}
}

// unwatchAll forgets every key cl watches and clears its dirty flag.
func (s *Service) unwatchAll(cl *client) {
	if len(cl.multi.watched) == 0 {
		return
	}
	for i, wk := range cl.multi.watched {
		s.watch.remove(wk)
		cl.multi.watched[i] = nil
	}
	cl.multi.watched = cl.multi.watched[:0]
	if cap(cl.multi.watched) > 64 {
		cl.multi.watched = nil // free what a long WATCH took
	}
	cl.multi.watchBytes = 0
	// Every touch that could set the flag held a stripe lock that
	// remove has taken since: none can set it again.
	cl.multi.dirty.Store(false)
}

// watchBroken reports whether EXEC must abort for a watched key: one was
// changed (dirty), or one that was live at WATCH has expired since, which
// Redis 7 counts as a change (isWatchedKeyExpired). If cl is not dirty,
// no watched key changed, so its expiry is still what WATCH saw.
func (x *ctx) watchBroken() bool {
	cl := x.cl
	if cl.multi.dirty.Load() {
		return true
	}
	for _, wk := range cl.multi.watched {
		if wk.live && wk.exp != 0 && x.clockMS() > wk.exp {
			return true
		}
	}
	return false
}

// WATCH key [key ...]
func cmdWatch(x *ctx) {
	cl, s := x.cl, x.s
	if cl.multi.on {
		x.errorReply(msgWatchInMulti)
		return
	}
	if cl.multi.dirty.Load() {
		x.ok() // as Redis: EXEC aborts anyway, no point in watching more
		return
	}
	dbi := int(cl.db.Load())
	// The limits are checked first, so that a refused WATCH watches
	// nothing (a key named twice in it counts twice).
	n, size := len(cl.multi.watched), cl.multi.watchBytes
	for _, key := range x.args[1:] {
		if s.watch.has(cl, dbi, key) {
			continue
		}
		n++
		size += int64(len(key)) + watchedKeyBytes
	}
	switch {
	case n > s.multi.maxCommands:
		x.errorReply(msgWatchKeys)
		return
	case size > s.multi.maxBytes:
		x.errorReply(msgWatchBytes)
		return
	}
	// The dispatcher holds the keys' shard locks: no change falls between
	// reading a key and registering it.
	for i := range x.keys {
		key := x.keys[i].key
		wk := &watchedKey{cl: cl, db: dbi, key: string(key)}
		if v := x.keys[i].peek(x.clockMS()); v != nil {
			wk.live, wk.exp = true, v.Exp
		}
		if s.watch.add(wk) { // else already watched
			cl.multi.watched = append(cl.multi.watched, wk)
			cl.multi.watchBytes += int64(len(key)) + watchedKeyBytes
		}
	}
	x.ok()
}

// UNWATCH
func cmdUnwatch(x *ctx) {
	x.s.unwatchAll(x.cl)
	x.ok()
}

package commands

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/cellserver/cellserver/keyspace"
)

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
			wk.cl.dirty.Store(true)
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
					wk.cl.dirty.Store(true)
				}
			}
		}
		st.mu.Unlock()
	}
}

// watchJournal is the Server's link in the keyspace's journal chain
// (Server.Journal): it tells the watch table and the tracking table
// (cmd_tracking.go) about every change.
type watchJournal struct {
	w  *watchTable
	t  *trackTable
	ks *keyspace.Keyspace
}

func (j *watchJournal) Put(db int, key []byte, v *keyspace.Value) {
	if j.w.n.Load() != 0 {
		j.w.touch(db, key, false)
	}
	if j.t.active.Load() != 0 {
		j.t.touch(j.ks, db, key)
	}
}

func (j *watchJournal) Delete(db int, key []byte) {
	if j.w.n.Load() != 0 {
		j.w.touch(db, key, true)
	}
	if j.t.active.Load() != 0 {
		j.t.touch(j.ks, db, key)
	}
}

func (j *watchJournal) DeleteDB(db int) {
	if j.w.n.Load() != 0 {
		j.w.flush(db)
	}
	if j.t.clients.Load() != 0 {
		j.t.flush()
	}
}

func (j *watchJournal) DeleteAll() {
	if j.w.n.Load() != 0 {
		j.w.flush(-1)
	}
	if j.t.clients.Load() != 0 {
		j.t.flush()
	}
}

// installWatch makes the watch and tracking tables; Journal feeds them.
func (s *Server) installWatch(trackMaxKeys int64) {
	s.watch = newWatchTable()
	s.track = newTrackTable(trackMaxKeys)
}

// Journal returns the keyspace.Journal that tells WATCH and client-side
// caching (tracking) about every change to the keyspace. Its owner puts
// it in the keyspace's journal chain (server.New); New does so itself for
// a keyspace it makes (Config.Keyspace nil).
func (s *Server) Journal() keyspace.Journal {
	return &watchJournal{w: s.watch, t: s.track, ks: s.ks}
}

// unwatchAll forgets every key cl watches and clears its dirty flag.
func (s *Server) unwatchAll(cl *client) {
	if len(cl.watched) == 0 {
		return
	}
	for i, wk := range cl.watched {
		s.watch.remove(wk)
		cl.watched[i] = nil
	}
	cl.watched = cl.watched[:0]
	if cap(cl.watched) > 64 {
		cl.watched = nil // free what a long WATCH took
	}
	cl.watchBytes = 0
	// Every touch that could set the flag held a stripe lock that
	// remove has taken since: none can set it again.
	cl.dirty.Store(false)
}

// watchBroken reports whether EXEC must abort for a watched key: one was
// changed (dirty), or one that was live at WATCH has expired since, which
// Redis 7 counts as a change (isWatchedKeyExpired). If cl is not dirty,
// no watched key changed, so its expiry is still what WATCH saw.
func (x *ctx) watchBroken() bool {
	cl := x.cl
	if cl.dirty.Load() {
		return true
	}
	for _, wk := range cl.watched {
		if wk.live && wk.exp != 0 && x.clockMS() > wk.exp {
			return true
		}
	}
	return false
}

// WATCH key [key ...]
func cmdWatch(x *ctx) {
	cl, s := x.cl, x.s
	if cl.inMulti {
		x.errorReply(msgWatchInMulti)
		return
	}
	if cl.dirty.Load() {
		x.ok() // as Redis: EXEC aborts anyway, no point in watching more
		return
	}
	dbi := int(cl.db.Load())
	// The limits are checked first, so that a refused WATCH watches
	// nothing (a key named twice in it counts twice).
	n, size := len(cl.watched), cl.watchBytes
	for _, key := range x.args[1:] {
		if s.watch.has(cl, dbi, key) {
			continue
		}
		n++
		size += int64(len(key)) + watchedKeyBytes
	}
	switch {
	case n > s.multiMax:
		x.errorReply(msgWatchKeys)
		return
	case size > s.multiBytes:
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
			cl.watched = append(cl.watched, wk)
			cl.watchBytes += int64(len(key)) + watchedKeyBytes
		}
	}
	x.ok()
}

// UNWATCH
func cmdUnwatch(x *ctx) {
	x.s.unwatchAll(x.cl)
	x.ok()
}

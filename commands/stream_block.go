package commands

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/tidwall/redcon"
)

// Blocking on keys: XREAD BLOCK (and XREADGROUP BLOCK) park the client
// (ctx.block, resp.Conn.Block: no goroutine or loop per waiter) until a
// key it waits on changes so that it can be answered, or its timeout
// passes, as Redis's blockForKeys does.
//
// A change to a key is seen through the keyspace's journal
// (watchJournal.Put and Delete, called with the key's shard lock held):
// while nobody waits that costs one atomic load; otherwise a key some
// client waits on is marked ready. Ready keys are served after the
// command that changed them (ServeRESP, as Redis's
// handleClientsBlockedOnKeys after call()), and by a shared ticker every
// keyWaitTick while anyone waits, which also notices changes made outside
// a client's command (replication, expiry) and the timeouts, read on the
// server's clock (an injected clock included), and a primary that became
// a replica (its blocked clients get Redis's UNBLOCKED error). Serving a
// key runs, with
// its shard lock held, each of its waiters' try in the order they
// blocked; a try that answers unblocks its client, which is then
// forgotten on every key it waited on.
//
// Lock order: keyWaits.serve, then shard locks, then keyWaits.mu. A
// blocking command registers under its keys' shard locks (so that no
// change falls between its check and its registration) and takes only mu.

const (
	// maxKeyWaiters bounds the clients blocked on keys at once; a
	// blocking read past it is answered with msgTooManyBlocked.
	maxKeyWaiters = 10000
	// keyWaitTick is how often timeouts and changes made outside
	// commands are looked at while anyone waits.
	keyWaitTick = 10 * time.Millisecond
	// keyServeRounds bounds the rounds of one serving pass (serving a
	// waiter can change a key, XREADGROUP's group, and mark it ready
	// again); what is left is served by the next pass.
	keyServeRounds = 4
)

// waitKey names a key in a database.
type waitKey struct {
	db  int
	key string
}

// keyTry is a blocked client's test, run with the shard lock of key held
// when key (in db) may have changed; v is its value (nil when absent). It
// returns the reply and true to unblock the client, or false to keep it
// waiting (it must not change the keyspace then).
type keyTry func(key []byte, sh *keyspace.Shard, v *keyspace.Value, nowMS int64) (reply []byte, done bool)

// keyWaiter is one client blocked on keys.
type keyWaiter struct {
	cl       *client
	keys     []waitKey
	deadline int64 // ms on the server's clock; 0: none
	try      keyTry
	timeout  []byte // the reply when the deadline passes
	resume   func(reply []byte)
	done     bool // answered or forgotten; guarded by keyWaits.mu
	// onMaster: the client blocked while this node was a primary; if it
	// becomes a replica meanwhile, the client is unblocked with an error,
	// as Redis's disconnectAllBlockedClients does.
	onMaster bool
}

// keyWaits is the registry of clients blocked on keys.
type keyWaits struct {
	serve   sync.Mutex // one serving pass at a time
	mu      sync.Mutex // guards the fields below
	m       map[waitKey][]*keyWaiter
	all     map[*keyWaiter]struct{}
	ready   map[waitKey]struct{}
	running bool // the ticker goroutine runs

	n       atomic.Int64 // waiters registered
	pending atomic.Bool  // ready is not empty
}

// blockOnKeys parks x's client on keys (in x's database) until try
// answers or timeoutMS ms pass (0: no timeout), when it is answered
// timeoutReply. The keys' shard locks must be held. It returns false,
// without blocking, when maxKeyWaiters clients are blocked already.
func (x *ctx) blockOnKeys(keys []rkey, timeoutMS int64, try keyTry, timeoutReply []byte) bool {
	s, kw := x.s, &x.s.kwait
	// Reserve the waiter's place first, so that clients blocking at once
	// on other shards cannot pass the bound together.
	if kw.n.Add(1) > maxKeyWaiters {
		kw.n.Add(-1)
		return false
	}
	w := &keyWaiter{cl: x.cl, try: try, timeout: timeoutReply, onMaster: !s.repl.IsReplica()}
	if timeoutMS > 0 {
		w.deadline = x.clockMS() + min(timeoutMS, 1<<62/1_000_000)
	}
	db := int(x.cl.db.Load())
	for _, k := range keys {
		wk := waitKey{db, string(k.key)}
		dup := false
		for _, o := range w.keys {
			dup = dup || o == wk
		}
		if !dup {
			w.keys = append(w.keys, wk)
		}
	}
	// Block before the waiter can be served: it may be as soon as the
	// shard locks are released.
	var b *blockedCall
	w.resume, b = x.block()
	b.leave = func() { kw.forget(w) }
	kw.mu.Lock()
	if kw.m == nil {
		kw.m = make(map[waitKey][]*keyWaiter)
		kw.all = make(map[*keyWaiter]struct{})
	}
	for _, wk := range w.keys {
		kw.m[wk] = append(kw.m[wk], w)
	}
	kw.all[w] = struct{}{}
	if !kw.running {
		kw.running = true
		go s.keyWaitTicker()
	}
	kw.mu.Unlock()
	return true
}

// signal marks key in db ready if anyone waits on it. The key's shard
// lock is held (the journal).
func (kw *keyWaits) signal(db int, key []byte) {
	kw.mu.Lock()
	if _, ok := kw.m[waitKey{db, string(key)}]; ok {
		if kw.ready == nil {
			kw.ready = make(map[waitKey]struct{})
		}
		kw.ready[waitKey{db, string(key)}] = struct{}{}
		kw.pending.Store(true)
	}
	kw.mu.Unlock()
}

// signalDB marks ready every key waited on in db (-1: every database):
// FLUSHDB, FLUSHALL.
func (kw *keyWaits) signalDB(db int) {
	kw.mu.Lock()
	for wk := range kw.m {
		if db < 0 || wk.db == db {
			if kw.ready == nil {
				kw.ready = make(map[waitKey]struct{})
			}
			kw.ready[wk] = struct{}{}
			kw.pending.Store(true)
		}
	}
	kw.mu.Unlock()
}

// finish forgets w on every key it waits on; it reports false if w was
// answered or forgotten already. kw.mu must be held.
func (kw *keyWaits) finish(w *keyWaiter) bool {
	if w.done {
		return false
	}
	w.done = true
	for _, wk := range w.keys {
		list := kw.m[wk]
		for i, o := range list {
			if o == w {
				copy(list[i:], list[i+1:])
				list[len(list)-1] = nil
				list = list[:len(list)-1]
				break
			}
		}
		if len(list) == 0 {
			delete(kw.m, wk)
		} else {
			kw.m[wk] = list
		}
	}
	delete(kw.all, w)
	kw.n.Add(-1)
	return true
}

// forget drops w, whose client left.
func (kw *keyWaits) forget(w *keyWaiter) {
	kw.mu.Lock()
	kw.finish(w)
	kw.mu.Unlock()
}

// serveKeyWaiters serves the keys marked ready, if any: one atomic load
// when none is.
func (s *Service) serveKeyWaiters() {
	kw := &s.kwait
	if !kw.pending.Load() {
		return
	}
	kw.serve.Lock()
	defer kw.serve.Unlock()
	for round := 0; round < keyServeRounds && kw.pending.Load(); round++ {
		kw.mu.Lock()
		ready := kw.ready
		kw.ready = nil
		kw.pending.Store(false)
		kw.mu.Unlock()
		for wk := range ready {
			s.serveKey(wk)
		}
	}
}

// serveKey runs the try of each client waiting on wk, in the order they
// blocked, with wk's shard lock held. kw.serve is held.
func (s *Service) serveKey(wk waitKey) {
	kw := &s.kwait
	kw.mu.Lock()
	list := append([]*keyWaiter(nil), kw.m[wk]...)
	kw.mu.Unlock()
	if len(list) == 0 {
		return
	}
	key := []byte(wk.key)
	sh := s.ks.DB(wk.db).Shard(key)
	sh.Lock()
	defer sh.Unlock()
	nowMS := floorDiv(s.nowNS(), 1e6)
	for _, w := range list {
		kw.mu.Lock()
		gone := w.done
		if !gone && w.cl.closed.Load() {
			kw.finish(w)
			gone = true
		}
		kw.mu.Unlock()
		if gone {
			continue
		}
		reply, ok := w.try(key, sh, sh.Lookup(key, nowMS), nowMS)
		if !ok {
			continue
		}
		kw.mu.Lock()
		mine := kw.finish(w)
		kw.mu.Unlock()
		if mine {
			w.resume(reply)
		}
	}
}

// keyWaitTicker serves timeouts and ready keys each keyWaitTick, and ends
// once nobody waits.
func (s *Service) keyWaitTicker() {
	t := time.NewTicker(keyWaitTick)
	defer t.Stop()
	kw := &s.kwait
	for range t.C {
		s.serveKeyWaiters()
		kw.serve.Lock()
		nowMS := floorDiv(s.nowNS(), 1e6)
		replica := s.repl.IsReplica()
		var expired, unblocked []*keyWaiter
		kw.mu.Lock()
		for w := range kw.all {
			switch {
			case w.cl.closed.Load():
				kw.finish(w)
			case w.onMaster && replica:
				kw.finish(w)
				unblocked = append(unblocked, w)
			case w.deadline != 0 && nowMS >= w.deadline:
				kw.finish(w)
				expired = append(expired, w)
			}
		}
		stop := len(kw.all) == 0 && !kw.pending.Load()
		if stop {
			kw.running = false
		}
		kw.mu.Unlock()
		kw.serve.Unlock()
		for _, w := range expired {
			w.resume(w.timeout)
		}
		for _, w := range unblocked {
			w.resume(redcon.AppendError(nil, msgUnblockedReplica))
		}
		if stop {
			return
		}
	}
}

// keyWaitCount returns how many clients are blocked on keys.
func (s *Service) keyWaitCount() int { return int(s.kwait.n.Load()) }

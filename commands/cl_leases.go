package commands

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
	"github.com/tidwall/redcon"
)

// Leases (CL.ACQUIRE, CL.RELEASE): at most limit concurrent leases on a
// key, each held by a token until it is released or its lease time ends
// (limiter.Leases, in the key's value: see leasesOf and leasesValue in
// cl_value.go). CL.ACQUIRE ... WAIT queues a refused client (below).

// parseAcquireWait parses CL.ACQUIRE's options after token: WAIT timeout
// [QUEUE n]. wait is 0 without WAIT.
func parseAcquireWait(opts [][]byte) (wait int64, queue int, msg wireErr) {
	queue = defaultLeaseQueue
	for i := 0; i < len(opts); i++ {
		switch {
		case eqFold(opts[i], "wait") && wait == 0 && i+1 < len(opts):
			d, ok := parsePeriod(opts[i+1])
			if !ok {
				return 0, 0, msgAcquireWait
			}
			wait = d
			i++
		case eqFold(opts[i], "queue") && i+1 < len(opts):
			n, ok := parseRedisInt(opts[i+1])
			if !ok || n < 1 || n > maxLeaseQueue {
				return 0, 0, msgAcquireQueue
			}
			queue = int(n)
			i++
		default:
			return 0, 0, msgSyntax
		}
	}
	if wait == 0 && len(opts) > 0 {
		return 0, 0, msgAcquireQueueNoWait
	}
	return wait, queue, noErr
}

// CL.ACQUIRE key limit lease token [WAIT timeout [QUEUE n]] [MS]
func cmdAcquire(x *ctx) {
	args, ms := trailingMS(x.args[1:])
	if len(args) < 4 {
		x.errorReply(errWrongArity(x.spec.Name))
		return
	}
	wait, queue, msg := parseAcquireWait(args[4:])
	if msg != noErr {
		x.errorReply(msg)
		return
	}
	var c check
	if msg := c.parse(x.spec.Name, args[:4]); msg != noErr {
		x.errorReply(msg)
		return
	}
	c.ms = ms
	k := &x.keys[0] // c.key
	now := x.clockNS()
	// Waiters queued before come first: give them what is free.
	x.s.serveLeaseQueue(k, now)
	v := k.lookup(floorDiv(now, 1e6))
	if msg := c.decide(v, now, &x.cl.scratch.leases); msg != noErr {
		x.errorReply(msg)
		return
	}
	if c.t.limited && wait > 0 && !x.inExec {
		lw := &leaseWaiter{
			k:     rkey{key: append([]byte(nil), k.key...), hash: k.hash, sh: k.sh, slot: k.slot},
			limit: c.limit, per: c.per, token: append([]byte(nil), c.token...), ms: ms,
			deadline: now + wait, cl: x.cl,
		}
		// Block before the waiter can be served: resume may run as soon
		// as the shard lock is released.
		if x.s.lwaitRoom(lw, queue) {
			lw.resume, _ = x.block() // Service.Close drops the waiter
			x.s.enqueueLease(lw, queue)
			return
		}
	}
	if c.needsRoom(v) && !x.s.ks.CanInsert() {
		x.oom()
		return
	}
	c.apply(k, v, now, &x.cl.scratch.leases)
	x.decided(c.t.limited, c.key)
	x.tuple(c.t)
}

// CL.RELEASE key token
func cmdRelease(x *ctx) {
	lk := x.limiterKey()
	k, now, v := lk.k, lk.now, lk.v
	if v == nil {
		x.int(0)
		return
	}
	if v.Kind != keyspace.KindLeases {
		x.errorReply(msgWrongType)
		return
	}
	ls := leasesOf(v, &x.cl.scratch.leases)
	released, exp := ls.Release(now, x.args[2])
	if ls.Held(now) == 0 {
		k.del(lk.nowMS)
	} else {
		k.replace(v, leasesValue(ls, &x.cl.scratch.leases, exp))
	}
	x.s.serveLeaseQueue(k, now) // a waiter may take what was freed
	if released {
		x.int(1)
	} else {
		x.int(0)
	}
}

// The WAIT queue.
//
// CL.ACQUIRE ... WAIT timeout [QUEUE n]: a client refused a lease waits,
// blocked (resp.Conn.Block: no goroutine or server thread is held), in a
// FIFO queue per key until a lease frees or its timeout passes.
//
// A queue is served (its head waiters granted leases while leases are
// free, timed-out and disconnected waiters removed) with the key's shard
// lock held: by CL.RELEASE and CL.ACQUIRE on the key, at once, and by a
// ticker every leaseWaitTick while any waiter exists, which notices leases
// that expired or keys that were deleted, and timeouts. Timeouts are read
// on the server's clock (an injected clock included), so a timeout is
// noticed at most leaseWaitTick after it passes. Lock order: shard, then
// leaseWaits.mu.

const (
	// defaultLeaseQueue is QUEUE's default: the most waiters per key.
	defaultLeaseQueue = 100
	// maxLeaseQueue is the largest QUEUE.
	maxLeaseQueue = 10000
	// leaseWaitTick is how often queues are served while waiters exist.
	leaseWaitTick = 10 * time.Millisecond
)

// leaseQKey names a queue: the key in its shard (and so its database).
type leaseQKey struct {
	sh  *keyspace.Shard
	key string
}

type leaseWaiter struct {
	k        rkey // key bytes owned by the waiter
	limit    int64
	per      int64 // lease, ns
	token    []byte
	ms       bool
	deadline int64 // ns on the server's clock
	cl       *client
	resume   func([]byte)
}

type leaseWaits struct {
	mu      sync.Mutex
	q       map[leaseQKey][]*leaseWaiter // FIFO; no empty slice is kept
	n       atomic.Int64                 // waiters in all queues
	running bool                         // the ticker goroutine runs
}

// nowNS reads the server's clock outside a command.
func (s *Service) nowNS() int64 {
	if s.realClock {
		return time.Now().UnixNano()
	}
	return s.clock().UnixNano()
}

// leaseWaitCounts returns how many queues and waiters exist.
func (s *Service) leaseWaitCounts() (queues, waiters int) {
	w := &s.leases
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range w.q {
		waiters += len(q)
	}
	return len(w.q), waiters
}

// enqueueLease adds lw to its key's queue unless it holds max waiters
// (then it returns false). The key's shard lock is held.
func (s *Service) enqueueLease(lw *leaseWaiter, max int) bool {
	w := &s.leases
	qk := leaseQKey{lw.k.sh, string(lw.k.key)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.q[qk]) >= max {
		return false
	}
	if w.q == nil {
		w.q = make(map[leaseQKey][]*leaseWaiter)
	}
	w.q[qk] = append(w.q[qk], lw)
	w.n.Add(1)
	if !w.running {
		w.running = true
		go s.leaseTicker()
	}
	return true
}

// serveLeaseQueue serves the queue of k (its shard locked) at now.
func (s *Service) serveLeaseQueue(k *rkey, now int64) {
	w := &s.leases
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	s.serveLocked(leaseQKey{k.sh, string(k.key)}, now)
	w.mu.Unlock()
}

// serveLocked grants leases to the head waiters of queue qk while leases
// are free, then answers and removes the waiters whose timeout passed or
// whose client left. The shard lock and w.mu are held.
func (s *Service) serveLocked(qk leaseQKey, now int64) {
	w := &s.leases
	q := w.q[qk]
	if len(q) == 0 {
		return
	}
	if s.repl.IsReplica() && !s.repl.writable {
		// Became a read-only replica while they waited: no lease can be
		// taken here any more (Redis unblocks its blocked clients so).
		for _, lw := range q {
			lw.resume(redcon.AppendError(nil, msgUnblockedReplica))
		}
		clear(q)
		w.n.Add(-int64(len(q)))
		delete(w.q, qk)
		return
	}
	nowMS := floorDiv(now, 1e6)
	var scratch limiter.Leases
	keep := q[:0]
	blocked := false // a waiter before this one could not be served
	for _, lw := range q {
		if lw.cl.closed.Load() {
			continue
		}
		v := lw.k.lookup(nowMS)
		if v != nil && v.Kind != keyspace.KindLeases {
			lw.resume(redcon.AppendError(nil, msgWrongType))
			continue
		}
		ls := leasesOf(v, &scratch)
		d := ls.Acquire(now, lw.per, lw.limit, lw.token)
		if !blocked && !d.Limited {
			if !s.ks.CanInsert() {
				lw.resume(redcon.AppendError(nil, msgOOM))
				continue
			}
			lw.k.replace(v, leasesValue(ls, &scratch, ls.Apply(now, lw.per, lw.token)))
			if reply := appendTuple(nil, decisionTuple(d, lw.ms)); s.repl.SyncOn() {
				s.resumeAcked(lw.resume, reply)
			} else {
				lw.resume(reply)
			}
			continue
		}
		blocked = true
		if now >= lw.deadline {
			t := decisionTuple(d, lw.ms)
			t.limited, t.remaining = true, 0
			t.retry = max(t.retry, 0)
			lw.resume(appendTuple(nil, t))
			continue
		}
		keep = append(keep, lw)
	}
	w.keep(qk, q, keep)
}

// keep makes keep, the waiters of q (qk's queue) still waiting, in order
// and in q's array, the queue: the others' slots are cleared and counted
// out, and an empty queue is removed. w.mu must be held.
func (w *leaseWaits) keep(qk leaseQKey, q, keep []*leaseWaiter) {
	for i := len(keep); i < len(q); i++ {
		q[i] = nil
	}
	w.n.Add(int64(len(keep) - len(q)))
	if len(keep) == 0 {
		delete(w.q, qk)
	} else {
		w.q[qk] = keep
	}
}

// dropLeaseWaiters removes the waiters of cl, which left.
func (s *Service) dropLeaseWaiters(cl *client) {
	w := &s.leases
	if w.n.Load() == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for qk, q := range w.q {
		keep := q[:0]
		for _, lw := range q {
			if lw.cl != cl {
				keep = append(keep, lw)
			}
		}
		w.keep(qk, q, keep)
	}
}

// leaseTicker serves every queue each leaseWaitTick, and ends once no
// waiter is left.
func (s *Service) leaseTicker() {
	t := time.NewTicker(leaseWaitTick)
	defer t.Stop()
	for range t.C {
		if !s.serveLeaseQueues() {
			return
		}
	}
}

// serveLeaseQueues serves every queue once. It returns false, and marks
// the ticker stopped, when no queue exists.
func (s *Service) serveLeaseQueues() bool {
	w := &s.leases
	w.mu.Lock()
	if len(w.q) == 0 {
		w.running = false
		w.mu.Unlock()
		return false
	}
	keys := make([]leaseQKey, 0, len(w.q))
	for qk := range w.q {
		keys = append(keys, qk)
	}
	w.mu.Unlock()
	for _, qk := range keys {
		qk.sh.Lock()
		now := s.nowNS()
		w.mu.Lock()
		s.serveLocked(qk, now)
		w.mu.Unlock()
		qk.sh.Unlock()
	}
	return true
}

// lwaitRoom reports whether lw's queue holds fewer than max waiters.
func (s *Service) lwaitRoom(lw *leaseWaiter, max int) bool {
	w := &s.leases
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.q[leaseQKey{lw.k.sh, string(lw.k.key)}]) < max
}

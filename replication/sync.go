package replication

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Acknowledged replication (sync-replicas): see the package documentation,
// section "Acknowledged replication".

// DefaultSyncTimeout is the default sync-replicas-timeout: how long a
// reply waits for its acknowledgements before it becomes NOREPLICAS.
const DefaultSyncTimeout = 500 * time.Millisecond

// syncState is a primary's acknowledged replication: the setting, the
// offset acknowledged by enough replicas, the replies held for it, and
// the fence.
type syncState struct {
	n       atomic.Int32 // sync-replicas: 0 is asynchronous replication
	timeout atomic.Int64 // sync-replicas-timeout, ns
	// acked is the largest offset that at least n online replicas have
	// acknowledged (0 when none; -1 after a role change). It only grows
	// while the node stays a primary: an acknowledgement counts even if
	// the replica that gave it leaves later.
	acked atomic.Int64
	// pending is len(holds), readable without mu: while it is not zero
	// the senders ask for acknowledgements (GETACK) and do not gather.
	pending atomic.Int32
	fenced  atomic.Bool

	mu       sync.Mutex // guards the fields below
	holds    []hold     // in the order registered: deadlines ascending
	timer    *time.Timer
	notify   []func()
	waitc    chan struct{} // closed and replaced when acked grows or a hold expires
	fenceOff int64         // the offset whose acknowledgement ends the fence
	since    time.Time     // when the fence started

	held, refused, fences atomic.Int64
	ackWaitNS             atomic.Int64 // total wait of the holds acknowledged
	ackWaitCount          atomic.Int64
	ackHist               [ackBuckets + 1]atomic.Int64
}

// hold is a batch of replies waiting for offset off.
type hold struct {
	off      int64
	start    time.Time
	deadline time.Time
}

// AckBuckets are the upper bounds, in seconds, of the histogram of the
// time held replies waited for their acknowledgement (SyncStats.AckWait).
var AckBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

const ackBuckets = 13 // len(AckBuckets)

// SetSync sets sync-replicas and sync-replicas-timeout (a timeout of 0
// means DefaultSyncTimeout). With n of 0 replication is asynchronous and
// nothing is held or fenced. A change releases every reply held so far,
// each judged by what is acknowledged then.
func (r *Replication) SetSync(n int, timeout time.Duration) {
	if timeout <= 0 {
		timeout = DefaultSyncTimeout
	}
	sy := &r.sync
	sy.timeout.Store(int64(timeout))
	old := sy.n.Swap(int32(max(n, 0)))
	if int(old) == n {
		return
	}
	sy.mu.Lock()
	sy.acked.Store(0)
	sy.holds = sy.holds[:0]
	sy.pending.Store(0)
	wasFenced := sy.fenced.Swap(false)
	sy.mu.Unlock()
	if wasFenced {
		r.log.Info("replication: fencing ended: sync-replicas changed", "sync_replicas", n)
	}
	r.refreshSync()
	r.releaseSync(true)
}

// SyncSettings returns sync-replicas and sync-replicas-timeout.
func (r *Replication) SyncSettings() (n int, timeout time.Duration) {
	return int(r.sync.n.Load()), time.Duration(r.sync.timeout.Load())
}

// SyncOn reports whether this node is a primary whose changes wait for
// acknowledgements (sync-replicas above 0).
func (r *Replication) SyncOn() bool { return r.sync.n.Load() > 0 && !r.replica.Load() }

// SyncAcked reports whether offset off is acknowledged by sync-replicas
// replicas.
func (r *Replication) SyncAcked(off int64) bool { return off <= r.sync.acked.Load() }

// SyncFenced reports whether a primary with sync-replicas must refuse
// writes at once: fewer than sync-replicas replicas are online, or a
// held reply went unacknowledged for the whole timeout and the replicas
// have not caught up with the offset of that moment since.
func (r *Replication) SyncFenced() bool {
	n := int(r.sync.n.Load())
	if n == 0 || r.replica.Load() {
		return false
	}
	return r.sync.fenced.Load() || r.onlineReplicas() < n
}

// onlineReplicas counts the replicas whose copy is complete.
func (r *Replication) onlineReplicas() int {
	c := 0
	if p := r.senders.Load(); p != nil {
		for _, rc := range *p {
			if rc.online.Load() {
				c++
			}
		}
	}
	return c
}

// Hold registers replies that wait for offset off to be acknowledged and
// returns their deadline, after which they leave as NOREPLICAS. The
// senders are told to ask their replicas for an acknowledgement at once
// (GETACK). Functions given to OnSync are called when the offset is
// acknowledged or the deadline passes.
func (r *Replication) Hold(off int64) (deadline time.Time) {
	sy := &r.sync
	now := time.Now()
	deadline = now.Add(time.Duration(sy.timeout.Load()))
	if r.SyncAcked(off) {
		return deadline
	}
	sy.held.Add(1)
	sy.mu.Lock()
	sy.holds = append(sy.holds, hold{off: off, start: now, deadline: deadline})
	sy.pending.Store(int32(len(sy.holds)))
	if sy.timer == nil {
		sy.timer = time.AfterFunc(time.Until(deadline), r.expireHolds)
	} else if len(sy.holds) == 1 {
		sy.timer.Reset(time.Until(deadline))
	}
	sy.mu.Unlock()
	if p := r.senders.Load(); p != nil {
		for _, rc := range *p {
			rc.hurry()
		}
	}
	return deadline
}

// OnSync registers fn to be called, from any goroutine, whenever held
// replies may leave (acknowledged, or past their deadline).
func (r *Replication) OnSync(fn func()) {
	r.sync.mu.Lock()
	r.sync.notify = append(r.sync.notify, fn)
	r.sync.mu.Unlock()
}

// WaitSync waits until off is acknowledged or deadline passes, and
// reports whether it was acknowledged (for a connection that writes its
// replies itself instead of having an event loop hold them).
func (r *Replication) WaitSync(off int64, deadline time.Time) bool {
	sy := &r.sync
	for {
		if r.SyncAcked(off) {
			return true
		}
		d := time.Until(deadline)
		if d <= 0 || !r.SyncOn() {
			return r.SyncAcked(off)
		}
		sy.mu.Lock()
		if sy.waitc == nil {
			sy.waitc = make(chan struct{})
		}
		c := sy.waitc
		sy.mu.Unlock()
		if r.SyncAcked(off) {
			return true
		}
		t := time.NewTimer(d)
		select {
		case <-c:
		case <-t.C:
		}
		t.Stop()
	}
}

// CountSyncRefused adds n replies refused with NOREPLICAS by sync-replicas
// (held past their deadline, or refused while fenced) to the count INFO
// and the metrics show. Unless the fence is on already, it looks at the
// held replies' deadlines now rather than when the timer runs, so that a
// client told NOREPLICAS finds the fence on.
func (r *Replication) CountSyncRefused(n int) {
	r.sync.refused.Add(int64(n))
	if !r.sync.fenced.Load() {
		r.expireHolds()
	}
}

// refreshSync recomputes the offset acknowledged by sync-replicas
// replicas after an acknowledgement, and ends the fence once they have
// caught up. It releases the holds that are acknowledged.
func (r *Replication) refreshSync() {
	sy := &r.sync
	n := int(sy.n.Load())
	if n == 0 || r.replica.Load() {
		return
	}
	var buf [8]int64
	acks := buf[:0]
	if p := r.senders.Load(); p != nil {
		for _, rc := range *p {
			if rc.online.Load() {
				acks = append(acks, rc.ack.Load())
			}
		}
	}
	if len(acks) < n {
		return
	}
	slices.Sort(acks)
	off := acks[len(acks)-n] // the n-th largest
	for {
		cur := sy.acked.Load()
		if off <= cur {
			break
		}
		if sy.acked.CompareAndSwap(cur, off) {
			break
		}
	}
	if sy.fenced.Load() {
		sy.mu.Lock()
		end := sy.fenced.Load() && off >= sy.fenceOff
		var d time.Duration
		if end {
			sy.fenced.Store(false)
			d = time.Since(sy.since)
		}
		sy.mu.Unlock()
		if end {
			r.log.Info("replication: fencing ended: the replicas acknowledged the stream again", "sync_replicas", n,
				"acked_offset", off, "fenced_for", d.Round(time.Millisecond))
		}
	}
	if sy.pending.Load() > 0 {
		r.releaseSync(false)
	}
}

// releaseSync forgets the holds that are acknowledged and wakes whoever
// waits for held replies: the event loops if a hold was acknowledged, or
// whatever (all) the setting or the role changed.
func (r *Replication) releaseSync(all bool) {
	sy := &r.sync
	acked := sy.acked.Load()
	now := time.Now()
	sy.mu.Lock()
	// Holds are in deadline order, and their offsets nearly so (loops
	// register them concurrently): look at each.
	n := len(sy.holds)
	sy.holds = slices.DeleteFunc(sy.holds, func(h hold) bool {
		if h.off <= acked {
			sy.observeAck(now.Sub(h.start))
			return true
		}
		return false
	})
	i := n - len(sy.holds)
	sy.pending.Store(int32(len(sy.holds)))
	var fns []func()
	if i > 0 || all {
		// Wake the event loops only when a batch of replies may leave:
		// an acknowledgement that releases none would cost each loop a
		// wake-up for nothing.
		fns = sy.notify
	}
	c := sy.waitc
	sy.waitc = nil
	sy.mu.Unlock()
	if c != nil {
		close(c)
	}
	for _, fn := range fns {
		fn()
	}
}

func (sy *syncState) observeAck(d time.Duration) {
	sy.ackWaitNS.Add(int64(d))
	sy.ackWaitCount.Add(1)
	s := d.Seconds()
	i, _ := slices.BinarySearch(AckBuckets, s)
	sy.ackHist[i].Add(1)
}

// expireHolds runs at the earliest deadline: a hold past its deadline and
// not acknowledged starts the fence (unless it is on already); the replies
// held are woken either way.
func (r *Replication) expireHolds() {
	sy := &r.sync
	now := time.Now()
	acked := sy.acked.Load()
	sy.mu.Lock()
	i, missed := 0, false
	for ; i < len(sy.holds) && !sy.holds[i].deadline.After(now); i++ {
		if sy.holds[i].off > acked {
			missed = true
		} else {
			sy.observeAck(now.Sub(sy.holds[i].start))
		}
	}
	sy.holds = slices.Delete(sy.holds, 0, i)
	sy.pending.Store(int32(len(sy.holds)))
	if len(sy.holds) > 0 {
		sy.timer.Reset(time.Until(sy.holds[0].deadline))
	}
	start := missed && sy.n.Load() > 0 && !r.replica.Load() && !sy.fenced.Load()
	if start {
		sy.fenced.Store(true)
		sy.fenceOff = r.Offset()
		sy.since = now
		sy.fences.Add(1)
	}
	fns := sy.notify
	c := sy.waitc
	sy.waitc = nil
	sy.mu.Unlock()
	if start {
		r.log.Warn("replication: fencing started: replies went unacknowledged for sync-replicas-timeout; refusing writes with NOREPLICAS until the replicas acknowledge the stream",
			"sync_replicas", sy.n.Load(), "sync_replicas_timeout", time.Duration(sy.timeout.Load()),
			"acked_offset", acked, "offset", sy.fenceOff, "online_replicas", r.onlineReplicas())
	}
	if c != nil {
		close(c)
	}
	for _, fn := range fns {
		fn()
	}
}

// resetSync forgets what was acknowledged and held, and the fence, at a
// role change: offsets acknowledged under one primary say nothing about
// the stream of the next. Replies held until then leave as NOREPLICAS.
func (r *Replication) resetSync() {
	sy := &r.sync
	sy.mu.Lock()
	sy.acked.Store(-1)
	sy.holds = sy.holds[:0]
	sy.pending.Store(0)
	wasFenced := sy.fenced.Swap(false)
	sy.mu.Unlock()
	if wasFenced {
		r.log.Info("replication: fencing ended: role change")
	}
	r.releaseSync(true)
}

// SyncStats are the figures of acknowledged replication.
type SyncStats struct {
	Replicas    int
	Timeout     time.Duration
	AckedOffset int64
	Fenced      bool
	Pending     int   // batches of replies held now
	Held        int64 // batches of replies held so far
	Refused     int64 // replies refused with NOREPLICAS
	Fences      int64 // times the fence started
	// AckWait is the histogram of the time held replies waited for their
	// acknowledgement: counts per AckBuckets bound (cumulative, as
	// Prometheus's), their total and their sum in seconds.
	AckWait      []uint64
	AckWaitCount uint64
	AckWaitSum   float64
}

// SyncStats returns the current figures.
func (r *Replication) SyncStats() SyncStats {
	sy := &r.sync
	st := SyncStats{Replicas: int(sy.n.Load()), Timeout: time.Duration(sy.timeout.Load()),
		AckedOffset: max(sy.acked.Load(), 0), Fenced: r.SyncFenced(), Pending: int(sy.pending.Load()),
		Held: sy.held.Load(), Refused: sy.refused.Load(), Fences: sy.fences.Load(),
		AckWaitCount: uint64(sy.ackWaitCount.Load()), AckWaitSum: time.Duration(sy.ackWaitNS.Load()).Seconds()}
	var cum uint64
	st.AckWait = make([]uint64, len(AckBuckets))
	for i := range AckBuckets {
		cum += uint64(sy.ackHist[i].Load())
		st.AckWait[i] = cum
	}
	return st
}

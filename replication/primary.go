package replication

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cellserver/cellserver/keyspace"
)

// replicaConn is the primary's side of one replica's link.
type replicaConn struct {
	r       *Replication
	nc      net.Conn
	ip      string       // the address INFO lists (REPLCONF ip-address, or the peer's)
	port    int          // its client port (REPLCONF listening-port)
	ack     atomic.Int64 // the offset acknowledged, at most sent
	sent    atomic.Int64 // the offset up to which the stream was written to it
	ackTime atomic.Int64 // unix ns of the last ack (or of the link's start)
	online  atomic.Bool  // its full copy is complete (or it continued)
	sending atomic.Bool  // a full copy is being sent
	getack  bool         // it understands 'G' (REPLCONF capa CapaGetAck)
	wake    chan struct{}
	urgent  chan struct{} // replies are held: write and ask for an ack now
	done    chan struct{}
	once    sync.Once
}

func (rc *replicaConn) close() {
	rc.once.Do(func() {
		close(rc.done)
		rc.nc.Close()
	})
}

func (rc *replicaConn) kick() {
	select {
	case rc.wake <- struct{}{}:
	default:
	}
}

// hurry tells the sender that replies wait for this replica's
// acknowledgement: it writes what it has at once, without gathering, and
// asks for an acknowledgement (GETACK).
func (rc *replicaConn) hurry() {
	select {
	case rc.urgent <- struct{}{}:
	default:
	}
}

// wakeSenders tells every replica's sender there is more to send.
func (r *Replication) wakeSenders() {
	if p := r.senders.Load(); p != nil {
		for _, rc := range *p {
			rc.kick()
		}
	}
}

// publishSenders refreshes the lock-free copy of the replicas. r.mu held.
func (r *Replication) publishSenders() {
	s := slices.Clone(r.replicas)
	r.senders.Store(&s)
}

// Sync is a primary's answer to PSYNC: Reply goes to the replica first,
// then, once the connection is handed over (resp.Conn.Hijack), Serve
// streams to it.
type Sync struct {
	Reply    string // "+FULLRESYNC <replid> <offset>\r\n" or "+CONTINUE <replid>\r\n"
	r        *Replication
	full     bool
	from     int64
	ip       string
	port     int
	getack   bool
	deadline time.Time // until then it counts as a link being handed over
}

// SetGetAck records that the replica announced CapaGetAck: the primary
// may ask it for an acknowledgement at once ('G' frames) when replies
// wait for one (sync-replicas).
func (sy *Sync) SetGetAck(ok bool) { sy.getack = ok }

// ErrMaxReplicas reports a PSYNC refused because Config.MaxReplicas
// replicas are linked already.
var ErrMaxReplicas = errors.New("replication: too many replicas")

// handoverTimeout is how long an answered PSYNC counts as a link before
// its connection reaches Serve: the connection layer hands it over at
// once once the reply is written; one that never arrives (its client
// left first) stops counting then.
const handoverTimeout = 10 * time.Second

// Psync decides how a replica that asks for replid at offset (Redis's
// PSYNC arguments: "?" and -1 for a first sync) resumes: from the backlog
// when it holds the replica's history ("+CONTINUE"), else with a full copy
// ("+FULLRESYNC"). ip and port are the replica's announced address, node
// the node ID it gave with REPLCONF node-id ("" for none). It refuses a
// replica past Config.MaxReplicas (ErrMaxReplicas) and one that this node
// replicates from (ErrLoop).
func (r *Replication) Psync(replid string, offset int64, ip string, port int, node string) (*Sync, error) {
	sy := &Sync{r: r, ip: ip, port: port}
	r.mu.Lock()
	if err := r.checkLoopLocked(node); err != nil {
		r.mu.Unlock()
		return nil, err
	}
	r.pruneHandoverLocked()
	if max := r.cfg.MaxReplicas; max > 0 && len(r.replicas)+len(r.handover) >= max {
		r.mu.Unlock()
		r.log.Warn("replication: refused a replica: maxclients replica links already", "replica", net.JoinHostPort(ip, strconv.Itoa(port)), "maxclients", max)
		return nil, ErrMaxReplicas
	}
	sy.deadline = time.Now().Add(handoverTimeout) // not Config.Clock: tests move that one by hours
	r.handover = append(r.handover, sy)
	r.countLinksLocked()
	r.activateBacklog()
	r.mu.Unlock()
	r.blMu.Lock()
	defer r.blMu.Unlock()
	// Redis's masterTryPartialResynchronization: the ID must be ours, or
	// our previous one up to the offset where it ended; the offset must be
	// in the backlog.
	idOK := replid == r.replID || (replid == r.replID2 && offset <= r.secondOffset)
	if replid != "?" && idOK && offset-1 >= r.bl.start && offset-1 <= r.bl.end {
		sy.from = offset - 1
		sy.Reply = "+CONTINUE " + r.replID + "\r\n"
		r.syncPartialOK.Add(1)
		return sy, nil
	}
	if replid != "?" {
		r.syncPartialErr.Add(1)
	}
	r.syncFull.Add(1)
	sy.full = true
	sy.from = r.bl.end
	sy.Reply = "+FULLRESYNC " + r.replID + " " + strconv.FormatInt(r.bl.end, 10) + "\r\n"
	return sy, nil
}

// pruneHandoverLocked forgets the syncs whose connection never came.
// r.mu held.
func (r *Replication) pruneHandoverLocked() {
	if len(r.handover) == 0 {
		return
	}
	now := time.Now()
	r.handover = slices.DeleteFunc(r.handover, func(sy *Sync) bool { return now.After(sy.deadline) })
	r.countLinksLocked()
}

// countLinksLocked refreshes nLinks. r.mu held.
func (r *Replication) countLinksLocked() {
	r.nLinks.Store(int32(len(r.replicas) + len(r.handover)))
}

// Serve streams to the replica on nc until the link fails or is closed;
// rest is what the replica sent after PSYNC. It returns when the link
// ends.
func (sy *Sync) Serve(nc net.Conn, rest []byte) {
	r := sy.r
	rc := &replicaConn{r: r, nc: nc, ip: sy.ip, port: sy.port, getack: sy.getack,
		wake: make(chan struct{}, 1), urgent: make(chan struct{}, 1), done: make(chan struct{})}
	rc.ack.Store(sy.from)
	rc.sent.Store(sy.from)
	rc.ackTime.Store(r.clock().UnixNano())
	r.mu.Lock()
	r.handover = slices.DeleteFunc(r.handover, func(x *Sync) bool { return x == sy })
	if r.stopping.Load() {
		r.countLinksLocked()
		r.mu.Unlock()
		nc.Close()
		return
	}
	r.replicas = append(r.replicas, rc)
	r.countLinksLocked()
	r.publishSenders()
	r.mu.Unlock()
	defer func() {
		rc.close()
		r.mu.Lock()
		r.replicas = slices.DeleteFunc(r.replicas, func(x *replicaConn) bool { return x == rc })
		r.countLinksLocked()
		r.publishSenders()
		r.mu.Unlock()
		r.checkWaiters()
		r.refreshSync()
	}()
	go rc.readAcks(io.MultiReader(&byteReader{rest}, nc))
	err := rc.send(sy.full, sy.from)
	if err != nil && !isClosed(err) {
		r.log.Warn("replication: link to replica ended", "replica", net.JoinHostPort(rc.ip, strconv.Itoa(rc.port)), "err", err)
	} else {
		r.log.Info("replication: link to replica closed", "replica", net.JoinHostPort(rc.ip, strconv.Itoa(rc.port)))
	}
}

type byteReader struct{ b []byte }

func (b *byteReader) Read(p []byte) (int, error) {
	if len(b.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.b)
	b.b = b.b[n:]
	return n, nil
}

// isClosed reports whether err only says the link was closed (by either
// side), not that it failed.
func isClosed(err error) bool {
	return err == io.EOF || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// readAcks reads the replica's ack frames.
func (rc *replicaConn) readAcks(src io.Reader) {
	defer rc.close()
	// An ack's payload is one uvarint.
	fr := frameReader{br: bufio.NewReaderSize(src, 4096), max: binary.MaxVarintLen64}
	for {
		t, p, _, err := fr.next()
		if err != nil {
			return
		}
		if t != frameAck {
			rc.r.log.Warn("replication: unexpected frame from a replica; closing its link", "type", string(rune(t)))
			return
		}
		off, n := binary.Uvarint(p)
		if n <= 0 {
			return
		}
		// A replica cannot have applied what it was not sent: an ack
		// beyond counts as the offset sent, or WAIT and INFO would count
		// data the replica does not have.
		rc.ack.Store(int64(min(off, uint64(rc.sent.Load()))))
		rc.ackTime.Store(rc.r.clock().UnixNano())
		if rc.r.nWaiters.Load() > 0 {
			rc.r.checkWaiters()
		}
		if rc.r.sync.n.Load() > 0 {
			rc.r.refreshSync()
		}
	}
}

// sendChunk is how many bytes a sender gathers before it writes.
const sendChunk = 256 << 10

// send writes the full copy (if full), interleaved with the change stream
// from offset pos, then the change stream, until the link ends.
//
// The full copy is not a point-in-time image: each shard is copied under
// its lock while the stream goes on. It is still exact once the stream is
// applied after it: every change frame carries a whole value (or a whole
// deletion), so a key's final state is that of its last change in the
// stream when it has one since pos, and its copied state (unchanged since
// pos) otherwise. A stream's change is a delta instead, carrying the
// stream's version: the replica applies it to the copy when the copy is
// older, skips it when the copy holds it already, and skips it too when
// the key is not copied yet (its copy, taken later, will hold it). The replica counts as in sync once 'E' arrives, which is
// sent after the stream up to the end of the copy.
func (rc *replicaConn) send(full bool, pos int64) error {
	r := rc.r
	var buf []byte
	var err error
	write := func() error {
		if len(buf) == 0 {
			return nil
		}
		// buf holds the stream up to pos: sent before the write, which
		// the replica may acknowledge before Write returns.
		rc.sent.Store(pos)
		rc.nc.SetWriteDeadline(time.Now().Add(linkTimeout))
		_, err := rc.nc.Write(buf)
		buf = buf[:0]
		return err
	}
	// drain appends the stream from pos up to now.
	drain := func() error {
		for {
			r.blMu.Lock()
			end := r.bl.end
			if pos == end {
				r.blMu.Unlock()
				return nil
			}
			n0 := len(buf)
			want := int(min(end-pos, int64(sendChunk)))
			buf = slices.Grow(buf, want)[:n0+want]
			n, ok := r.bl.read(pos, buf[n0:])
			r.blMu.Unlock()
			if !ok {
				return fmt.Errorf("replica fell out of the backlog (offset %d; raise --repl-backlog-size)", pos)
			}
			buf = buf[:n0+n]
			pos += int64(n)
			if len(buf) >= sendChunk {
				if err := write(); err != nil {
					return err
				}
			}
		}
	}
	if full {
		rc.sending.Store(true)
		start := time.Now()
		keys := 0
		for d := 0; d < r.ks.NumDB(); d++ {
			db := r.ks.DB(d)
			for i := 0; i < db.NumShards(); i++ {
				sh := db.ShardAt(i)
				sh.Lock()
				sh.Range(0, func(key string, v *keyspace.Value) bool {
					buf = appendPut(buf, frameSnap, d, []byte(key), v)
					keys++
					return true
				})
				sh.Unlock()
				if err = drain(); err != nil {
					return err
				}
				if len(buf) >= sendChunk {
					if err = write(); err != nil {
						return err
					}
				}
				select {
				case <-rc.done:
					return net.ErrClosed
				default:
				}
			}
		}
		if err = drain(); err != nil {
			return err
		}
		buf = appendEmpty(buf, frameSnapEnd)
		if err = write(); err != nil {
			return err
		}
		rc.sending.Store(false)
		r.log.Info("replication: full copy sent to replica", "replica", net.JoinHostPort(rc.ip, strconv.Itoa(rc.port)),
			"keys", keys, "elapsed", time.Since(start).Round(time.Millisecond))
	}
	rc.online.Store(true)
	rc.ackTime.Store(r.clock().UnixNano())
	r.refreshSync()
	gather := time.NewTimer(time.Hour)
	gather.Stop()
	asked := int64(-1) // the stream position of the last 'G' sent
	for {
		if err = drain(); err != nil {
			return err
		}
		if rc.getack && r.sync.pending.Load() > 0 && pos > rc.ack.Load() && pos > asked {
			// Replies wait for acknowledgements: have this replica
			// acknowledge as soon as it has applied the stream so far,
			// rather than after its usual gathering (once per
			// position: a 'G' alone, after one that asked for the
			// same, would cost a write for nothing).
			buf = appendEmpty(buf, frameGetAck)
			asked = pos
		}
		if err = write(); err != nil {
			return err
		}
		select {
		case <-rc.done:
			return net.ErrClosed
		case <-rc.wake:
		case <-rc.urgent:
			continue
		}
		// Let the changes of a busy moment gather into one write, as
		// Redis writes a replica's buffer once per event-loop round:
		// a write per change would cost the primary a system call and
		// a goroutine switch for every change. Replies held for an
		// acknowledgement (sync-replicas) cut the gathering short.
		if r.offset.Load()-pos < sendChunk && r.sync.pending.Load() == 0 {
			gather.Reset(gatherDelay)
			select {
			case <-rc.done:
				return net.ErrClosed
			case <-gather.C:
			case <-rc.urgent:
				gather.Stop()
			}
		}
	}
}

// gatherDelay is how long a sender lets changes gather after the first
// one arrives before it writes them: at most this much replication lag
// is added, and a busy primary writes each replica about 2000 times a
// second instead of once per change.
const gatherDelay = 500 * time.Microsecond

// waiter is a blocked WAIT.
type waiter struct {
	off   int64
	n     int
	done  func(int)
	timer *time.Timer
	once  sync.Once
}

func (w *waiter) finish(count int) {
	w.once.Do(func() {
		if w.timer != nil {
			w.timer.Stop()
		}
		w.done(count)
	})
}

// Acked returns how many replicas acknowledged offset off (WAIT).
func (r *Replication) Acked(off int64) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ackedLocked(off)
}

func (r *Replication) ackedLocked(off int64) int {
	n := 0
	for _, rc := range r.replicas {
		if rc.online.Load() && rc.ack.Load() >= off {
			n++
		}
	}
	return n
}

// Wait calls done, once, with the number of replicas that acknowledged
// offset off: as soon as n have, when timeout passes (0: never), or when
// the node stops being a primary. done runs on another goroutine. cancel
// forgets the wait without calling done, for a client that left (a WAIT
// without a timeout would otherwise be kept until replicas acknowledge);
// after done it does nothing.
func (r *Replication) Wait(off int64, n int, timeout time.Duration, done func(int)) (cancel func()) {
	w := &waiter{off: off, n: n, done: done}
	r.mu.Lock()
	if c := r.ackedLocked(off); c >= n || r.link != nil || r.stopping.Load() {
		r.mu.Unlock()
		go done(c)
		return func() {}
	}
	r.waiters = append(r.waiters, w)
	r.nWaiters.Add(1)
	if timeout > 0 {
		w.timer = time.AfterFunc(timeout, func() {
			r.mu.Lock()
			removed := r.removeWaiter(w)
			c := r.ackedLocked(off)
			r.mu.Unlock()
			if removed {
				w.finish(c)
			}
		})
	}
	r.mu.Unlock()
	// Ask for acks now rather than at the next keepalive: a keepalive
	// makes every replica acknowledge what it has.
	r.cron()
	return func() {
		r.mu.Lock()
		removed := r.removeWaiter(w)
		r.mu.Unlock()
		if removed {
			w.once.Do(func() {
				if w.timer != nil {
					w.timer.Stop()
				}
			})
		}
	}
}

// Waiting returns the number of WAITs waiting.
func (r *Replication) Waiting() int { return int(r.nWaiters.Load()) }

// removeWaiter removes w and reports whether it was there. r.mu held.
func (r *Replication) removeWaiter(w *waiter) bool {
	i := slices.Index(r.waiters, w)
	if i < 0 {
		return false
	}
	r.waiters = slices.Delete(r.waiters, i, i+1)
	r.nWaiters.Add(-1)
	return true
}

// checkWaiters answers the WAITs whose count is reached.
func (r *Replication) checkWaiters() {
	type answer struct {
		w *waiter
		c int
	}
	var ready []answer
	r.mu.Lock()
	for i := 0; i < len(r.waiters); {
		w := r.waiters[i]
		if c := r.ackedLocked(w.off); c >= w.n {
			ready = append(ready, answer{w, c})
			r.removeWaiter(w)
			continue
		}
		i++
	}
	r.mu.Unlock()
	for _, a := range ready {
		a.w.finish(a.c)
	}
}

// answerWaiters answers every WAIT with its count now.
func (r *Replication) answerWaiters() {
	r.mu.Lock()
	ws := r.waiters
	r.waiters = nil
	r.nWaiters.Store(0)
	counts := make([]int, len(ws))
	for i, w := range ws {
		counts[i] = r.ackedLocked(w.off)
	}
	r.mu.Unlock()
	for i, w := range ws {
		w.finish(counts[i])
	}
}

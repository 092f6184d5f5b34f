package replication

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cellserver/cellserver/persistence"
)

// Link states, in ROLE's words.
const (
	stateNone int32 = iota
	stateConnect
	stateConnecting
	stateHandshake
	stateSync
	stateConnected
)

var stateNames = [...]string{"none", "connect", "connecting", "handshake", "sync", "connected"}

// link is a replica's side of its link to its primary.
type link struct {
	r    *Replication
	host string
	port int

	state     atomic.Int32
	downSince atomic.Int64 // unix ns the link went down; 0: never up
	lastIO    atomic.Int64 // unix ns of the last byte from the primary

	// dead is set (under Replication.blMu) when the node stops following
	// this link: from then on the link applies nothing. Changes are
	// applied and appended to the backlog under blMu, so a promotion sees
	// each change either applied and in the backlog, or neither.
	dead bool

	// fullNext makes the next sync a full one (PSYNC ? -1): the stream
	// held a frame this replica refused, so continuing it would refuse
	// the same frame again. Used by the link's goroutine only.
	fullNext bool

	mu      sync.Mutex
	nc      net.Conn
	stopped bool
	quit    chan struct{}
	exited  chan struct{}
}

func newLink(r *Replication, host string, port int) *link {
	l := &link{r: r, host: host, port: port, quit: make(chan struct{}), exited: make(chan struct{})}
	l.state.Store(stateConnect)
	return l
}

// kill marks the link dead. The caller holds Replication.blMu.
func (l *link) kill() { l.dead = true }

// stop ends the link's connection and goroutine without waiting for it:
// it may run inside EXEC, with every shard lock held, while the link's
// goroutine waits for one. The link must be dead already.
func (l *link) stop() {
	l.mu.Lock()
	if !l.stopped {
		l.stopped = true
		close(l.quit)
		if l.nc != nil {
			l.nc.Close()
		}
	}
	l.mu.Unlock()
}

// dropConn closes the current connection (CLIENT KILL TYPE master); the
// link reconnects.
func (l *link) dropConn() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nc == nil {
		return false
	}
	l.nc.Close()
	return true
}

func (l *link) addr() string { return net.JoinHostPort(l.host, strconv.Itoa(l.port)) }

// run keeps the link up until stop.
func (l *link) run() {
	defer close(l.exited)
	r := l.r
	for {
		err := l.syncOnce()
		if l.state.Load() == stateConnected || l.downSince.Load() == 0 && l.state.Load() >= stateSync {
			l.downSince.Store(r.clock().UnixNano())
		}
		l.state.Store(stateConnect)
		l.mu.Lock()
		l.nc = nil
		stopped := l.stopped
		l.mu.Unlock()
		if stopped {
			return
		}
		r.log.Warn("replication: link to primary down; retrying", "primary", l.addr(), "err", err)
		select {
		case <-l.quit:
			return
		case <-time.After(retryPeriod):
		}
	}
}

func (r *Replication) dial(addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	if r.cfg.TLS != nil {
		return tls.DialWithDialer(&d, "tcp", addr, r.cfg.TLS)
	}
	return d.Dial("tcp", addr)
}

// errStopped ends syncOnce when the link was stopped.
var errStopped = errors.New("replication: link stopped")

// syncOnce connects, synchronises and applies the stream until the link
// fails.
func (l *link) syncOnce() error {
	r := l.r
	l.state.Store(stateConnecting)
	nc, err := r.dialer(l.addr())
	if err != nil {
		return err
	}
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		nc.Close()
		return errStopped
	}
	l.nc = nc
	l.mu.Unlock()
	defer nc.Close()
	l.state.Store(stateHandshake)
	nc.SetDeadline(time.Now().Add(linkTimeout))
	br := bufio.NewReaderSize(nc, handshakeLine)
	cmd := func(args ...string) (string, error) {
		var b []byte
		b = fmt.Appendf(b, "*%d\r\n", len(args))
		for _, a := range args {
			b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := nc.Write(b); err != nil {
			return "", err
		}
		// One line, at most the reader's buffer: a reply that does not
		// end costs no more than that.
		raw, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return "", fmt.Errorf("%w: a reply line to %s longer than %d bytes", errStream, strings.ToUpper(args[0]), handshakeLine)
		}
		if err != nil {
			return "", err
		}
		line := strings.TrimRight(string(raw), "\r\n")
		if strings.HasPrefix(line, "-") {
			return line, fmt.Errorf("primary replied %q to %s", line[1:], strings.ToUpper(args[0]))
		}
		return line, nil
	}
	if r.cfg.MasterAuth != "" {
		args := []string{"AUTH", r.cfg.MasterAuth}
		if r.cfg.MasterUser != "" {
			args = []string{"AUTH", r.cfg.MasterUser, r.cfg.MasterAuth}
		}
		if _, err := cmd(args...); err != nil {
			return err
		}
	}
	if _, err := cmd("PING"); err != nil {
		return err
	}
	port := int(r.port.Load())
	if r.cfg.AnnouncePort != 0 {
		port = r.cfg.AnnouncePort
	}
	if _, err := cmd("REPLCONF", "listening-port", strconv.Itoa(port)); err != nil {
		return err
	}
	if r.cfg.AnnounceIP != "" {
		if _, err := cmd("REPLCONF", "ip-address", r.cfg.AnnounceIP); err != nil {
			return err
		}
	}
	// Both stream versions: a primary of version 1 knows only the first
	// (and sends it), one of version 2 requires the second.
	// CapaGetAck: this replica acknowledges at once when asked.
	if _, err := cmd("REPLCONF", "capa", capabilityV1, "capa", capabilityV2, "capa", Capability, "capa", CapaGetAck); err != nil {
		return err
	}
	// Tell the primary who this node is: it refuses a node it replicates
	// from itself (a loop), and answers the nodes it replicates from.
	line, err := cmd("REPLCONF", "node-id", r.nodeID)
	var chain []string
	switch {
	case err != nil && strings.Contains(line, "Unrecognized REPLCONF option"):
		// A primary of stream version 1: it tells nothing.
	case err != nil:
		if strings.Contains(line, "replication loop") {
			r.log.Error("replication: the primary refuses this node: it replicates from this node (directly or through other replicas), so following it would make a loop; this node stays unsynced until REPLICAOF names another primary",
				"primary", l.addr(), "node_id", r.nodeID)
			return fmt.Errorf("%w: %w", ErrLoop, err)
		}
		return err
	default:
		chain, err = parseChain(line)
		if err != nil {
			return err
		}
		if slices.Contains(chain, r.nodeID) {
			r.log.Error("replication: the primary replicates from this node (directly or through other replicas): following it would make a loop; this node stays unsynced until REPLICAOF names another primary",
				"primary", l.addr(), "node_id", r.nodeID)
			return ErrLoop
		}
	}
	r.blMu.Lock()
	id, off := r.replID, r.bl.end
	if !r.blActive || l.fullNext {
		id = "?"
	}
	r.blMu.Unlock()
	psyncOff := strconv.FormatInt(off+1, 10)
	if id == "?" {
		psyncOff = "-1"
	}
	line, err = cmd("PSYNC", id, psyncOff)
	if err != nil {
		return err
	}
	fields := strings.Fields(line)
	switch {
	case len(fields) == 3 && fields[0] == "+FULLRESYNC":
		newOff, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil || newOff < 0 || len(fields[1]) != 40 {
			return fmt.Errorf("bad PSYNC reply %q", line)
		}
		if err := l.beginFull(fields[1], newOff, chain); err != nil {
			return err
		}
		l.fullNext = false
	case len(fields) == 2 && fields[0] == "+CONTINUE" && len(fields[1]) == 40 && !l.fullNext:
		if err := l.beginPartial(fields[1], chain); err != nil {
			return err
		}
	default:
		return fmt.Errorf("bad PSYNC reply %q", line)
	}
	return l.apply(nc, br)
}

// handshakeLine bounds a line the primary replies during the handshake.
const handshakeLine = 64 << 10

// Capability is the capability a replica announces, and a primary
// requires: the stream's version 3, whose put frames may carry a stream's
// delta (persistence.DeltaFormat) rather than its whole value. Version 2
// split changes longer than 64 KiB into frames of at most 64 KiB, which
// version 3 keeps. A primary that does not know it is not a cellserver
// primary, or an older one (which knows capabilityV1 or capabilityV2).
const Capability = "cellserver-values-3"

// capabilityV2 is the second stream version's capability (no deltas),
// which a replica also announces so that it can follow an older primary.
const capabilityV2 = "cellserver-values-2"

// CapaGetAck is the capability of a replica that acknowledges at once
// when its primary asks ('G' frames): a primary sends them only to
// replicas that announced it, while replies wait for acknowledgements
// (sync-replicas).
const CapaGetAck = "cellserver-getack"

// capabilityV1 is the first stream version's capability, which a
// replica also announces so that it can follow an older primary.
const capabilityV1 = "cellserver-values-1"

// ErrLoop reports a replication loop: a node asked to replicate from a
// node that replicates from it (directly or through other replicas), or
// from itself.
var ErrLoop = errors.New("replication: replication loop")

// maxChain bounds the node IDs a primary lists as its own primaries.
const maxChain = 32

// parseChain reads a primary's answer to REPLCONF node-id: "+OK" and the
// node IDs of the primary and of the primaries above it.
func parseChain(line string) ([]string, error) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != "+OK" || len(f) > 1+maxChain {
		return nil, fmt.Errorf("bad REPLCONF node-id reply %q", line)
	}
	for _, id := range f[1:] {
		if !validID(id) {
			return nil, fmt.Errorf("bad REPLCONF node-id reply %q", line)
		}
	}
	return f[1:], nil
}

// validID reports whether id has the form of a node ID: 40 hex digits.
func validID(id string) bool {
	if len(id) != 40 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// beginFull drops every key and resets the backlog for a full copy;
// chain is the primary's answer to REPLCONF node-id.
func (l *link) beginFull(id string, off int64, chain []string) error {
	r := l.r
	r.mu.Lock()
	if r.link != l {
		r.mu.Unlock()
		return errStopped
	}
	r.setUpstream(chain)
	reps := slices.Clone(r.replicas)
	r.mu.Unlock()
	for _, rc := range reps {
		rc.close() // they must take the new history too
	}
	r.log.Info("replication: full sync from primary: flushing old data", "primary", l.addr(), "replid", id, "offset", off)
	r.ks.LockAll()
	defer r.ks.UnlockAll()
	r.blMu.Lock()
	defer r.blMu.Unlock()
	if l.dead {
		return errStopped
	}
	l.state.Store(stateSync)
	r.ks.FlushAll(true)
	r.replID, r.replID2, r.secondOffset = id, zeroID, -1
	r.blActive = true
	r.bl.reset(r.size, off)
	r.offset.Store(off)
	return nil
}

// beginPartial continues from the local offset; a new replication ID
// (the primary was promoted) becomes ours, the old one our second. chain
// is the primary's answer to REPLCONF node-id.
func (l *link) beginPartial(id string, chain []string) error {
	r := l.r
	r.mu.Lock()
	if r.link != l {
		r.mu.Unlock()
		return errStopped
	}
	newChain := r.setUpstream(chain)
	r.mu.Unlock()
	r.blMu.Lock()
	if l.dead {
		r.blMu.Unlock()
		return errStopped
	}
	changed := id != r.replID
	if changed {
		r.replID2, r.secondOffset, r.replID = r.replID, r.bl.end+1, id
	}
	r.blMu.Unlock()
	// This node's replicas must learn its new primaries too (they
	// reconnect and ask again).
	if changed || newChain {
		r.mu.Lock()
		reps := slices.Clone(r.replicas)
		r.mu.Unlock()
		for _, rc := range reps {
			rc.close()
		}
	}
	l.state.Store(stateConnected)
	l.downSince.Store(0)
	r.log.Info("replication: continuing from the primary's backlog (partial resync)", "primary", l.addr(), "offset", r.Offset())
	return nil
}

// apply reads frames and applies them until the link fails. A second
// goroutine acknowledges the offset (see acker).
func (l *link) apply(nc net.Conn, br *bufio.Reader) error {
	r := l.r
	fr := frameReader{br: br, max: r.maxFrame, maxChange: uint64(max(r.cfg.MaxChange, 0))}
	ackc := make(chan struct{}, 1)
	askc := make(chan struct{}, 1)
	stop := make(chan struct{})
	defer close(stop)
	go l.acker(nc, ackc, askc, stop)
	numDB := r.ks.NumDB()
	for frames := 0; ; frames++ {
		// The deadline and the clock are read once per read from the
		// socket (and every 256 frames), not per frame: a read brings
		// hundreds of frames.
		fresh := br.Buffered() == 0 || frames%256 == 0
		if fresh {
			nc.SetReadDeadline(time.Now().Add(linkTimeout))
		}
		t, p, raw, err := fr.next()
		if errors.Is(err, ErrChangeTooLarge) {
			l.fullNext = true
			r.log.Error("replication: the primary sent a change larger than this replica's maxmemory; dropping the link, the next sync is a full one",
				"primary", l.addr(), "err", err, "max_change", r.cfg.MaxChange)
		}
		if errors.Is(err, ErrFrameTooLarge) {
			// Continuing the stream would meet the same frame again: drop
			// the link and start over with a full copy.
			l.fullNext = true
			r.log.Error("replication: the primary sent a frame larger than this replica accepts; dropping the link, the next sync is a full one (raise --proto-max-bulk-len to at least the primary's if it is legitimate)",
				"primary", l.addr(), "err", err, "max_frame", r.maxFrame)
		}
		if err != nil {
			return err
		}
		if fresh {
			l.lastIO.Store(r.clock().UnixNano())
		}
		switch {
		case t == frameGetAck:
			// Acknowledge now: everything before it is applied.
			if l.state.Load() == stateConnected {
				select {
				case askc <- struct{}{}:
				default:
				}
			}
			continue
		case t == frameSnapEnd:
			if l.state.Load() != stateSync {
				return fmt.Errorf("%w: end of a full copy outside one", errStream)
			}
			l.state.Store(stateConnected)
			l.downSince.Store(0)
			r.fullSyncsDone.Add(1)
			r.log.Info("replication: full sync from primary finished", "primary", l.addr(), "offset", r.Offset())
		case t == frameSnap || frameIsChange(t):
			c, kept, err := decodeChangeOwned(t, p, numDB, true)
			if err != nil {
				return err
			}
			fr.given = kept // the value holds the buffer: read on into a new one
			split := raw == nil
			if t == frameSnap {
				raw, split = nil, false
			}
			if r.cfg.WaitRoom != nil {
				r.cfg.WaitRoom()
			}
			var payload []byte
			if split {
				payload = p
			}
			if err := l.applyChange(&c, raw, payload); err != nil {
				if !errors.Is(err, errStopped) {
					// The replica's value is not the one the primary's
					// delta starts from: only a full copy mends it.
					l.fullNext = true
					r.log.Error("replication: a stream change from the primary does not apply to this replica's copy; dropping the link, the next sync is a full one",
						"primary", l.addr(), "key", string(c.key), "err", err)
				}
				return err
			}
			if raw != nil || split {
				r.wakeSenders()
			}
		default:
			return fmt.Errorf("%w: unexpected frame type %q", errStream, t)
		}
		// Once nothing more is buffered, have the offset acknowledged.
		if br.Buffered() == 0 && l.state.Load() == stateConnected {
			select {
			case ackc <- struct{}{}:
			default:
			}
		}
	}
}

// ackGather is how long the acker lets applied changes gather before it
// acknowledges them: a busy replica acknowledges about 1000 times a
// second, not once per read, and WAIT waits at most this much longer.
// A primary holding replies for acknowledgements (sync-replicas) asks
// for one ('G'), which is sent at once.
const ackGather = time.Millisecond

// acker acknowledges the applied offset when apply signals (ackc), at
// most once per ackGather, or at once when the primary asks (askc), until
// stop.
func (l *link) acker(nc net.Conn, ackc, askc <-chan struct{}, stop <-chan struct{}) {
	var ack []byte
	acked := int64(-1)
	t := time.NewTimer(time.Hour)
	t.Stop()
	gathering := false
	for {
		select {
		case <-stop:
			return
		case <-ackc:
			if gathering {
				// Acknowledged less than ackGather ago: wait for the
				// rest of it, or for the primary to ask.
				select {
				case <-stop:
					return
				case <-t.C:
				case <-askc:
					t.Stop()
				}
			}
		case <-askc:
			t.Stop()
		case <-t.C:
			gathering = false
			continue
		}
		if off := l.r.Offset(); off != acked {
			ack = appendAck(ack[:0], off)
			nc.SetWriteDeadline(time.Now().Add(linkTimeout))
			if _, err := nc.Write(ack); err != nil {
				nc.Close()
				return
			}
			acked = off
		}
		t.Reset(ackGather)
		gathering = true
	}
}

// applyChange applies one change to the keyspace (whose journal passes it
// on to persistence, WATCH and client-side caching, but not to the
// backlog) and appends its frames to the backlog: raw as they arrived, or
// for a change that arrived split, split (its payload) split again the
// same way; neither for a full-copy entry. If the link is dead it does
// nothing and returns errStopped. A stream's delta is applied to the
// replica's copy as it stands; one that does not apply (the copies
// differ) returns the error, applying nothing (the link drops and the
// next sync is a full copy), except during a full copy, where the key's
// shard may not have been copied yet (the copy holds the change); a
// malformed one deletes the key first; one the copy already holds
// changes nothing but still enters the backlog. The shard locks are taken before
// blMu, as the journal takes them.
func (l *link) applyChange(c *change, raw, split []byte) error {
	r := l.r
	var unlock func()
	switch c.t {
	case framePut, frameSnap, frameDelete:
		sh := r.ks.DB(c.db).Shard(c.key)
		sh.Lock()
		unlock = sh.Unlock
	case frameFlushDB, frameFlushAll, framePing:
		r.ks.LockAll()
		unlock = r.ks.UnlockAll
		if c.t == framePing {
			r.ks.UnlockAll()
			unlock = func() {}
		}
	}
	defer unlock()
	r.blMu.Lock()
	defer r.blMu.Unlock()
	if l.dead {
		return errStopped
	}
	switch {
	case c.delta != nil:
		sh := r.ks.DB(c.db).Shard(c.key)
		v, applied, err := persistence.ApplyChange(sh.Stored(c.key), c.delta)
		switch {
		case errors.Is(err, persistence.ErrNotBase) && l.state.Load() == stateSync:
			// During a full copy, a change made since the copy began
			// can come before its key's shard is copied (the replica
			// dropped every key): the copy, taken later, holds it.
		case errors.Is(err, persistence.ErrCorrupt):
			// The copy may hold part of the delta: drop it rather
			// than serve it until the full sync replaces everything.
			sh.Delete(c.key, 0)
			return err
		case err != nil:
			return err
		case applied:
			sh.Set(c.key, v)
		}
	case c.t == framePut || c.t == frameSnap:
		r.ks.DB(c.db).Shard(c.key).Set(c.key, c.v)
	case c.t == frameDelete:
		r.ks.DB(c.db).Shard(c.key).Delete(c.key, 0)
	case c.t == frameFlushDB:
		r.ks.DB(c.db).Flush(true)
	case c.t == frameFlushAll:
		r.ks.FlushAll(true)
	}
	switch {
	case raw != nil:
		r.appendLocked(raw)
	case split != nil:
		writeFrame(r.bl.write, c.t, split)
		r.offset.Store(r.bl.end)
	}
	return nil
}

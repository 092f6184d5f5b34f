package commands

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cellserver/cellserver/replication"
	"github.com/cellserver/cellserver/resp"
	"github.com/tidwall/redcon"
)

// replRole is the node's replication (its methods promoted) and the
// settings that refuse commands by role (Config.ReplicaPriority ...
// MinReplicasMaxLag, KillReplicationLinks).
type replRole struct {
	*replication.Replication
	priority    int  // INFO slave_priority
	writable    bool // replica-read-only no
	noStale     bool // replica-serve-stale-data no
	minReplicas int  // min-replicas-to-write
	minLag      time.Duration
	killLinks   func(kind string) int // CLIENT KILL TYPE master|replica
}

// replState is what one client told the primary with REPLCONF before
// PSYNC, and how far the stream had got after its last write.
type replState struct {
	port   int    // listening-port
	ip     string // ip-address
	capa   bool   // a cellserver replica of the current stream version (capa replication.Capability)
	getack bool   // it acknowledges when asked (capa replication.CapaGetAck)
	node   string // node-id: the replica's node ID, checked for loops
	// off is the replication offset after the client's last write command
	// (what WAIT waits for).
	off int64
}

// replCheck refuses a command the node's replication role forbids, as
// Redis's processCommand does: writes while too few good replicas are
// attached (min-replicas-to-write), writes on a read-only replica, and
// commands without the stale flag while a replica that must not serve
// stale data has no link. It returns the error, or noErr.
func (s *Service) replCheck(cl *client, sp *Spec) wireErr {
	write := sp.Flags&Write != 0 || sp.Name == "exec" && queuedWrite(cl.multi.queue)
	replica := s.repl.IsReplica()
	if write && !replica && s.repl.minReplicas > 0 && s.repl.GoodReplicas(s.repl.minLag) < s.repl.minReplicas {
		return msgNoReplicas
	}
	if write && !replica && s.repl.SyncFenced() {
		// sync-replicas: too few replicas acknowledge in time; nothing
		// changes until they do (the fence, see syncHeld).
		s.repl.CountSyncRefused(1)
		return msgNoReplicas
	}
	if write && replica && !s.repl.writable {
		return msgReadOnly
	}
	if replica && s.repl.noStale && sp.Flags&Stale == 0 && !s.repl.LinkUp() {
		return msgMasterDown
	}
	return noErr
}

// Replication returns the node's replication state.
func (s *Service) Replication() *replication.Replication { return s.repl.Replication }

// REPLICAOF host port | NO ONE (and SLAVEOF).
func cmdReplicaOf(x *ctx) {
	s := x.s
	if strings.EqualFold(string(x.args[1]), "no") && strings.EqualFold(string(x.args[2]), "one") {
		s.repl.NoOne()
		x.ok()
		return
	}
	port, err := strconv.ParseInt(string(x.args[2]), 10, 64)
	if err != nil || port < 0 || port > 65535 {
		x.errorReply(msgInvalidMasterPort)
		return
	}
	host := string(x.args[1])
	if s.repl.ReplicaOf(host, int(port)) {
		x.status("OK Already connected to specified master")
		return
	}
	x.ok()
}

// ROLE.
func cmdRole(x *ctx) {
	ro := x.s.repl.Role()
	if !ro.Replica {
		x.array(3)
		x.bulkStr("master")
		x.int(ro.Offset)
		x.array(len(ro.Replicas))
		for _, rep := range ro.Replicas {
			x.array(3)
			x.bulkStr(rep.IP)
			x.bulkStr(strconv.Itoa(rep.Port))
			x.bulkStr(strconv.FormatInt(rep.Ack, 10))
		}
		return
	}
	x.array(5)
	x.bulkStr("slave")
	x.bulkStr(ro.Host)
	x.int(int64(ro.Port))
	x.bulkStr(ro.State)
	x.int(ro.Offset)
}

// WAIT numreplicas timeout.
func cmdWait(x *ctx) {
	s := x.s
	if s.repl.IsReplica() {
		x.errorReply(msgWaitReplica)
		return
	}
	n, err := strconv.ParseInt(string(x.args[1]), 10, 64)
	if err != nil {
		x.errorReply(msgNotInt)
		return
	}
	ms, ok := waitTimeout(x, x.args[2])
	if !ok {
		return
	}
	off := x.cl.repl.off
	if c := s.repl.Acked(off); int64(c) >= n || x.inExec {
		x.int(int64(c))
		return
	}
	resume, b := x.block()
	b.leave = s.repl.Wait(off, int(min(n, 1<<30)), time.Duration(ms)*time.Millisecond, func(c int) {
		resume(redcon.AppendInt(nil, int64(c)))
	})
}

// waitTimeout parses the timeout in ms of WAIT and WAITAOF, answering
// their error when it is not a non-negative integer.
func waitTimeout(x *ctx, arg []byte) (int64, bool) {
	ms, err := strconv.ParseInt(string(arg), 10, 64)
	if err != nil {
		x.errorReply(msgTimeoutNotInt)
		return 0, false
	}
	if ms < 0 {
		x.errorReply(msgTimeoutNegative)
		return 0, false
	}
	return ms, true
}

// REPLCONF option value ... (from a replica, before PSYNC).
func cmdReplconf(x *ctx) {
	if len(x.args)%2 == 0 {
		x.errorReply(msgSyntax)
		return
	}
	st := &x.cl.repl
	reply := "OK"
	for i := 1; i+1 < len(x.args); i += 2 {
		opt, val := strings.ToLower(string(x.args[i])), string(x.args[i+1])
		switch opt {
		case "listening-port":
			p, err := strconv.Atoi(val)
			if err != nil || p < 0 || p > 65535 {
				x.errorReply(msgNotInt)
				return
			}
			st.port = p
		case "ip-address":
			st.ip = val
		case "capa":
			switch val {
			case replication.Capability:
				st.capa = true
			case replication.CapaGetAck:
				st.getack = true
			}
		case "node-id":
			// A cellserver replica names itself: refused if this node
			// replicates from it; else told which nodes this one
			// replicates from, to refuse them in turn.
			ids, err := x.s.repl.Hello(val)
			if err != nil {
				x.errorReply(msgReplicationLoop)
				return
			}
			st.node = val
			reply = "OK " + ids
		case "ack", "getack", "rdb-only", "rdb-filter-only":
			// Redis's own stream options: cellserver's stream acknowledges
			// in its own frames.
		default:
			x.errorReply(errUnrecognizedReplconf(string(x.args[i])))
			return
		}
	}
	x.status(reply)
}

// PSYNC replid offset (and SYNC): the connection becomes a replication
// link to a cellserver replica.
func cmdPsync(x *ctx) {
	s := x.s
	st := x.cl.repl
	if !st.capa {
		x.errorReply(msgNotCellserverReplica)
		return
	}
	if s.repl.IsReplica() && !s.repl.LinkUp() {
		x.errorReply(msgNoMasterLink)
		return
	}
	replid, off := "?", int64(-1)
	if x.spec.Name == "psync" {
		replid = string(x.args[1])
		o, err := strconv.ParseInt(string(x.args[2]), 10, 64)
		if err != nil {
			x.errorReply(msgNotInt)
			return
		}
		off = o
	}
	ip := st.ip
	if ip == "" {
		ip, _, _ = net.SplitHostPort(x.c.RemoteAddr())
	}
	sy, err := s.repl.Psync(replid, off, ip, st.port, st.node)
	switch {
	case errors.Is(err, replication.ErrMaxReplicas):
		// Replicas are clients (Redis): past maxclients, refused as a
		// client past it is, and closed.
		x.errorReply(msgMaxClients)
		x.c.CloseAfterReply()
		return
	case err != nil:
		x.errorReply(msgReplicationLoop)
		return
	}
	sy.SetGetAck(st.getack)
	x.c.Out = append(x.c.Out, sy.Reply...)
	x.c.Hijack(func(nc net.Conn, rest []byte) { sy.Serve(nc, rest) })
}

// syncReplies are the replies of a client's batch that wait for the
// acknowledgement of sync-replicas replicas: each reply of a command
// that changed a key, with the replication offset after it. The batch
// leaves once the largest offset is acknowledged, or as NOREPLICAS for
// every reply whose offset is not, once the deadline passes.
type syncReplies struct {
	spans    []syncSpan
	off      int64     // the largest offset in spans; 0: nothing held
	deadline time.Time // zero until the batch's hold is registered (syncReady)
}

// syncSpan is one held reply: its position in the pending replies
// (resp.Conn.Pending) and the offset it waits for.
type syncSpan struct {
	start, end int
	off        int64
}

// noReplicasReply is what a held reply becomes when its replicas did not
// acknowledge it in time.
var noReplicasReply = []byte("-" + msgNoReplicas + "\r\n")

// syncHold holds the reply the command just appended from mark on
// (sync-replicas): it leaves when sync-replicas replicas acknowledged the
// stream up to this change.
func (s *Service) syncHold(x *ctx, mark int) {
	sy := &x.cl.sync
	off := s.repl.Offset()
	sy.spans = append(sy.spans, syncSpan{start: mark, end: x.c.Pending(), off: off})
	sy.off = max(sy.off, off)
}

// resumeAcked hands a blocked client a reply that reports a change made
// for it by another (a lease granted to a CL.ACQUIRE ... WAIT waiter) as
// a held reply leaves: once sync-replicas replicas acknowledged the
// stream up to now, or as NOREPLICAS past the timeout. The caller holds
// the changed key's shard lock. A goroutine waits for each such reply
// (grants come one per lease released, not per command).
func (s *Service) resumeAcked(resume func([]byte), reply []byte) {
	off := s.repl.Offset()
	deadline := s.repl.Hold(off)
	go func() {
		acked := s.repl.WaitSync(off, deadline)
		if n, _ := s.repl.SyncSettings(); acked || n == 0 {
			resume(reply)
			return
		}
		s.repl.CountSyncRefused(1)
		resume(noReplicasReply)
	}()
}

// syncReady reports whether cl's held replies may leave: acknowledged,
// past their deadline, or no longer to be held (sync-replicas turned off,
// or the node became a replica). The first call registers the batch's
// hold with replication, which starts its deadline and asks the replicas
// to acknowledge at once.
func (s *Service) syncReady(cl *client) bool {
	sy := &cl.sync
	if s.repl.SyncAcked(sy.off) || !s.repl.SyncOn() {
		return true
	}
	if sy.deadline.IsZero() {
		sy.deadline = s.repl.Hold(sy.off)
		return s.repl.SyncAcked(sy.off)
	}
	return !time.Now().Before(sy.deadline)
}

// syncRelease prepares cl's held replies to leave: it waits (on a
// connection without an event loop, which writes its own replies) until
// they may, then turns each reply whose offset is not acknowledged into
// NOREPLICAS. The change stays applied on this node; the client, told it
// failed, does not count it as admitted: the limiter may under-admit,
// never over-admit.
func (s *Service) syncRelease(c *resp.Conn, cl *client) {
	sy := &cl.sync
	if !s.syncReady(cl) {
		s.repl.WaitSync(sy.off, sy.deadline)
	}
	if n, _ := s.repl.SyncSettings(); n > 0 {
		refused := 0
		for i := len(sy.spans) - 1; i >= 0; i-- {
			if sp := sy.spans[i]; !s.repl.SyncAcked(sp.off) {
				c.ReplaceReply(sp.start, sp.end, noReplicasReply)
				refused++
			}
		}
		if refused > 0 {
			s.repl.CountSyncRefused(refused)
		}
	}
	clear(sy.spans)
	sy.spans = sy.spans[:0]
	if cap(sy.spans) > 1024 {
		sy.spans = nil
	}
	sy.off, sy.deadline = 0, time.Time{}
}

// AOFSyncer is what WAITAOF asks of the persistence write path
// (persistence.Writer): the changes queued so far, and whether (or when)
// they are synced to disk.
type AOFSyncer interface {
	Seq() uint64
	Synced(seq uint64) bool
	OnSynced(seq uint64, fn func()) (cancel func())
}

// WAITAOF numlocal numreplicas timeout (Redis 7.2): [local, replicas], local
// 1 once the changes queued before the command (this client's writes
// among them) are synced to the data directory's change log, replicas the
// replicas that acknowledged this client's last write. A replica's
// acknowledgement means it applied the changes, not that it synced them
// to its own disk (cellserver replicas report no fsync offset): the
// replica count is as strong as WAIT's. The connection is parked as
// WAIT's is; it answers when both counts are reached or the timeout (ms,
// 0 for none) passes.
func cmdWaitAOF(x *ctx) {
	s := x.s
	numlocal, err := strconv.ParseInt(string(x.args[1]), 10, 64)
	if err != nil {
		x.errorReply(msgNotInt)
		return
	}
	if numlocal < 0 || numlocal > 1 {
		x.errorReply(msgWaitAOFLocalRange)
		return
	}
	numreplicas, err := strconv.ParseInt(string(x.args[2]), 10, 64)
	if err != nil {
		x.errorReply(msgNotInt)
		return
	}
	if numreplicas < 0 {
		x.errorReply(msgNotPositive)
		return
	}
	ms, ok := waitTimeout(x, x.args[3])
	if !ok {
		return
	}
	if s.repl.IsReplica() {
		x.errorReply(msgWaitAOFReplica)
		return
	}
	aof := s.aof
	if numlocal > 0 && aof == nil {
		x.errorReply(msgWaitAOFNoAOF)
		return
	}
	var seq uint64
	if aof != nil {
		seq = aof.Seq()
	}
	off := x.cl.repl.off
	counts := func() (int64, int64) {
		local := int64(0)
		if aof != nil && aof.Synced(seq) {
			local = 1
		}
		return local, int64(s.repl.Acked(off))
	}
	if l, r := counts(); l >= numlocal && r >= numreplicas || x.inExec {
		x.array(2)
		x.int(l)
		x.int(r)
		return
	}
	resume, b := x.block()
	w := &aofWait{reply: func() {
		l, r := counts()
		reply := redcon.AppendArray(nil, 2)
		reply = redcon.AppendInt(reply, l)
		reply = redcon.AppendInt(reply, r)
		resume(reply)
	}}
	w.mu.Lock()
	if numlocal > 0 {
		if ms > 0 {
			w.timer = time.AfterFunc(time.Duration(ms)*time.Millisecond, w.doneLocal)
		}
	} else {
		w.local = true
	}
	w.mu.Unlock()
	if numlocal > 0 {
		c := aof.OnSynced(seq, w.doneLocal)
		w.mu.Lock()
		w.cancelLocal = c
		w.mu.Unlock()
	}
	cancelRepl := s.repl.Wait(off, int(min(numreplicas, 1<<30)), time.Duration(ms)*time.Millisecond, func(int) { w.doneRepl() })
	b.leave = func() {
		cancelRepl()
		w.stop()
	}
}

// aofWait is a parked WAITAOF: its local wait (a sync, or the timeout) and
// its replicas' (replication.Wait, which has its own timeout) each end
// once; the reply goes when both have.
type aofWait struct {
	mu          sync.Mutex
	local, repl bool
	replied     bool
	timer       *time.Timer
	cancelLocal func()
	reply       func()
}

func (w *aofWait) doneLocal() { w.done(func() { w.local = true }) }
func (w *aofWait) doneRepl()  { w.done(func() { w.repl = true }) }

func (w *aofWait) done(set func()) {
	w.mu.Lock()
	set()
	fire := w.local && w.repl && !w.replied
	if fire {
		w.replied = true
	}
	w.mu.Unlock()
	if fire {
		w.stop()
		w.reply()
	}
}

// stop forgets the local wait and its timer.
func (w *aofWait) stop() {
	w.mu.Lock()
	t, c := w.timer, w.cancelLocal
	w.mu.Unlock()
	if t != nil {
		t.Stop()
	}
	if c != nil {
		c()
	}
}

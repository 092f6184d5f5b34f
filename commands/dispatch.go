package commands

import (
	"time"

	"github.com/cellserver/cellserver/resp"
)

// ServeRESP implements resp.Handler: it finds the command, checks arity,
// queues it inside MULTI, or runs it.
func (s *Service) ServeRESP(c *resp.Conn, args [][]byte) {
	cl := c.Context().(*client)
	x := &cl.x
	x.args = args
	x.haveNow = false
	x.locked = false
	x.polSet = nil
	s.dispatch(x)
	if s.kwait.pending.Load() {
		s.serveKeyWaiters() // what this command changed for blocked readers
	}
	if s.track.bcast.any.Load() {
		s.track.flushBcast()
	}
	if cl.track.flags.Load()&trkCaching != 0 {
		cl.afterCommand(cl.lastCmd.Load())
	}
	if cl.keyBuf.used {
		x.doneBigKeys()
	}
	x.keys = nil // as ctx.doneKeys, inlined
	x.args = nil
}

func (s *Service) lookup(cl *client, name []byte) *Spec {
	return s.table[string(lowerInto(cl.scratch.lower[:0], name))]
}

func (s *Service) dispatch(x *ctx) {
	cl := x.cl
	if cl.denied {
		x.errorReply(msgDenied)
		x.c.CloseAfterReply()
		return
	}
	sp := s.lookup(cl, x.args[0])
	cl.lastCmd.Store(sp) // as Redis's c->lastcmd: nil for an unknown command
	if sp == nil {
		s.reject(x, nil, errUnknownCommand(x.args))
		return
	}
	if !sp.arityOK(len(x.args)) {
		s.reject(x, sp, errWrongArity(sp.Name))
		return
	}
	if sp.subs != nil && (len(x.args) >= 2 || sp.Run == nil) {
		sub := sp.subs[string(lowerInto(cl.scratch.lower[:0], x.args[1]))]
		cl.lastCmd.Store(sub)
		if sub == nil {
			s.reject(x, sp, errUnknownSubcommand(cstr(x.args[1]), sp.Name))
			return
		}
		if !sub.arityOK(len(x.args)) {
			s.reject(x, sub, errWrongArity(sub.Name))
			return
		}
		sp = sub
	}
	if !cl.authed && sp.Flags&NoAuth == 0 && s.authRequired() {
		s.reject(x, sp, msgNoAuth)
		return
	}
	// The keys are resolved (hashed, and their slots computed in cluster
	// mode) before the ACL and cluster checks and queueing; call locks
	// their shards.
	x.resolveKeys(sp, x.db())
	// ACL: a user whose root selector allows everything (the default
	// user) has no restrict state, and pays this one branch.
	if st := cl.user.Load().restrict.Load(); st != nil && !(cl.multi.on && sp.Flags&(NoMulti|RunsInMulti) == NoMulti) {
		if s.aclDenied(x, sp, st) {
			return
		}
	}
	if msg := s.clusterCheck(x, sp); msg != noErr {
		s.clusterReject(x, sp, msg)
		return
	}
	// A denyoom command over maxmemory under noeviction is refused
	// before it is queued or run, and so is an EXEC that queued one, as
	// Redis's processCommand does.
	if (sp.Flags&DenyOOM != 0 || sp.Name == "exec" && cl.multi.on && queuedDenyOOM(cl.multi.queue)) && !s.ks.CanInsert() {
		s.stats.oomRefusals.Add(1)
		s.reject(x, sp, msgOOM)
		return
	}
	if s.persist.admitWrite != nil && (sp.Flags&Write != 0 || sp.Name == "exec" && queuedWrite(cl.multi.queue)) {
		if err := s.persist.admitWrite(); err != nil {
			s.reject(x, sp, errMisconf(err))
			return
		}
	}
	if msg := s.replCheck(cl, sp); msg != noErr {
		s.reject(x, sp, msg)
		return
	}
	// A RESP2 client in subscribed mode reads messages on its connection:
	// only the commands that change subscriptions, PING, QUIT and RESET.
	if !cl.resp3() && cl.subscribed() && !allowedSubscribed(sp) {
		s.reject(x, sp, errPubsubContext(sp.Name))
		return
	}
	// A monitor is a replica to Redis: no command that reads or changes
	// keys (EXEC of a transaction holding one included).
	if cl.monitor && (sp.Flags&(Write|ReadOnly) != 0 || sp.Name == "exec" && queuedKeyspace(cl.multi.queue)) {
		s.reject(x, sp, msgMonitorKeyspace)
		return
	}
	if cl.multi.on && sp.Flags&RunsInMulti == 0 {
		if sp.Flags&NoMulti != 0 {
			s.reject(x, sp, msgNotInMulti)
			return
		}
		if msg := s.enqueue(cl, sp, x.args); msg != noErr {
			s.reject(x, sp, msg)
			return
		}
		x.status("QUEUED")
		return
	}
	s.call(x, sp)
}

// queuedWrite reports whether a transaction holds a command flagged Write
// (Redis: c->mstate.cmd_flags & CMD_WRITE).
func queuedWrite(q []queued) bool {
	for _, c := range q {
		if c.spec.Flags&Write != 0 {
			return true
		}
	}
	return false
}

// queuedDenyOOM reports whether a transaction holds a command flagged
// DenyOOM (Redis: c->mstate.cmd_flags & CMD_DENYOOM).
func queuedDenyOOM(q []queued) bool {
	for _, c := range q {
		if c.spec.Flags&DenyOOM != 0 {
			return true
		}
	}
	return false
}

// reject answers a command that can neither run nor be queued, as Redis's
// rejectCommand does: inside MULTI it makes EXEC abort, and a rejected EXEC
// (bad arity, no AUTH) discards the transaction and says why.
func (s *Service) reject(x *ctx, sp *Spec, msg wireErr) {
	cl := x.cl
	cl.multiFailed()
	if sp != nil {
		sp.stats.rejected.Add(cl.shard, 1)
		if sp.Name == "exec" { // Redis: c->cmd->proc == execCommand
			cl.resetMulti()
			cl.multi.seen.Store(-1)
			s.unwatchAll(cl)
			msg = errExecAbort(msg)
		}
	}
	x.errorReply(msg)
}

// call runs sp with statistics. x.args must be set.
func (s *Service) call(x *ctx, sp *Spec) {
	x.spec = sp
	x.failed = false
	x.haveNow = false
	x.auditDraw = auditUnknown
	// Latency is measured on the monotonic clock alone (time.Since of a
	// fixed instant reads it once; time.Now would read the wall clock
	// too). A command pipelined behind another starts where that one
	// ended, so a batch of commands reads the clock once per command. The
	// command reads the wall clock itself, once, under its shard lock:
	// reading it here, before the lock, could let a command decide with a
	// time older than the state another client just wrote.
	cl := x.cl
	var start time.Duration
	if b := x.c.Batch(); b == cl.clock.lastBatch && cl.clock.lastEnd != 0 {
		start = cl.clock.lastEnd
	} else {
		start = time.Since(s.monoBase)
		cl.clock.lastBatch = b
	}
	// sync-replicas: the reply of a command that changes a key waits for
	// the replicas' acknowledgement (syncHeld). A write without keys
	// counts as a change; EXEC finds out for its transaction.
	syncing := !x.inExec && s.repl.SyncOn() && (sp.Flags&Write != 0 || sp.Name == "exec")
	var syncMark int
	if syncing {
		syncMark = x.c.Pending()
		x.trackChg, x.changed = true, len(x.keys) == 0 && sp.Name != "exec"
	}
	if x.inExec || len(x.keys) == 0 {
		sp.Run(x) // EXEC holds the locks, or there are none to take
	} else {
		x.runLocked(sp)
	}
	if syncing {
		x.trackChg = false
		if x.changed {
			s.syncHold(x, syncMark)
		}
	}
	if sp.Flags&ReadOnly != 0 && cl.track.flags.Load()&trkOn != 0 {
		s.trackRead(x, sp)
	}
	if !x.inExec {
		// maxmemory with allkeys-lru: evict what this command (or, after
		// EXEC, the transaction) added or grew beyond the cap.
		s.ks.Evict()
	}
	end := time.Since(s.monoBase)
	cl.clock.lastEnd = end
	d := end - start
	sp.stats.observe(cl.shard, d.Nanoseconds())
	s.slowlog.maybeAdd(x, d)
	if s.monitors.n.Load() != 0 && sp.Flags&Admin == 0 {
		s.feedMonitors(x) // Redis: admin commands are never shown
	}
	sp.stats.calls.Add(cl.shard, 1)
	if x.failed {
		sp.stats.failed.Add(cl.shard, 1)
	}
	s.stats.cmdsTotal.Add(cl.shard, 1)
	if sp.Flags&Write != 0 {
		// What WAIT waits for: the stream up to this write's changes.
		cl.repl.off = s.repl.Offset()
	}
	if s.persist.durability != nil && sp.Flags&Write != 0 {
		// fsync always: this client's replies wait for the changes
		// queued so far (its own among them) to be on disk.
		x.cl.pendingSeq = s.persist.durability.Seq()
	}
}

func lowerInto(dst, src []byte) []byte {
	if len(src) > cap(dst) {
		return append(dst[:0], "\x00"...) // longer than any name: no match
	}
	dst = dst[:len(src)]
	for i, ch := range src {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		dst[i] = ch
	}
	return dst
}

func copyArgs(args [][]byte) [][]byte {
	n := 0
	for _, a := range args {
		n += len(a)
	}
	buf := make([]byte, 0, n)
	out := make([][]byte, len(args))
	for i, a := range args {
		buf = append(buf, a...)
		out[i] = buf[len(buf)-len(a) : len(buf) : len(buf)]
	}
	return out
}

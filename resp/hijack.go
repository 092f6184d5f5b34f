package resp

import (
	"errors"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// Hijack takes the connection away from the server once the replies
// appended so far are written (the hijacking command's included): a
// replication link, for example, stops being a client and carries a
// stream of its own. Call it only from ServeRESP, for its own connection.
//
// No further command of the connection runs. Once its replies, and the
// pushes queued before the hijack (Conn.Push; later ones are dropped),
// have reached the client, the connection leaves the server: Handler.Close
// runs, and it no longer counts in Stats, Range or MaxClients, nor is it
// closed by IdleTimeout, OutputTimeout, Shutdown, Close or Kill. Then fn
// runs on a goroutine of its own with the socket as a net.Conn (with no
// deadlines set; a *tls.Conn for a TLS client), which fn owns and must
// close, and rest, a copy of the input already read after the hijacking
// command (pipelined bytes, which would otherwise be lost). If the
// connection is killed or fails before its replies are written, fn is
// never called and the socket is closed.
func (c *Conn) Hijack(fn func(nc net.Conn, rest []byte)) {
	if fn == nil || c.hijack != nil || c.blk != nil {
		return
	}
	c.hijack = fn
	c.closeAfter = true
}

// takeOver moves a connection whose replies are written to the hijacked
// state, unless it was killed first, and takes the pushes queued before.
// No push is written to the socket after it: the goroutine writing pushes
// of a connection without a loop holds push.wmu while it writes, and
// stops once it sees the state.
func (c *Conn) takeOver() bool {
	p := &c.push
	p.wmu.Lock()
	p.mu.Lock()
	ok := c.state.CompareAndSwap(connActive, connHijacked)
	if ok && len(p.buf) > 0 {
		c.hijackPush = append([]byte(nil), p.buf...)
		p.buf = nil
		c.hasPush.Store(false)
	}
	p.mu.Unlock()
	p.wmu.Unlock()
	return ok
}

// hijackRest returns a copy of the input read after the hijacking command.
func (c *Conn) hijackRest() []byte {
	r := &c.rd
	return append([]byte(nil), r.buf[r.pos:r.end]...)
}

// runHijack writes the pushes queued before the hijack and calls the
// Hijack function, on a goroutine of its own. The connection has left the
// server.
func (c *Conn) runHijack(nc net.Conn, rest []byte) {
	nc.SetDeadline(time.Time{})
	if len(c.hijackPush) > 0 {
		nc.SetWriteDeadline(time.Now().Add(c.srv.cfg.OutputTimeout))
		_, err := nc.Write(c.hijackPush)
		c.hijackPush = nil
		if err != nil {
			nc.Close()
			return
		}
		nc.SetWriteDeadline(time.Time{})
	}
	c.hijack(nc, rest)
}

// block is one Conn.Block: the reply its resume gives, and how the
// connection learns of it.
type block struct {
	c       *Conn
	resumed atomic.Bool // resume was called
	reply   []byte      // written by resume before it hands the block over

	// Connections without a loop: ch is closed by resume, or by Kill or
	// Shutdown, to wake the goroutine waiting in waitResume.
	ch   chan struct{}
	woke atomic.Bool
}

// Block holds back the reply of the command being run, for a command that
// answers later (Redis's blocked clients: WAIT). Call it only from
// ServeRESP, for its own connection. The connection runs no further
// command: the commands pipelined behind this one, and any input read
// meanwhile (none on an event loop, up to blockedReadMax on a goroutine),
// stay buffered until resume is called; its event loop meanwhile serves
// its other clients.
//
// resume may be called from any goroutine, once (later calls do nothing).
// reply, one or more complete RESP frames (copied), is written after every
// reply before it; then the connection runs the commands buffered behind
// the blocked one and reads again. A blocked connection is closed by
// Kill, Close and Shutdown (which treats it as idle: its command has no
// reply yet) and when the client hangs up; resume after that does
// nothing. IdleTimeout does not close a blocked connection, as
// in Redis. Pushes (Conn.Push) are delivered while it is blocked.
//
// Block after Hijack or CloseAfterReply in the same command does nothing
// (resume too); so does Hijack after Block.
func (c *Conn) Block() (resume func(reply []byte)) {
	if c.blk != nil {
		return c.blk.resume
	}
	if c.closeAfter {
		return func([]byte) {}
	}
	b := &block{c: c}
	c.blk = b
	if c.lp != nil {
		c.lp.block(c)
	} else {
		b.ch = make(chan struct{})
		c.curBlock.Store(b)
	}
	return b.resume
}

func (b *block) resume(reply []byte) {
	if !b.resumed.CompareAndSwap(false, true) {
		return
	}
	b.reply = append([]byte(nil), reply...)
	if lp := b.c.lp; lp != nil {
		lp.addResume(b)
		return
	}
	b.wake()
}

// wake ends the wait of a connection without a loop: it interrupts the
// read waitResume may be in (a deadline in the past), then closes b.ch,
// in that order, so that once waitResume sees b.ch closed no deadline of
// wake's is still to come.
func (b *block) wake() {
	if b.woke.CompareAndSwap(false, true) {
		if nc := b.c.nc; nc != nil { // nil only in a bare Conn (tests)
			nc.SetReadDeadline(time.Unix(1, 0))
		}
		close(b.ch)
	}
}

// waitResume waits, as an idle connection, until b is resumed, and appends
// its reply to c.Out. It returns false when the connection must close
// (killed, or closed by Shutdown).
func (c *Conn) waitResume(b *block) bool {
	// Idle, so that Push writes to the client and Shutdown closes it; then
	// look for Shutdown and Kill, which may have looked before (see serve).
	c.state.Store(connIdle)
	if c.srv.inShutdown.Load() || c.killed.Load() {
		return false
	}
	if c.hasPush.Load() {
		c.kickPush()
	}
	if !c.readBlocked(b) {
		return false // the client hung up
	}
	c.nc.SetReadDeadline(time.Time{}) // wake's; read sets IdleTimeout's again
	if !c.state.CompareAndSwap(connIdle, connActive) || c.killed.Load() {
		return false // woken by Kill or Shutdown
	}
	// Only resume leaves the state idle after waking, and it wrote the
	// reply before it closed b.ch.
	c.blk = nil
	c.curBlock.Store(nil)
	c.Out = append(c.Out, b.reply...)
	c.reads++ // the commands behind waited
	return true
}

// blockedReadMax bounds the input a blocked connection on a goroutine
// buffers while it waits (readBlocked); an event loop reads none.
const blockedReadMax = 64 << 10

// readBlocked reads the client's input while c is blocked, until b is
// woken (resume, Kill, Shutdown), so that a hang-up is seen at once, as
// an event loop watching a blocked client sees it: the client leaves
// (Handler.Close) rather than staying counted, with whatever it waits
// for, until its resume. What it reads is buffered for the commands
// behind the blocked one, up to blockedReadMax: past it the reading
// stops until the wake. It returns false when the client hung up or the
// connection failed. IdleTimeout does not apply (see Block).
func (c *Conn) readBlocked(b *block) bool {
	c.nc.SetReadDeadline(time.Time{})
	// wake sets woke, then the deadline that interrupts a read, then
	// closes b.ch. If it has set woke already, its deadline may have come
	// before the line above cleared it, and a read now could wait for
	// input that never comes, with b.ch closed just after the check
	// below: wait for b.ch instead. If not, its deadline comes after.
	if b.woke.Load() {
		<-b.ch
		return true
	}
	for {
		select {
		case <-b.ch:
			return true
		default:
		}
		if c.rd.buffered() >= blockedReadMax {
			<-b.ch
			return true
		}
		n, err := c.rd.fill(c.nc)
		if n > 0 {
			c.netIn.Add(int64(n))
			c.lastActive.Store(time.Now().UnixNano())
			c.noteQueryBuf()
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			return false
		}
	}
}

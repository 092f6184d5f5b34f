package resp

import (
	"errors"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/redcon"
)

// maxPendingOut is the reply size past which c.Out is written in the
// middle of a batch, so a long pipeline does not buffer all its replies.
const maxPendingOut = 64 << 10

// Connection states, for Shutdown. A connection moves
// between connActive and connIdle; Shutdown claims an idle connection by
// moving it to connClosed with a compare-and-swap, so a connection whose
// read has just returned either runs its batch to the end (it won) or runs
// nothing (Shutdown won).
const (
	connActive   int32 = iota // in Open, or running a batch
	connIdle                  // waiting for input (or blocked: see Block)
	connClosed                // closed or being closed
	connHijacked              // handed to a Hijack function: the server lets go of it
)

// Conn is one client connection. Its Handler methods run on the
// connection's loop or goroutine; see the package documentation, section
// Concurrency, for the methods other goroutines may call.
type Conn struct {
	// Out is the reply buffer. Handlers append RESP replies to it (for
	// example with redcon.AppendBulk); the server writes it after each
	// batch of pipelined commands, or as soon as it exceeds 64 KiB. It is
	// owned by the connection's loop or goroutine.
	Out []byte

	srv     *Server
	nc      net.Conn // nil when an event loop serves the connection
	raw     *rawSock // nc's socket, when nc is plain TCP
	id      int64
	remote  string
	local   string
	created time.Time
	rd      reader

	proto proto // the negotiated protocol (Protocol, SetProtocol)

	closeAfter bool   // set by CloseAfterReply
	reads      uint64 // reads of input that returned data (Batch)
	// shared is a reply AppendShared took without copying it: it is
	// written after Out[:sharedAt] and before Out[sharedAt:] (the replies
	// appended after it). outOver is the size the replies would have had
	// when AppendShared refused one over MaxOutputBuffer: the connection
	// closes after the command.
	shared   []byte
	sharedAt int
	outOver  int64

	// Hijack and Block; owned by the connection's loop or goroutine.
	hijack     func(nc net.Conn, rest []byte) // set by Hijack
	hijackPush []byte                         // pushes queued before the hijack, to write first
	blk        *block                         // set by Block until the loop or goroutine takes the reply
	curBlock   atomic.Pointer[block]          // blk, for Kill (connections without a loop)

	killed     atomic.Bool
	state      atomic.Int32
	lastActive atomic.Int64 // Unix nanoseconds
	qbuf       atomic.Int64
	qbufCap    atomic.Int64 // bytes allocated for input (QueryBufCap)
	outCap     atomic.Int64 // bytes allocated for replies (OutCap)
	outLen     atomic.Int64
	netIn      atomic.Int64
	netOut     atomic.Int64
	ctx        atomic.Pointer[any]
	hasPush    atomic.Bool // push.buf holds bytes (Push)
	push       pushState

	// Event-loop connections (lp != nil) own a socket descriptor instead
	// of nc. fdMu orders closing it (by the loop) against a shutdown(2)
	// from Kill or Shutdown on other goroutines, so a descriptor number is
	// never touched after it may have been reused.
	lp     *loop
	fd     int
	fdMu   sync.Mutex
	fdOpen bool // guarded by fdMu
	// The fields below belong to the loop's goroutine.
	opened   bool  // Handler.Open returned normally
	outOff   int   // bytes of Out already written
	before   bool  // BeforeWrite has run for the replies in Out
	queued   bool  // in the loop's list of replies to write this round
	midBatch bool  // the batch stopped at held replies: the rest runs once they are written (loop.serve)
	waitOut  bool  // blocked on a full socket: waiting for EPOLLOUT
	outSince int64 // Unix nanoseconds of the last write progress while waitOut
}

// ID returns the connection's identifier: unique within the Server and
// increasing from 1 in accept order (Redis CLIENT ID).
func (c *Conn) ID() int64 { return c.id }

// Loop returns the index of the event loop that serves the connection,
// from 0 to [Server.EventLoops] - 1, or -1 for a connection served on a
// goroutine of its own. A loop runs its connections' Handler calls one at
// a time, so a Handler may keep state per loop, such as counters that the
// loops do not share.
func (c *Conn) Loop() int {
	if c.lp == nil {
		return -1
	}
	return c.lp.index
}

// RemoteAddr returns the client's address, such as "127.0.0.1:50412".
func (c *Conn) RemoteAddr() string { return c.remote }

// LocalAddr returns the server-side address of the connection.
func (c *Conn) LocalAddr() string { return c.local }

// Created returns the time the connection was accepted.
func (c *Conn) Created() time.Time { return c.created }

// LastActive returns the time input was last read from the client (at
// accept, before any).
func (c *Conn) LastActive() time.Time { return time.Unix(0, c.lastActive.Load()) }

// QueryBufLen returns the number of input bytes buffered and not yet
// consumed, as of the last read or batch end (Redis CLIENT LIST qbuf).
func (c *Conn) QueryBufLen() int { return int(c.qbuf.Load()) }

// QueryBufCap returns the bytes allocated for the client's input, used or
// free, as of the last read or batch end (Redis CLIENT LIST qbuf plus
// qbuf-free). It may be called from any goroutine.
func (c *Conn) QueryBufCap() int { return int(c.qbufCap.Load()) }

// OutCap returns the bytes allocated for the client's replies as of the
// end of its last batch (Redis CLIENT LIST rbs). It may be called from any
// goroutine.
func (c *Conn) OutCap() int { return int(c.outCap.Load()) }

// OutLen returns the number of reply bytes being written, which is zero
// unless a write to the client is in progress (Redis CLIENT LIST omem, in
// spirit).
func (c *Conn) OutLen() int { return int(c.outLen.Load()) }

// Batch identifies the input read the commands being run came from: it
// changes with every read that returns data, so commands with the same
// Batch were pipelined together and run back to back, with no wait for
// the network between them. Call it only from the Handler methods of this
// connection.
func (c *Conn) Batch() uint64 { return c.reads }

// SetContext attaches a value of the handler's choosing to the connection.
func (c *Conn) SetContext(v any) { c.ctx.Store(&v) }

// Context returns the value given to SetContext, or nil.
func (c *Conn) Context() any {
	if p := c.ctx.Load(); p != nil {
		return *p
	}
	return nil
}

// AppendShared adds reply, a complete reply built once and shared by every
// client asking (such as a cached CLUSTER SLOTS), after the replies in Out,
// unless the replies pending would then pass MaxOutputBuffer: then nothing
// is added, it returns false, and the connection is closed once the
// command returns, without writing its replies, as when replies in Out
// pass the limit (Stats.OutputLimitDrops counts it). The limit is checked
// before anything is copied.
//
// A reply larger than 64 KiB is not copied: the connection writes it from
// reply itself, after the replies in Out and before those appended to Out
// later, so reply must not be modified until no connection may still write
// it (in practice: never). Call it only from the Handler methods of this
// connection. A Conn without a Server (a test's zero Conn) copies reply to
// Out.
func (c *Conn) AppendShared(reply []byte) bool {
	if c.srv == nil {
		c.Out = append(c.Out, reply...)
		return true
	}
	if n := int64(c.outTotal()) + int64(len(reply)); n > c.srv.cfg.MaxOutputBuffer {
		c.outOver = n
		return false
	}
	if len(reply) <= maxPendingOut || c.shared != nil {
		c.Out = append(c.Out, reply...)
		return true
	}
	// Past maxPendingOut, execute has the replies written before the next
	// command runs: one shared reply at a time (but for EXEC's).
	c.shared, c.sharedAt = reply, len(c.Out)
	return true
}

// Reserve reports whether n more bytes of replies fit under
// MaxOutputBuffer. When they do not, it returns false and the connection
// is closed once the command returns, without writing its replies, as
// when AppendShared refuses one: a command building a large reply piece
// by piece (MGET) asks before each piece, so that it never holds more
// than the limit. A Conn without a Server always has room.
func (c *Conn) Reserve(n int) bool {
	if c.srv == nil {
		return true
	}
	if t := int64(c.outTotal()) + int64(n); t > c.srv.cfg.MaxOutputBuffer {
		c.outOver = t
		return false
	}
	return true
}

// outTotal is the size of the replies pending: Out and the shared reply.
func (c *Conn) outTotal() int { return len(c.Out) + len(c.shared) }

// outFrom returns the pending replies from offset off (of Out with the
// shared reply at sharedAt) up to the next seam between Out and the shared
// reply.
func (c *Conn) outFrom(off int) []byte {
	switch at := c.sharedAt; {
	case c.shared == nil:
		return c.Out[off:]
	case off < at:
		return c.Out[off:at]
	case off < at+len(c.shared):
		return c.shared[off-at:]
	default:
		return c.Out[off-len(c.shared):]
	}
}

// Pending returns the size of the replies pending (Out and a reply
// AppendShared took): the position the next reply starts at, for
// ReplaceReply. Call it only from the Handler methods of this connection.
func (c *Conn) Pending() int { return c.outTotal() }

// ReplaceReply replaces the pending replies from start to end (positions
// Pending returned before and after they were appended; none of them
// written yet) by b: a BeforeWrite that finds a reply must not leave as
// it is (sync-replicas turns a write its replicas did not acknowledge
// into an error) rewrites it. Replace from the last reply to the first,
// so that the positions of the earlier ones still hold. Call it only
// from the Handler methods of this connection.
func (c *Conn) ReplaceReply(start, end int, b []byte) {
	if c.shared != nil {
		// Rare (a held write beside a reply over 64 KiB): fold the
		// shared reply into Out, so that positions are Out's.
		out := make([]byte, 0, c.outTotal())
		out = append(out, c.Out[:c.sharedAt]...)
		out = append(out, c.shared...)
		c.Out = append(out, c.Out[c.sharedAt:]...)
		c.shared, c.sharedAt = nil, 0
	}
	c.Out = slices.Replace(c.Out, start, end, b...)
}

// resetOut empties the replies pending, keeping Out's memory.
func (c *Conn) resetOut() {
	c.Out = c.Out[:0]
	c.shared, c.sharedAt = nil, 0
}

// CloseAfterReply makes the connection write the replies appended so far
// and close, running none of the commands that follow in its buffer (Redis
// CLIENT_CLOSE_AFTER_REPLY, used by QUIT). Call it only from the Handler
// methods of this connection.
func (c *Conn) CloseAfterReply() { c.closeAfter = true }

// Kill closes the connection now, from any goroutine (CLIENT KILL). A
// command running on it completes, but its replies are lost and no later
// command runs. A handler ending its own connection should call
// CloseAfterReply instead, so that its reply is delivered.
//
// Kill does nothing to a connection that has been hijacked (see Hijack).
func (c *Conn) Kill() {
	c.killed.Store(true)
	for {
		st := c.state.Load()
		if st == connHijacked {
			return
		}
		if c.state.CompareAndSwap(st, connClosed) {
			break
		}
	}
	c.hangUp()
}

// hangUp ends the connection for the client at once, from any goroutine.
// A loop's connection is shut down (the client sees the end, and the loop
// sees an event and closes the descriptor); any other is closed.
func (c *Conn) hangUp() {
	if c.lp == nil {
		c.nc.Close()
		if b := c.curBlock.Load(); b != nil {
			b.wake() // the goroutine waits for resume, not on the socket
		}
		return
	}
	c.fdMu.Lock()
	if c.fdOpen {
		shutdownFD(c.fd)
	}
	c.fdMu.Unlock()
}

// SetAuthenticated says whether the client has authenticated, for the
// commands of this connection not yet parsed. Until it has, a command of
// more than UnauthMaxMultiBulkLen (10) elements is answered with
// "Protocol error: unauthenticated multibulk length", and a bulk of more
// than UnauthMaxBulkLen (16384) bytes with "Protocol error:
// unauthenticated bulk length", and the connection closes, as Redis does:
// a client without the password cannot make the server hold a large
// request. A connection starts authenticated; a Handler that requires a
// password calls SetAuthenticated(false) in Open, which runs before the
// first read, so the limits apply from the first byte, and
// SetAuthenticated(true) once the client has authenticated. Call it only
// from the Handler methods of this connection.
func (c *Conn) SetAuthenticated(ok bool) { c.rd.unauth = !ok }

// SetMaxMultiBulkLen overrides Config.MaxMultiBulkLen for the commands of
// this connection not yet parsed; n <= 0 restores the configured value.
// A larger command gets the error of Config.MaxMultiBulkLen (for the
// limits of a client that has not authenticated, with their own errors,
// see SetAuthenticated). Call it only from the Handler methods of this
// connection.
func (c *Conn) SetMaxMultiBulkLen(n int64) {
	if n <= 0 {
		n = c.srv.cfg.MaxMultiBulkLen
	}
	c.rd.maxMulti = n
}

// SetMaxBulkLen overrides Config.MaxBulkLen for the commands of this
// connection not yet parsed; n <= 0 restores the configured value, as does
// any n above it (the query buffer is sized for the configured value).
// Call it only from the Handler methods of this connection.
func (c *Conn) SetMaxBulkLen(n int64) {
	if n <= 0 || n > c.srv.cfg.MaxBulkLen {
		n = c.srv.cfg.MaxBulkLen
	}
	c.rd.maxBulk = n
}

// closeIfIdle closes the connection if it is waiting for input. It is how
// Shutdown closes idle connections without cutting a batch short.
func (c *Conn) closeIfIdle() {
	if c.state.CompareAndSwap(connIdle, connClosed) {
		c.hangUp()
	}
}

// batchResult says why execute stopped.
type batchResult int

const (
	batchDone  batchResult = iota // no complete command left, or CloseAfterReply
	batchFlush                    // c.Out is over maxPendingOut: write it, then execute again
	batchClose                    // close now, without writing
)

// execute runs the complete commands already buffered, appending their
// replies to c.Out. A malformed request appends its error reply and sets
// closeAfter.
func (c *Conn) execute() batchResult {
	s := c.srv
	h := s.handler
	for !c.closeAfter && c.blk == nil {
		if c.killed.Load() {
			return batchClose
		}
		args, err := c.rd.next()
		if err != nil {
			c.protocolError(err)
			return batchDone
		}
		if args == nil {
			return batchDone
		}
		if c.hasPush.Load() {
			c.takePush() // queued before this command: before its reply
		}
		h.ServeRESP(c, args)
		if c.hasPush.Load() {
			c.takePush() // after the reply of the command that queued it
		}
		if n := max(int64(c.outTotal()), c.outOver); n > s.cfg.MaxOutputBuffer {
			s.outputDrops.Add(1)
			s.logger.Warn("resp: closing client over the output buffer limit", "id", c.id, "addr", c.remote,
				"bytes", n, "limit", s.cfg.MaxOutputBuffer)
			c.resetOut()
			c.outOver = 0
			return batchClose
		}
		if c.outTotal() > maxPendingOut {
			return batchFlush
		}
	}
	return batchDone
}

// serve is the loop of a connection on its own goroutine, after redcon's
// handle: run every complete command already buffered, write the replies
// once, read more. It returns when the connection must close, or with true
// when it has been hijacked (its replies are written and it is the Hijack
// function's).
func (c *Conn) serve() (hijacked bool) {
	s := c.srv
	for {
		switch c.execute() {
		case batchClose:
			return false
		case batchFlush:
			if c.write() != nil {
				return false
			}
			c.reads++ // the write may have waited for the client
			continue
		}
		if c.killed.Load() {
			return false
		}
		// The batch's input is consumed: say so before the replies leave,
		// so that a CLIENT LIST the client's next move triggers never sees
		// it still buffered.
		c.noteQueryBuf()
		if c.outTotal() > 0 {
			if c.write() != nil {
				return false
			}
		}
		if cap(c.Out) > maxRetainedBuf {
			c.Out = nil
		}
		c.outCap.Store(int64(cap(c.Out)))
		if c.closeAfter {
			return c.hijack != nil && c.takeOver()
		}
		if b := c.blk; b != nil {
			if !c.waitResume(b) {
				return false
			}
			continue
		}

		// Become idle, then look for shutdown: Shutdown sets inShutdown
		// before it looks for idle connections, so one of the two sees
		// the other.
		c.state.Store(connIdle)
		if s.inShutdown.Load() {
			return false
		}
		if c.hasPush.Load() {
			c.kickPush() // queued after the write above, see Push
		}
		n, err := c.read()
		if !c.state.CompareAndSwap(connIdle, connActive) {
			return false // claimed by Shutdown, or killed
		}
		if n == 0 && err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				s.logger.Debug("resp: closing idle client", "id", c.id, "addr", c.remote)
			}
			return false
		}
	}
}

// read reads more input, with the idle deadline if one is configured.
func (c *Conn) read() (int, error) {
	if d := c.srv.cfg.IdleTimeout; d > 0 {
		c.nc.SetReadDeadline(time.Now().Add(d))
	}
	n, err := c.rd.fill(c.nc)
	if n > 0 {
		c.reads++
		c.netIn.Add(int64(n))
		c.lastActive.Store(time.Now().UnixNano())
		c.noteQueryBuf()
	}
	return n, err
}

// noteQueryBuf records the input buffer's use and size for QueryBufLen
// and QueryBufCap.
func (c *Conn) noteQueryBuf() {
	c.qbuf.Store(int64(c.rd.buffered()))
	c.qbufCap.Store(int64(len(c.rd.buf)))
}

// beforeWrite runs the Handler's BeforeWrite, if it has one; on error the
// replies are dropped and the connection must close.
func (c *Conn) beforeWrite() error {
	if b := c.srv.before; b != nil {
		if err := b.BeforeWrite(c); err != nil {
			c.resetOut()
			return err
		}
	}
	return nil
}

// write writes the replies pending (Out, and the shared reply) to the
// client and empties them.
func (c *Conn) write() error {
	if err := c.beforeWrite(); err != nil {
		return err
	}
	c.push.wmu.Lock()
	defer c.push.wmu.Unlock()
	if c.hasPush.Load() {
		c.takePush()
	}
	total := c.outTotal()
	c.outLen.Store(int64(total))
	var err error
	for off := 0; off < total && err == nil; {
		var n int
		n, err = c.writeOut(c.outFrom(off))
		off += n
	}
	c.outLen.Store(0)
	c.resetOut()
	return err
}

// writeOut writes out to the client and returns how much of it it wrote.
func (c *Conn) writeOut(out []byte) (int, error) {
	written := 0
	if c.raw != nil {
		n, err := c.raw.tryWrite(out)
		c.netOut.Add(int64(n))
		written += n
		out = out[n:]
		if err != nil {
			return written, err
		}
	}
	var err error
	if len(out) > 0 {
		// The socket buffer is full: wait until the client has read it
		// all, giving up only when a whole output timeout passes without
		// progress. A deadline ends a Write that made progress too, so
		// each deadline that passed with bytes written grants another
		// timeout: a client reading a large reply as fast as it can is
		// not dropped as a slow one.
		d := c.srv.cfg.OutputTimeout
		if idle := c.srv.cfg.IdleTimeout; idle > 0 && idle < d {
			d = idle
		}
		for len(out) > 0 {
			c.nc.SetWriteDeadline(time.Now().Add(d))
			var n int
			n, err = c.nc.Write(out)
			c.netOut.Add(int64(n))
			written += n
			out = out[n:]
			if err == nil || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
				break
			}
			err = nil
		}
		if err == nil && c.raw != nil {
			// A deadline left behind would fail the next raw write once
			// it passes.
			c.nc.SetWriteDeadline(time.Time{})
		}
	}
	return written, err
}

// protocolError answers a malformed request with "-ERR <text>" after the
// replies of the commands before it, as Redis does, and closes the
// connection once they are written.
func (c *Conn) protocolError(err error) {
	s := c.srv
	s.protoErrors.Add(1)
	s.logger.Debug("resp: protocol error", "id", c.id, "addr", c.remote, "err", err.Error())
	c.Out = redcon.AppendError(c.Out, "ERR "+err.Error())
	c.closeAfter = true
}

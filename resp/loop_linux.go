//go:build linux

package resp

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// loopEvents is the most readiness events one epoll_wait returns.
const loopEvents = 512

// maxCronInterval is the longest time between two checks of the idle and
// output timeouts of a loop's clients (Redis checks client timeouts from
// its 10 Hz cron, too).
const maxCronInterval = 100 * time.Millisecond

// A loop serves plain TCP connections from one goroutine with epoll, the
// way Redis's event loop does. One round:
//
//  1. epoll_wait for the ready clients (level-triggered; with none ready
//     the goroutine parks in Go's poller, which watches the epoll
//     descriptor itself);
//  2. for each, in the order epoll reports them (the order their input
//     arrived), read once and run every complete command read, appending
//     replies to Conn.Out;
//  3. write the replies of the round, calling BeforeWrite first for each
//     client (so with fsync "always" one sync covers the whole round);
//  4. every cron interval, close clients past IdleTimeout or whose replies
//     have made no progress for OutputTimeout.
//
// A client whose socket buffer is full waits for EPOLLOUT and is not read
// meanwhile, so its input is left in the kernel (backpressure) and its
// replies never exceed what one batch produced.
//
// Only the loop's goroutine touches its connections' sockets, except
// Kill and Shutdown, which may shut a socket down (shutdown(2), under
// Conn.fdMu) from any goroutine: the loop then sees the hang-up and
// closes the descriptor itself.
type loop struct {
	index int // in Server.loops; Conn.Loop
	srv   *Server
	epfd  int
	// The epoll descriptor as a pollable file: with nothing ready, the
	// loop's goroutine parks in Go's own poller until epfd is readable,
	// instead of blocking its thread in epoll_wait. A thread blocked in a
	// system call has its P taken away by the runtime, which wakes another
	// thread to hold it; on a busy core that costs context switches and
	// shows in the tail latency.
	epFile   *os.File
	epRaw    syscall.RawConn
	deadline bool // a read deadline is set on epFile
	pollFn   func(uintptr) bool
	polled   int // poll's results
	pollErr  error
	wakefd   int // eventfd: new connections, shutdown

	mu      sync.Mutex // guards adds, pushes, resumes, exited and writes to wakefd
	adds    []*Conn    // accepted, not yet registered
	pushes  []*Conn    // with bytes queued by Conn.Push
	resumes []*block   // blocked connections resumed (Conn.Block)
	exited  bool

	// heldN is len(held), for wakeHeld (any goroutine).
	heldN atomic.Int32

	// Owned by the loop's goroutine.
	held     []*Conn // replies held until Server.deferrer says they may leave (still queued)
	conns    []*Conn // by descriptor
	live     int     // non-nil entries of conns
	writes   []*Conn // connections with replies to write this round
	cont     []*Conn // connections whose batch goes on once their held replies are written (loop.written)
	cont2    []*Conn // cont's spare array
	waiting  int     // connections waiting for EPOLLOUT
	events   []unix.EpollEvent
	ev       unix.EpollEvent // argument of epoll_ctl, kept off the heap
	now      int64           // Unix nanoseconds at the start of the round
	progress uint64          // clients read (event got past the held and waiting ones)
	skipped  uint64          // events of clients whose replies are queued or held
	nextCron int64
}

// eventfdOne is the 8-byte increment written to wake a loop.
var eventfdOne = [8]byte{1}

// newLoops starts n event loops for s.
func newLoops(s *Server, n int) ([]*loop, error) {
	loops := make([]*loop, 0, n)
	for range n {
		l := &loop{index: len(loops), srv: s, epfd: -1, wakefd: -1, events: make([]unix.EpollEvent, loopEvents)}
		err := l.init()
		if err != nil {
			l.release()
			for _, l := range loops {
				l.release()
			}
			return nil, err
		}
		loops = append(loops, l)
	}
	for _, l := range loops {
		go l.run()
	}
	return loops, nil
}

func (l *loop) init() error {
	var err error
	if l.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return err
	}
	// Non-blocking, so that os.NewFile registers it with Go's poller.
	if err = unix.SetNonblock(l.epfd, true); err != nil {
		return err
	}
	l.epFile = os.NewFile(uintptr(l.epfd), "epoll")
	if err = l.epFile.SetReadDeadline(time.Time{}); err != nil {
		return err // not in Go's poller: waiting on it would not block
	}
	if l.epRaw, err = l.epFile.SyscallConn(); err != nil {
		return err
	}
	l.pollFn = l.poll
	if l.wakefd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		return err
	}
	l.ev = unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(l.wakefd)}
	return unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, l.wakefd, &l.ev)
}

// release closes the loop's own descriptors.
func (l *loop) release() {
	if l.wakefd >= 0 {
		unix.Close(l.wakefd)
		l.wakefd = -1
	}
	if l.epFile != nil {
		l.epFile.Close() // closes epfd
		l.epFile = nil
		l.epfd = -1
	}
	if l.epfd >= 0 {
		unix.Close(l.epfd)
		l.epfd = -1
	}
}

// detachFD takes the socket of a plain TCP connection away from Go's
// poller: it returns a duplicate descriptor (non-blocking, as the original
// was) and closes nc. It fails for anything but a *net.TCPConn.
func detachFD(nc net.Conn) (int, bool) {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return -1, false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return -1, false
	}
	fd := -1
	var dupErr error
	if err := rc.Control(func(s uintptr) {
		fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0)
	}); err != nil || dupErr != nil {
		return -1, false
	}
	tc.Close()
	return fd, true
}

// shutdownFD ends both directions of a socket without releasing its
// descriptor.
func shutdownFD(fd int) { unix.Shutdown(fd, unix.SHUT_RDWR) }

// add hands an accepted connection to the loop.
func (l *loop) add(c *Conn) {
	l.mu.Lock()
	if l.exited {
		// The server shut down and the loop ended between accept and
		// here: the connection never starts.
		l.mu.Unlock()
		c.state.Store(connClosed)
		l.closeFD(c)
		l.srv.finish(c, false)
		return
	}
	l.adds = append(l.adds, c)
	unix.Write(l.wakefd, eventfdOne[:])
	l.mu.Unlock()
}

// wake interrupts the loop's wait, so it looks at the server's state.
func (l *loop) wake() {
	l.mu.Lock()
	if !l.exited {
		unix.Write(l.wakefd, eventfdOne[:])
	}
	l.mu.Unlock()
}

func (l *loop) run() {
	s := l.srv
	for {
		n, err := l.wait()
		if err != nil {
			s.logger.Error("resp: event loop failed; closing its clients", "err", err)
			l.exit()
			return
		}
		l.now = s.now()
		progress0, skipped0 := l.progress, l.skipped
		l.events1(n)
		for pass := 0; pass < s.cfg.GroupCommitPasses && len(l.writes) > 0; pass++ {
			// Replies wait for a sync: run the clients that became
			// ready meanwhile first, so that the sync covers them too.
			// (Those with replies queued are skipped by event.)
			before := len(l.writes)
			n, err := l.pollNow()
			if err != nil || n == 0 {
				break
			}
			l.events1(n)
			if len(l.writes) == before {
				break
			}
		}
		held := len(l.held)
		l.flush()
		if s.deferrer != nil {
			// Write the held replies that may leave; if this round
			// could serve nobody else (every event was a held client's:
			// level-triggered epoll would report them again at once),
			// wait for the sync instead of spinning.
			l.releaseHeld(l.skipped != skipped0 && l.progress == progress0)
			l.runCont()
			if len(l.held) > held {
				// Let the writer start the sync these wait for: with one
				// CPU it runs only when this goroutine yields.
				runtime.Gosched()
			}
		}
		if (s.cfg.IdleTimeout > 0 || l.waiting > 0) && l.now >= l.nextCron {
			l.cron()
		}
		if s.inShutdown.Load() && l.shutdown() {
			return
		}
	}
}

// events1 handles the first n of l.events.
func (l *loop) events1(n int) {
	for i := range max(n, 0) {
		ev := &l.events[i]
		fd := int(ev.Fd)
		if fd == l.wakefd {
			l.takeAdds()
			continue
		}
		if fd < len(l.conns) {
			if c := l.conns[fd]; c != nil {
				l.event(c)
			}
		}
	}
}

// wakeHeld wakes the loop if it holds replies (Server.notifyHeld).
func (l *loop) wakeHeld() {
	if l.heldN.Load() > 0 {
		l.wake()
	}
}

// releaseHeld writes the held replies that may leave now. With block,
// when none may, it writes the oldest one, waiting in BeforeWrite as a loop
// without HoldReplies does: the loop has nothing else it can do.
func (l *loop) releaseHeld(block bool) {
	if len(l.held) == 0 {
		return
	}
	n := len(l.held)
	keep := l.held[:0]
	for _, c := range l.held {
		if c.fd >= 0 && !c.killed.Load() && !l.srv.deferrer.Ready(c) {
			keep = append(keep, c)
			continue
		}
		l.unhold(c)
	}
	if block && len(keep) == n {
		c := keep[0]
		keep = keep[:copy(keep, keep[1:])]
		l.unhold(c)
	}
	clear(l.held[len(keep):])
	l.held = keep
	l.heldN.Store(int32(len(keep)))
}

// unhold writes a held connection's replies (or closes it).
func (l *loop) unhold(c *Conn) {
	c.queued = false
	switch {
	case c.fd < 0:
	case c.killed.Load():
		l.close(c)
	default:
		if l.flushOne(c) {
			l.written(c)
		}
	}
}

// written follows a complete write of c's replies from flush or unhold:
// the batch goes on if held replies stopped it midway (serve), else it is
// done.
func (l *loop) written(c *Conn) {
	if c.midBatch {
		c.midBatch = false
		l.cont = append(l.cont, c)
		return
	}
	l.done(c)
}

// runCont runs the rest of the batches that held replies had stopped
// (written), then writes or holds their replies, until none is left.
func (l *loop) runCont() {
	for len(l.cont) > 0 {
		cont := l.cont
		l.cont = l.cont2[:0]
		for i, c := range cont {
			cont[i] = nil
			if c.fd >= 0 {
				c.reads++ // as after a wait for the client (see Conn.Batch)
				l.serve(c)
			}
		}
		l.cont2 = cont[:0]
		l.flush()
		l.releaseHeld(false)
	}
}

// wait returns the ready events: at once if there are any, else when
// some arrive or the next cron is due (0 events).
func (l *loop) wait() (int, error) {
	if len(l.held) > 0 {
		// heldN is set: a notification from now on wakes the loop, so
		// look once more before sleeping.
		l.releaseHeld(false)
		if len(l.cont) > 0 {
			return 0, nil // batches to go on with (run)
		}
	}
	n, err := l.pollNow()
	if n != 0 || err != nil {
		return n, err
	}
	switch {
	case l.srv.cfg.IdleTimeout > 0 || l.waiting > 0:
		d := time.Duration(l.nextCron - l.srv.now())
		if d <= 0 {
			return 0, nil
		}
		l.epFile.SetReadDeadline(time.Now().Add(d))
		l.deadline = true
	case l.deadline:
		l.epFile.SetReadDeadline(time.Time{})
		l.deadline = false
	}
	// RawConn.Read calls the function, and while it returns false waits
	// for epfd to become readable. Go's poller watches epfd
	// edge-triggered, but the function reads the (level-triggered) ready
	// list itself before every wait, so no event is missed.
	if rerr := l.epRaw.Read(l.pollFn); rerr != nil {
		if errors.Is(rerr, os.ErrDeadlineExceeded) {
			return 0, nil
		}
		return 0, rerr
	}
	return l.polled, l.pollErr
}

// poll is the function wait gives RawConn.Read (made once, as l.pollFn:
// a closure made per wait would be an allocation per wait).
func (l *loop) poll(uintptr) bool {
	l.polled, l.pollErr = l.pollNow()
	return l.polled != 0 || l.pollErr != nil
}

// pollNow returns the ready events without waiting.
func (l *loop) pollNow() (int, error) {
	for {
		n, err := rawEpollPoll(l.epfd, l.events)
		if err != unix.EINTR {
			return max(n, 0), err
		}
	}
}

// cronInterval is the time between checks of the timeouts: a tenth of a
// second, or half the shortest timeout when that is shorter.
func (l *loop) cronInterval() time.Duration {
	d := maxCronInterval
	for _, t := range []time.Duration{l.srv.cfg.IdleTimeout, l.srv.cfg.OutputTimeout} {
		if t > 0 && t/2 < d {
			d = max(t/2, time.Millisecond)
		}
	}
	return d
}

// takeAdds registers the connections handed over by accept.
func (l *loop) takeAdds() {
	var buf [8]byte
	unix.Read(l.wakefd, buf[:])
	l.mu.Lock()
	adds := l.adds
	l.adds = nil
	pushes := l.pushes
	l.pushes = nil
	resumes := l.resumes
	l.resumes = nil
	l.mu.Unlock()
	for _, c := range adds {
		l.open(c)
	}
	for _, c := range pushes {
		c.push.mu.Lock()
		c.push.inLoop = false
		c.push.mu.Unlock()
		l.deliverPush(c)
	}
	for _, b := range resumes {
		l.resume(b)
	}
}

// block stops reading c, blocked by Conn.Block (in its ServeRESP): the
// loop watches only for the client hanging up until it is resumed, so
// the commands the client sends meanwhile stay in the kernel.
func (l *loop) block(c *Conn) {
	l.ev = unix.EpollEvent{Events: unix.EPOLLRDHUP, Fd: int32(c.fd)}
	// Not l.watch: closing the connection inside its ServeRESP would
	// pull its buffers from under the command. Should this fail, the next
	// event closes the connection (see event).
	unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, c.fd, &l.ev)
}

// inEvents is what the loop waits for on c's socket when it has no
// replies to write: input, or only a hang-up while c is blocked.
func inEvents(c *Conn) uint32 {
	if c.blk != nil {
		return unix.EPOLLRDHUP
	}
	return unix.EPOLLIN
}

// addResume hands the loop a blocked connection's reply (Conn.Block).
func (l *loop) addResume(b *block) {
	l.mu.Lock()
	if !l.exited {
		l.resumes = append(l.resumes, b)
		unix.Write(l.wakefd, eventfdOne[:])
	}
	l.mu.Unlock()
}

// resume writes the reply of a blocked connection after the replies
// before it, then runs the commands buffered behind the blocked one and
// reads again. A connection closed since it blocked is left alone.
func (l *loop) resume(b *block) {
	c := b.c
	if c.fd < 0 || c.blk != b {
		return
	}
	c.blk = nil
	c.reads++ // the commands behind waited
	c.Out = append(c.Out, b.reply...)
	c.before = false // BeforeWrite covers the reply too
	if c.waitOut {
		// Replies before it are waiting for the client: once written,
		// write watches for input again and event runs the rest.
		return
	}
	if !c.queued && !c.state.CompareAndSwap(connIdle, connActive) {
		return // being closed (Kill, Shutdown): the hang-up event closes it
	}
	l.watch(c, unix.EPOLLIN)
	if c.fd >= 0 {
		l.serve(c)
	}
}

// addPush hands the loop a connection with pushes queued (Conn.Push).
func (l *loop) addPush(c *Conn) {
	c.push.mu.Lock()
	if c.push.inLoop {
		c.push.mu.Unlock()
		return
	}
	c.push.inLoop = true
	c.push.mu.Unlock()
	l.mu.Lock()
	if !l.exited {
		l.pushes = append(l.pushes, c)
		unix.Write(l.wakefd, eventfdOne[:])
	}
	l.mu.Unlock()
}

// deliverPush moves c's queued pushes behind its replies and has them
// written this round: after the replies being written (a connection
// waiting for EPOLLOUT or queued for the round's writes), or at once for
// an idle one.
func (l *loop) deliverPush(c *Conn) {
	if c.fd < 0 || !c.hasPush.Load() {
		return
	}
	if c.waitOut || c.queued {
		c.takePush()
		// The client is not reading (or its replies are not yet out):
		// what it has not taken counts against the output limit, as
		// replies do in execute.
		if int64(c.outTotal()) > l.srv.cfg.MaxOutputBuffer {
			l.srv.outputDrops.Add(1)
			l.srv.logger.Warn("resp: closing client over the output buffer limit", "id", c.id, "addr", c.remote,
				"bytes", c.outTotal(), "limit", l.srv.cfg.MaxOutputBuffer)
			l.close(c)
		}
		return
	}
	if !c.state.CompareAndSwap(connIdle, connActive) {
		return // closing
	}
	c.takePush()
	c.queued = true
	l.writes = append(l.writes, c)
}

func (l *loop) open(c *Conn) {
	if c.fd >= len(l.conns) {
		grown := make([]*Conn, max(2*len(l.conns), c.fd+1, 64))
		copy(grown, l.conns)
		l.conns = grown
	}
	l.conns[c.fd] = c
	l.live++
	l.ev = unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(c.fd)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, c.fd, &l.ev); err != nil {
		l.srv.logger.Error("resp: cannot watch client socket; closing it", "id", c.id, "addr", c.remote, "err", err)
		l.close(c)
		return
	}
	l.runOpen(c)
	if c.fd >= 0 {
		l.serve(c) // writes what Open replied, or goes idle
	}
}

func (l *loop) runOpen(c *Conn) {
	defer l.recoverConn(c)
	l.srv.handler.Open(c)
	c.opened = true
}

// recoverConn isolates a panic in the Handler as the goroutine of a
// connection does: logged with its stack, it ends only that connection.
func (l *loop) recoverConn(c *Conn) {
	if v := recover(); v != nil {
		l.srv.logPanic(c, "ServeRESP or Open", v)
		l.close(c)
	}
}

// event handles the readiness of a connection's socket.
func (l *loop) event(c *Conn) {
	if c.waitOut {
		if c.killed.Load() {
			l.close(c)
			return
		}
		if l.write(c) {
			c.midBatch = false
			c.reads++  // the rest of the batch waited for the client
			l.serve(c) // the rest of the batch the full socket held up
		}
		return
	}
	if c.queued {
		l.skipped++
		return // its replies are written first; level-triggered epoll reports the input again
	}
	if c.blk != nil {
		l.close(c) // blocked: the client hung up, or Kill or Shutdown shut the socket down
		return
	}
	if !c.state.CompareAndSwap(connIdle, connActive) {
		l.close(c) // killed, or claimed by Shutdown
		return
	}
	l.progress++
	n, err := c.rd.readFD(c.fd)
	if n > 0 {
		c.reads++
		c.netIn.Add(int64(n))
		c.lastActive.Store(l.now)
		c.noteQueryBuf()
		l.serve(c)
		return
	}
	if err == unix.EAGAIN {
		l.done(c)
		return
	}
	l.close(c) // end of input, or a reset
}

// serve runs the commands buffered for c and queues their replies.
func (l *loop) serve(c *Conn) {
	defer l.recoverConn(c)
	for {
		r := c.execute()
		if r == batchClose {
			l.close(c)
			return
		}
		if r == batchDone {
			break
		}
		if d := l.srv.deferrer; d != nil && !c.before && !d.Ready(c) {
			// The replies so far must wait (a sync, or acknowledgements):
			// hold them as at a batch's end instead of waiting here, which
			// would stall the loop's other clients; the rest of the batch
			// runs once they are written (written, run).
			c.midBatch = true
			break
		}
		if !l.write(c) {
			return // closed, or waiting for EPOLLOUT
		}
		c.reads++ // as after a wait for the client (see Conn.Batch)
	}
	c.noteQueryBuf()
	if c.killed.Load() {
		l.close(c)
		return
	}
	if c.outTotal() > 0 {
		if !c.queued {
			c.queued = true
			l.writes = append(l.writes, c)
		}
		return
	}
	l.done(c)
}

// flush writes the replies of the round; with a Deferrer, it holds those
// that must wait (see Server.deferrer).
func (l *loop) flush() {
	d := l.srv.deferrer
	for i, c := range l.writes {
		l.writes[i] = nil
		if d != nil && c.fd >= 0 && !c.killed.Load() && !c.before && !d.Ready(c) {
			l.held = append(l.held, c) // stays queued: not read until written
			continue
		}
		c.queued = false
		if c.fd < 0 {
			continue
		}
		if c.killed.Load() {
			l.close(c)
			continue
		}
		if l.flushOne(c) {
			l.written(c)
		}
	}
	l.writes = l.writes[:0]
	if d != nil {
		l.heldN.Store(int32(len(l.held)))
	}
}

func (l *loop) flushOne(c *Conn) (ok bool) {
	defer l.recoverConn(c)
	return l.write(c)
}

// write writes the replies pending (Out, and the shared reply). It returns
// true once all of them are written; false when the socket is full (c then
// waits for EPOLLOUT) or c was closed.
func (l *loop) write(c *Conn) bool {
	if !c.before {
		if c.beforeWrite() != nil {
			l.close(c)
			return false
		}
		c.before = true
	}
	progress := false
	for c.outOff < c.outTotal() {
		n, err := rawWrite(c.fd, c.outFrom(c.outOff))
		if n > 0 {
			c.outOff += n
			c.netOut.Add(int64(n))
			progress = true
		}
		switch err {
		case nil, unix.EINTR:
		case unix.EAGAIN:
			c.outLen.Store(int64(c.outTotal() - c.outOff))
			if progress || !c.waitOut {
				// Bytes left, or the wait begins, now: not at the start
				// of the round, which a long command may have made
				// long ago. (A write that empties Out needs no stamp.)
				c.outSince = l.srv.now()
			}
			if !c.waitOut {
				c.waitOut = true
				l.waiting++
				l.watch(c, unix.EPOLLOUT)
			}
			return false
		default:
			l.close(c)
			return false
		}
	}
	if c.waitOut {
		c.waitOut = false
		l.waiting--
		c.outLen.Store(0)
		l.watch(c, inEvents(c))
	}
	c.resetOut()
	c.outOff = 0
	c.before = false
	return true
}

// watch sets the events the loop waits for on c's socket.
func (l *loop) watch(c *Conn, events uint32) {
	l.ev = unix.EpollEvent{Events: events, Fd: int32(c.fd)}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, c.fd, &l.ev); err != nil {
		l.close(c)
	}
}

// done ends a batch whose replies are all written: the connection closes
// if asked to, else becomes idle (unless the server is shutting down).
func (l *loop) done(c *Conn) {
	if cap(c.Out) > maxRetainedBuf {
		c.Out = nil
	}
	c.outCap.Store(int64(cap(c.Out)))
	if c.closeAfter {
		if c.hijack != nil && c.takeOver() {
			l.hijack(c)
			return
		}
		l.close(c)
		return
	}
	// Become idle, then look for shutdown, as the goroutine of a
	// connection does.
	c.state.Store(connIdle)
	if l.srv.inShutdown.Load() {
		l.close(c)
	}
}

// cron closes the clients past IdleTimeout, and those whose replies have
// made no progress for OutputTimeout (or IdleTimeout when shorter).
func (l *loop) cron() {
	s := l.srv
	idle := int64(s.cfg.IdleTimeout)
	out := int64(s.cfg.OutputTimeout)
	if idle > 0 && idle < out {
		out = idle
	}
	for _, c := range l.conns {
		switch {
		case c == nil:
		case c.waitOut:
			if l.now-c.outSince >= out {
				s.logger.Debug("resp: closing client that does not read its replies", "id", c.id, "addr", c.remote)
				l.close(c)
			}
		case c.blk != nil:
			// Blocked: not idle, however long it waits (as in Redis).
		case idle > 0 && l.now-c.lastActive.Load() >= idle:
			if c.state.CompareAndSwap(connIdle, connClosed) {
				s.logger.Debug("resp: closing idle client", "id", c.id, "addr", c.remote)
				l.close(c)
			}
		}
	}
	l.nextCron = l.now + int64(l.cronInterval())
	if s.cronHook != nil {
		s.cronHook(l.now)
	}
}

// shutdown closes the loop's idle connections once the server is shutting
// down, and ends the loop when none is left. It reports whether it did.
func (l *loop) shutdown() bool {
	for _, c := range l.conns {
		if c != nil && (c.state.Load() == connClosed || c.state.CompareAndSwap(connIdle, connClosed)) {
			l.close(c)
		}
	}
	if l.live > 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.adds) > 0 {
		return false // the eventfd is readable: the next round takes them
	}
	l.exited = true
	l.release()
	return true
}

// exit closes every connection of a loop whose epoll failed, and ends it.
func (l *loop) exit() {
	l.mu.Lock()
	l.exited = true
	adds := l.adds
	l.adds = nil
	l.mu.Unlock()
	for _, c := range l.conns {
		if c != nil {
			l.close(c)
		}
	}
	for _, c := range adds {
		c.state.Store(connClosed)
		l.closeFD(c)
		l.srv.finish(c, false)
	}
	l.mu.Lock()
	l.release()
	l.mu.Unlock()
}

// close closes a connection of the loop, once.
func (l *loop) close(c *Conn) {
	if c.fd < 0 {
		return
	}
	c.state.Store(connClosed)
	if c.waitOut {
		c.waitOut = false
		l.waiting--
	}
	l.conns[c.fd] = nil
	l.live--
	l.closeFD(c)
	c.Out, c.shared = nil, nil
	c.outLen.Store(0)
	l.srv.finish(c, c.opened)
}

// hijack hands a connection whose replies are written, and which
// takeOver moved to the hijacked state, to its Hijack function: the
// socket leaves epoll and the server, and becomes a net.Conn of Go's
// poller.
func (l *loop) hijack(c *Conn) {
	fd := c.fd
	unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	l.conns[fd] = nil
	l.live--
	c.fdMu.Lock()
	c.fdOpen = false
	c.fd = -1
	c.fdMu.Unlock()
	f := os.NewFile(uintptr(fd), "client")
	nc, err := net.FileConn(f) // a duplicate of fd
	f.Close()
	rest := c.hijackRest()
	c.Out, c.shared = nil, nil
	l.srv.finish(c, c.opened)
	if err != nil {
		l.srv.logger.Error("resp: cannot hand over hijacked client; closing it", "id", c.id, "addr", c.remote, "err", err)
		return
	}
	go c.runHijack(nc, rest)
}

// closeFD closes c's descriptor (which also removes it from epoll).
func (l *loop) closeFD(c *Conn) {
	c.fdMu.Lock()
	c.fdOpen = false
	unix.Close(c.fd)
	c.fd = -1
	c.fdMu.Unlock()
}

// readFD reads once from a non-blocking socket into the buffer. It returns
// io.EOF at the end of input and unix.EAGAIN when nothing is ready.
func (r *reader) readFD(fd int) (int, error) {
	r.makeRoom()
	for {
		n, err := rawRead(fd, r.buf[r.end:])
		if n > 0 {
			r.end += n
			return n, nil
		}
		if err == unix.EINTR {
			continue
		}
		if err == nil {
			err = io.EOF
		}
		return 0, err
	}
}

package resp

import (
	"errors"
	"os"
	"sync"
	"time"
)

// pushState holds the bytes other goroutines queued for a connection with
// Push (RESP3 push frames such as client-side caching invalidations).
type pushState struct {
	mu       sync.Mutex // guards buf, flushing, inLoop
	buf      []byte
	flushing bool // a goroutine writes buf (connections without a loop)
	inLoop   bool // c is in its loop's list of pushes
	// wmu serialises writes to the socket of a connection without a loop:
	// its own replies and the pushes written while it waits for input.
	wmu sync.Mutex
}

// Push queues b, one or more complete RESP frames, for the client, from
// any goroutine. The frames are written after the reply the connection is
// writing or building when Push is called (never inside a reply), and
// without waiting for the client's next command. Push does not block on
// the client's socket. A connection whose queued pushes exceed
// Config.MaxOutputBuffer is closed, as one whose replies do. Pushes to a
// closed or hijacked connection are dropped.
func (c *Conn) Push(b []byte) {
	p := &c.push
	p.mu.Lock()
	if c.state.Load() >= connClosed { // closed or hijacked
		p.mu.Unlock()
		return
	}
	p.buf = append(p.buf, b...)
	c.hasPush.Store(true)
	over := int64(len(p.buf)) > c.srv.cfg.MaxOutputBuffer
	if over {
		p.buf = nil
		c.hasPush.Store(false)
	}
	p.mu.Unlock()
	if over {
		c.srv.outputDrops.Add(1)
		c.srv.logger.Warn("resp: closing client over the output buffer limit", "id", c.id, "addr", c.remote,
			"limit", c.srv.cfg.MaxOutputBuffer)
		c.Kill()
		return
	}
	if c.lp != nil {
		c.lp.addPush(c)
		return
	}
	// Seen after hasPush was set: either the connection sees hasPush
	// once it is idle (idlePush), or this sees it idle.
	if c.state.Load() == connIdle {
		c.kickPush()
	}
}

// takePush appends the queued pushes to c.Out. Only the connection's own
// goroutine (or loop) calls it.
func (c *Conn) takePush() {
	p := &c.push
	p.mu.Lock()
	c.Out = append(c.Out, p.buf...)
	p.buf = p.buf[:0]
	c.hasPush.Store(false)
	p.mu.Unlock()
}

// kickPush starts a goroutine writing the queued pushes of a connection
// without a loop that is waiting for input, unless one runs already.
func (c *Conn) kickPush() {
	p := &c.push
	p.mu.Lock()
	start := !p.flushing && len(p.buf) > 0
	if start {
		p.flushing = true
	}
	p.mu.Unlock()
	if start {
		go c.flushPush()
	}
}

// flushPush writes the queued pushes until none are left.
func (c *Conn) flushPush() {
	p := &c.push
	var out []byte
	for {
		// The pushes are taken with wmu held, so that a reply the
		// connection writes meanwhile cannot go out before them: the
		// connection either takes them first (into its Out, ahead of the
		// replies of commands that start later) or waits for this write.
		p.wmu.Lock()
		p.mu.Lock()
		if len(p.buf) == 0 || c.state.Load() >= connClosed { // closed or hijacked
			p.buf = p.buf[:0]
			c.hasPush.Store(false)
			p.flushing = false
			p.mu.Unlock()
			p.wmu.Unlock()
			return
		}
		out = append(out[:0], p.buf...)
		p.buf = p.buf[:0]
		c.hasPush.Store(false)
		p.mu.Unlock()
		err := c.writeRaw(out)
		p.wmu.Unlock()
		if err != nil {
			c.Kill() // a no-op if the connection was hijacked meanwhile
		}
	}
}

// writeRaw writes b to a connection without a loop, giving up when an
// output timeout passes without progress. The caller holds push.wmu.
func (c *Conn) writeRaw(b []byte) error {
	d := c.srv.cfg.OutputTimeout
	for len(b) > 0 {
		c.nc.SetWriteDeadline(time.Now().Add(d))
		n, err := c.nc.Write(b)
		c.netOut.Add(int64(n))
		b = b[n:]
		if err == nil {
			break
		}
		if n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
	c.nc.SetWriteDeadline(time.Time{})
	return nil
}

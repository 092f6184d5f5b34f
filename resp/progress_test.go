package resp

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// paceConn is a client connection, without a network, whose reads of the
// replies are slower than the server writes them: every Write takes at
// most step bytes and then returns, as a Write does when its deadline
// passes mid-way. After budget bytes in all, the client stops reading:
// Writes make no progress at all.
type paceConn struct {
	req    *strings.Reader
	step   int
	budget int

	mu      sync.Mutex
	out     bytes.Buffer
	changed chan struct{} // a Write or Close happened
	closed  chan struct{}
	once    sync.Once
}

func newPaceConn(req string, step, budget int) *paceConn {
	return &paceConn{req: strings.NewReader(req), step: step, budget: budget,
		changed: make(chan struct{}, 1), closed: make(chan struct{})}
}

func (c *paceConn) notify() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *paceConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	n, _ := c.req.Read(p)
	c.mu.Unlock()
	if n > 0 {
		return n, nil
	}
	<-c.closed
	return 0, net.ErrClosed
}

func (c *paceConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.notify()
	n := min(len(p), c.step, c.budget-c.out.Len())
	c.out.Write(p[:n])
	if n < len(p) {
		return n, os.ErrDeadlineExceeded
	}
	return n, nil
}

func (c *paceConn) Close() error {
	c.once.Do(func() { close(c.closed); c.notify() })
	return nil
}

func (c *paceConn) written() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Len()
}

func (c *paceConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

func (c *paceConn) LocalAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6379} }
func (c *paceConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}
}
func (c *paceConn) SetDeadline(time.Time) error      { return nil }
func (c *paceConn) SetReadDeadline(time.Time) error  { return nil }
func (c *paceConn) SetWriteDeadline(time.Time) error { return nil }

// oneConnListener accepts one connection, then waits for Close.
type oneConnListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConnListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6379}
}

// servePace serves one paceConn (on a goroutine of its own: it is not a
// TCP socket) until done(written, closed) is true, and returns the bytes
// written and whether the server had closed the connection then.
func servePace(t *testing.T, pc *paceConn, done func(written int, closed bool) bool) (int, bool) {
	t.Helper()
	ln := &oneConnListener{conns: make(chan net.Conn, 1), closed: make(chan struct{})}
	ln.conns <- pc
	s := NewServer(Config{Logger: discardLogger()}, newTestHandler())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	defer func() {
		s.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	}()
	timeout := time.After(testTimeout)
	for {
		written, closed := pc.written(), pc.isClosed()
		if done(written, closed) {
			return written, closed
		}
		select {
		case <-pc.changed:
		case <-timeout:
			t.Fatalf("after %v: %d bytes written, closed %v", testTimeout, written, closed)
		}
	}
}

// A client that keeps reading a large reply, however slowly, receives all
// of it: only a write with no progress at all for the output timeout ends
// the connection (goroutine per connection; the event loops have their
// own test).
func TestServerSlowSteadyReaderKept(t *testing.T) {
	const size = 1 << 20
	want := fmt.Sprintf("$%d\r\n%s\r\n", size, strings.Repeat("b", size))
	pc := newPaceConn(fmt.Sprintf("BIG %d\r\n", size), 1000, 1<<30)
	written, closed := servePace(t, pc, func(written int, closed bool) bool { return written == len(want) || closed })
	if closed {
		t.Fatalf("closed after %d of %d bytes of the reply", written, len(want))
	}
	pc.mu.Lock()
	got := pc.out.String()
	pc.mu.Unlock()
	if got != want {
		t.Errorf("reply of %d bytes differs", len(got))
	}
}

func TestServerStalledReaderDropped(t *testing.T) {
	const size, budget = 1 << 20, 5000
	pc := newPaceConn(fmt.Sprintf("BIG %d\r\n", size), 1000, budget)
	if n, _ := servePace(t, pc, func(_ int, closed bool) bool { return closed }); n != budget {
		t.Errorf("%d bytes written before the close, want %d", n, budget)
	}
}

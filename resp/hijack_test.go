package resp

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testpki"
	"github.com/cellserver/cellserver/internal/testwait"
)

// hijackCall is one call of a Hijack function.
type hijackCall struct {
	c    *Conn
	nc   net.Conn
	rest string
}

// blockCall is one Conn.Block.
type blockCall struct {
	id     int64
	resume func([]byte)
}

// hbHandler is pushHandler with
//
//	HIJACK        replies +OK and hijacks the connection (the function
//	              writes "+HIJACKED\r\n" to the socket first)
//	KILLHIJACK    hijacks, then kills its own connection before the reply
//	              is written
//	PUSHHIJACK    replies +OK, hijacks, then pushes to itself
//	WAITB         blocks; the test resumes it through h.blocks
//	WAITK         blocks; the test resumes it through h.kblocks
//	SEEN          replies with the commands run so far, space-separated
type hbHandler struct {
	*pushHandler
	hijacked chan hijackCall
	blocks   chan blockCall
	kblocks  chan blockCall
	seenMu   sync.Mutex
	seen     []string
}

func newHBHandler() *hbHandler {
	return &hbHandler{
		pushHandler: &pushHandler{testHandler: newTestHandler()},
		hijacked:    make(chan hijackCall, 10),
		blocks:      make(chan blockCall, 1000),
		kblocks:     make(chan blockCall, 10),
	}
}

func (h *hbHandler) ServeRESP(c *Conn, args [][]byte) {
	name := strings.ToUpper(string(args[0]))
	h.seenMu.Lock()
	h.seen = append(h.seen, name)
	h.seenMu.Unlock()
	hijack := func(nc net.Conn, rest []byte) {
		if _, err := io.WriteString(nc, "+HIJACKED\r\n"); err != nil {
			nc.Close()
			return
		}
		h.hijacked <- hijackCall{c, nc, string(rest)}
	}
	switch name {
	case "HIJACK":
		c.Out = append(c.Out, "+OK\r\n"...)
		c.Hijack(hijack)
	case "KILLHIJACK":
		c.Out = append(c.Out, "+OK\r\n"...)
		c.Hijack(hijack)
		c.Kill()
	case "PUSHHIJACK":
		c.Out = append(c.Out, "+OK\r\n"...)
		c.Hijack(hijack)
		c.Push([]byte(">1\r\n+late\r\n"))
	case "WAITB":
		h.blocks <- blockCall{c.ID(), c.Block()}
	case "WAITK":
		h.kblocks <- blockCall{c.ID(), c.Block()}
	default:
		h.pushHandler.ServeRESP(c, args)
	}
}

// seenCommands returns the commands run so far, space-separated.
func (h *hbHandler) seenCommands() string {
	h.seenMu.Lock()
	defer h.seenMu.Unlock()
	return strings.Join(h.seen, " ")
}

// nextHijack waits for the next Hijack function call.
func (h *hbHandler) nextHijack(t *testing.T) hijackCall {
	t.Helper()
	select {
	case hc := <-h.hijacked:
		t.Cleanup(func() { hc.nc.Close() })
		return hc
	case <-time.After(testTimeout):
		t.Fatal("the Hijack function was not called")
		return hijackCall{}
	}
}

// nextBlock waits for the next Block.
func (h *hbHandler) nextBlock(t *testing.T) blockCall {
	t.Helper()
	select {
	case b := <-h.blocks:
		return b
	case <-time.After(testTimeout):
		t.Fatal("no command blocked")
		return blockCall{}
	}
}

// waitClosed waits until connection id has ended (Handler.Close ran).
func waitClosed(t *testing.T, h *testHandler, id int64) {
	t.Helper()
	deadline := time.After(testTimeout)
	for {
		select {
		case got := <-h.closed:
			if got == id {
				return
			}
		case <-deadline:
			t.Fatalf("connection %d was not closed", id)
		}
	}
}

// expectRead reads exactly len(want) bytes from r and compares.
func expectRead(t *testing.T, r io.Reader, want string) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(r, got); err != nil || string(got) != want {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
}

func write(t *testing.T, w io.Writer, s string) {
	t.Helper()
	if _, err := io.WriteString(w, s); err != nil {
		t.Fatal(err)
	}
}

// serveModes runs f with an event loop and with a goroutine per
// connection.
func serveModes(t *testing.T, f func(t *testing.T, loops int)) {
	for _, loops := range []int{1, -1} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) { f(t, loops) })
	}
}

// TestHijack: the hijacking command's reply reaches the client before the
// Hijack function runs; the function gets the pipelined bytes after it and
// a socket it can use both ways; the server forgets the connection (Stats,
// Range, MaxClients, Kill, Shutdown); no command after HIJACK runs.
func TestHijack(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := newHBHandler()
		srv, addr := startServer(t, Config{EventLoops: loops, MaxClients: 1}, h)
		a := dial(t, addr)
		write(t, a, "PING\r\nHIJACK\r\nabc") // one write: one read on the server
		expectRead(t, a, "+PONG\r\n+OK\r\n+HIJACKED\r\n")
		hc := h.nextHijack(t)
		if hc.rest != "abc" {
			t.Errorf("rest %q, want %q", hc.rest, "abc")
		}
		waitClosed(t, h.testHandler, hc.c.ID()) // Handler.Close ran
		if n := srv.Stats().ConnectedClients; n != 0 {
			t.Errorf("ConnectedClients %d after the hijack, want 0", n)
		}
		srv.Range(func(c *Conn) bool {
			t.Errorf("Range yields connection %d after the hijack", c.ID())
			return true
		})
		// MaxClients 1 no longer counts it.
		b := dial(t, addr)
		roundTrip(t, b, "ECHO b\r\n", "$1\r\nb\r\n")
		b.Close()
		// Kill is a no-op; the socket works both ways.
		hc.c.Kill()
		hc.nc.SetDeadline(time.Now().Add(testTimeout))
		write(t, a, "PING\r\n")
		expectRead(t, hc.nc, "PING\r\n")
		write(t, hc.nc, "from server\r\n")
		expectRead(t, a, "from server\r\n")
		if got := h.seenCommands(); got != "PING HIJACK ECHO" { // ECHO is b's
			t.Errorf("commands run %q, want %q", got, "PING HIJACK ECHO")
		}
		// Shutdown neither waits for it nor closes it.
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		write(t, a, "after shutdown")
		expectRead(t, hc.nc, "after shutdown")
		write(t, hc.nc, "still here")
		expectRead(t, a, "still here")
		hc.nc.Close()
		if got := readToEOF(t, a); got != "" {
			t.Errorf("after the Hijack function closed: %q", got)
		}
	})
}

// TestHijackKilledBeforeWrite: a connection killed before the hijacking
// command's reply is written is closed, and the Hijack function never
// runs.
func TestHijackKilledBeforeWrite(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := newHBHandler()
		_, addr := startServer(t, Config{EventLoops: loops}, h)
		a := dial(t, addr)
		roundTrip(t, a, "CTX\r\n", ":1\r\n")
		write(t, a, "KILLHIJACK\r\n")
		if got := readToEOF(t, a); got != "" {
			t.Errorf("killed client received %q", got)
		}
		waitClosed(t, h.testHandler, 1)
		select {
		case hc := <-h.hijacked:
			hc.nc.Close()
			t.Fatal("the Hijack function ran for a killed connection")
		default:
		}
	})
}

// TestHijackLaterPushDropped: a push queued after the hijack is not
// written to the hijacked socket.
func TestHijackLaterPushDropped(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := newHBHandler()
		_, addr := startServer(t, Config{EventLoops: loops}, h)
		a := dial(t, addr)
		write(t, a, "PUSHHIJACK\r\n")
		// The push follows the reply of the command that queued it, which
		// is still the server's.
		expectRead(t, a, "+OK\r\n>1\r\n+late\r\n+HIJACKED\r\n")
		hc := h.nextHijack(t)
		hc.c.Push([]byte(">1\r\n+dropped\r\n"))
		write(t, hc.nc, "+mine\r\n")
		expectRead(t, a, "+mine\r\n")
	})
}

// bwHandler is hbHandler with a BeforeWrite that pushes a frame to the
// connection named by pushOnWrite, once: the push is queued after the
// replies were taken for the write, so it is still queued when the
// connection is hijacked.
type bwHandler struct {
	*hbHandler
	pushOnWrite atomic.Int64
}

func (h *bwHandler) BeforeWrite(c *Conn) error {
	if h.pushOnWrite.CompareAndSwap(c.ID(), 0) {
		c.Push([]byte(">1\r\n+queued\r\n"))
	}
	return nil
}

// TestHijackQueuedPushWritten: a push queued before the hijack but after
// the last write of replies reaches the client before the socket is
// handed over.
func TestHijackQueuedPushWritten(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := &bwHandler{hbHandler: newHBHandler()}
		_, addr := startServer(t, Config{EventLoops: loops}, h)
		a := dial(t, addr)
		roundTrip(t, a, "CTX\r\n", ":1\r\n")
		h.pushOnWrite.Store(1)
		write(t, a, "HIJACK\r\n")
		expectRead(t, a, "+OK\r\n>1\r\n+queued\r\n+HIJACKED\r\n")
		h.nextHijack(t)
	})
}

// TestHijackTLS: a TLS client is hijacked as its *tls.Conn.
func TestHijackTLS(t *testing.T) {
	h := newHBHandler()
	srv, a := dialTLS(t, h)
	write(t, a, "PING\r\nHIJACK\r\nxyz")
	expectRead(t, a, "+PONG\r\n+OK\r\n+HIJACKED\r\n")
	hc := h.nextHijack(t)
	if _, ok := hc.nc.(*tls.Conn); !ok {
		t.Errorf("Hijack gave a %T, want *tls.Conn", hc.nc)
	}
	if hc.rest != "xyz" {
		t.Errorf("rest %q, want %q", hc.rest, "xyz")
	}
	hc.nc.SetDeadline(time.Now().Add(testTimeout))
	write(t, a, "up")
	expectRead(t, hc.nc, "up")
	write(t, hc.nc, "down")
	expectRead(t, a, "down")
	if n := srv.Stats().ConnectedClients; n != 0 {
		t.Errorf("ConnectedClients %d after the hijack, want 0", n)
	}
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	return testpki.NewCA(t, "resp test CA").Issue(t, "127.0.0.1", x509.ExtKeyUsageServerAuth).TLS()
}

// TestBlockPipeline: a blocked command's reply comes after the replies
// before it (written at once) and before those of the commands pipelined
// behind it, which run only after resume; a second resume does nothing.
func TestBlockPipeline(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := newHBHandler()
		_, addr := startServer(t, Config{EventLoops: loops}, h)
		a := dial(t, addr)
		write(t, a, "PING a\r\nWAITB\r\nPING b\r\nPING c\r\n")
		expectRead(t, a, "$1\r\na\r\n")
		blk := h.nextBlock(t)
		if r := h.ran.Load(); r != 1 { // testHandler counts PING a only
			t.Errorf("%d commands ran while blocked, want 1", r)
		}
		done := make(chan struct{})
		go func() { blk.resume([]byte(":42\r\n")); close(done) }()
		<-done
		expectRead(t, a, ":42\r\n$1\r\nb\r\n$1\r\nc\r\n")
		blk.resume([]byte(":43\r\n"))
		roundTrip(t, a, "PING\r\n", "+PONG\r\n")
		if got := h.seenCommands(); got != "PING WAITB PING PING PING" {
			t.Errorf("commands run %q", got)
		}
	})
}

// TestBlockLoopServesOthers: while one client of an event loop is
// blocked, the loop serves its other clients (EventLoops 1: both are on
// the same loop), and the blocked client's pipelined commands wait.
func TestBlockLoopServesOthers(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := newHBHandler()
		_, addr := startServer(t, Config{EventLoops: loops}, h)
		a, b := dial(t, addr), dial(t, addr)
		write(t, a, "WAITB\r\nPING a\r\n")
		blk := h.nextBlock(t)
		const n = 100
		for i := range n {
			arg := strconv.Itoa(i)
			roundTrip(t, b, "ECHO "+arg+"\r\n", "$"+strconv.Itoa(len(arg))+"\r\n"+arg+"\r\n")
		}
		// More input from the blocked client runs nothing either.
		write(t, a, "PING z\r\n")
		roundTrip(t, b, "PING\r\n", "+PONG\r\n")
		if got := h.seenCommands(); got != "WAITB "+strings.Repeat("ECHO ", n)+"PING" {
			t.Errorf("commands run %q: one behind the blocked one ran", got)
		}
		blk.resume([]byte("+done\r\n"))
		expectRead(t, a, "+done\r\n$1\r\na\r\n$1\r\nz\r\n")
		t.Logf("%d round trips of another client while one was blocked", n)
	})
}

// TestBlockKill: Kill closes a blocked client; resume afterwards does
// nothing and the server goes on serving.
func TestBlockKill(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := newHBHandler()
		srv, addr := startServer(t, Config{EventLoops: loops}, h)
		a := dial(t, addr)
		write(t, a, "WAITB\r\nPING\r\n")
		blk := h.nextBlock(t)
		srv.Range(func(c *Conn) bool {
			if c.ID() == blk.id {
				c.Kill()
			}
			return true
		})
		if got := readToEOF(t, a); got != "" {
			t.Errorf("killed blocked client received %q", got)
		}
		waitClosed(t, h.testHandler, blk.id)
		blk.resume([]byte(":1\r\n"))
		b := dial(t, addr)
		roundTrip(t, b, "PING\r\n", "+PONG\r\n")
	})
}

// TestBlockClientHangsUp: the server closes a blocked client that hangs
// up (Handler.Close runs) without waiting for its resume, on an event
// loop and on a goroutine of its own, after input that arrived while it
// was blocked too.
func TestBlockClientHangsUp(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := newHBHandler()
		srv, addr := startServer(t, Config{EventLoops: loops}, h)
		a := dial(t, addr)
		write(t, a, "WAITB\r\n")
		blk := h.nextBlock(t)
		write(t, a, "PING\r\n")
		a.Close()
		waitClosed(t, h.testHandler, blk.id)
		if n := srv.Stats().ConnectedClients; n != 0 {
			t.Errorf("ConnectedClients %d after the blocked client left, want 0", n)
		}
		blk.resume([]byte(":1\r\n"))
	})
}

// TestBlockTLS: a TLS client (served on a goroutine of its own) that
// blocks gets its reply and then the replies of what it sent while it was
// blocked, and the server sees it hang up while blocked.
func TestBlockTLS(t *testing.T) {
	h := newHBHandler()
	_, a := dialTLS(t, h)
	write(t, a, "WAITB\r\n")
	blk := h.nextBlock(t)
	write(t, a, "PING x\r\n")
	blk.resume([]byte(":5\r\n"))
	expectRead(t, a, ":5\r\n$1\r\nx\r\n")
	write(t, a, "WAITB\r\n")
	blk = h.nextBlock(t)
	a.Close()
	waitClosed(t, h.testHandler, blk.id)
	blk.resume([]byte(":6\r\n"))
}

// TestBlockReadBounded: a blocked client on a goroutine that sends while
// it waits gets at most about blockedReadMax bytes read into its buffer
// (the rest stays with the kernel and the client), and once resumed every
// command it sent runs, in order.
func TestBlockReadBounded(t *testing.T) {
	h := newHBHandler()
	srv, addr := startServer(t, Config{EventLoops: -1}, h)
	a := dial(t, addr)
	write(t, a, "WAITB\r\n")
	blk := h.nextBlock(t)
	const n = 100000 // 1.4 MB of pipelined ECHOs
	var req, want strings.Builder
	for i := range n {
		arg := strconv.Itoa(i % 10)
		req.WriteString("ECHO " + arg + "\r\n")
		want.WriteString("$1\r\n" + arg + "\r\n")
	}
	sent := make(chan error, 1)
	go func() { _, err := io.WriteString(a, req.String()); sent <- err }()
	buffered := func() (q int) {
		srv.Range(func(c *Conn) bool { q = c.QueryBufLen(); return true })
		return q
	}
	// Then the reading stops until resume.
	testwait.For(t, testTimeout, fmt.Sprintf("%d bytes read while blocked", blockedReadMax), func() (bool, string) {
		q := buffered()
		return q >= blockedReadMax, fmt.Sprintf("%d bytes read", q)
	})
	if q := buffered(); q > 2*blockedReadMax {
		t.Fatalf("%d bytes buffered while blocked, want at most about %d", q, blockedReadMax)
	}
	blk.resume([]byte("+done\r\n"))
	expectRead(t, a, "+done\r\n"+want.String())
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// TestBlockNotIdle: IdleTimeout does not close a blocked client. An idle
// client connected after it blocked is the witness that the timeout has
// passed for the blocked one too.
func TestBlockNotIdle(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := newHBHandler()
		_, addr := startServer(t, Config{EventLoops: loops, IdleTimeout: 50 * time.Millisecond}, h)
		a := dial(t, addr)
		write(t, a, "WAITB\r\n")
		blk := h.nextBlock(t)
		w := dial(t, addr)
		if got := readToEOF(t, w); got != "" {
			t.Errorf("idle client received %q", got)
		}
		blk.resume([]byte(":7\r\n"))
		expectRead(t, a, ":7\r\n")
	})
}

// TestBlockShutdown: Shutdown closes a blocked client as an idle one and
// returns; resume afterwards does nothing.
func TestBlockShutdown(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := newHBHandler()
		srv, addr := startServer(t, Config{EventLoops: loops}, h)
		a := dial(t, addr)
		write(t, a, "PING\r\nWAITB\r\n")
		expectRead(t, a, "+PONG\r\n")
		blk := h.nextBlock(t)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if got := readToEOF(t, a); got != "" {
			t.Errorf("blocked client received %q", got)
		}
		blk.resume([]byte(":1\r\n"))
	})
}

// TestBlockPush: pushes reach a blocked client.
func TestBlockPush(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := newHBHandler()
		srv, addr := startServer(t, Config{EventLoops: loops}, h)
		h.srv.Store(srv)
		a, b := dial(t, addr), dial(t, addr)
		roundTrip(t, a, "CTX\r\n", ":1\r\n")
		write(t, a, "WAITB\r\nPING\r\n")
		blk := h.nextBlock(t)
		for i := range 3 {
			roundTrip(t, b, "PUSHTO 1 m"+strconv.Itoa(i)+"\r\n", "+OK\r\n")
			expectRead(t, a, ">1\r\n+m"+strconv.Itoa(i)+"\r\n")
		}
		blk.resume([]byte(":0\r\n"))
		expectRead(t, a, ":0\r\n+PONG\r\n")
	})
}

// TestBlockRace: clients block and are resumed from other goroutines over
// and over, while another client is killed while blocked (run under
// -race).
func TestBlockRace(t *testing.T) {
	serveModes(t, func(t *testing.T, loops int) {
		h := newHBHandler()
		srv, addr := startServer(t, Config{EventLoops: loops}, h)
		const clients, cycles, kills = 8, 200, 20
		stop := make(chan struct{})
		defer close(stop)
		var resumed atomic.Int64
		go func() { // resume each block from a goroutine of its own, twice
			for {
				select {
				case blk := <-h.blocks:
					go func() {
						blk.resume([]byte(":" + strconv.FormatInt(blk.id, 10) + "\r\n"))
						blk.resume([]byte("-ERR twice\r\n"))
						resumed.Add(1)
					}()
				case <-stop:
					return
				}
			}
		}()
		errs := make(chan error, clients)
		for range clients {
			c := dial(t, addr)
			go func() { errs <- blockCycles(c, cycles) }()
		}
		// Meanwhile other clients are killed while blocked, and resumed
		// as they are killed.
		for range kills {
			k := dial(t, addr)
			write(t, k, "WAITK\r\n")
			var blk blockCall
			select {
			case blk = <-h.kblocks:
			case <-time.After(testTimeout):
				t.Fatal("no block")
			}
			srv.Range(func(c *Conn) bool {
				if c.ID() == blk.id {
					go c.Kill()
				}
				return true
			})
			go blk.resume([]byte(":1\r\n"))
			readToEOF(t, k)
		}
		for range clients {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
		t.Logf("%d block/resume cycles (%d clients x %d), %d blocked clients killed, %d resumes",
			clients*cycles, clients, cycles, kills, resumed.Load())
	})
}

// blockCycles sends WAITB then PING, cycles times, and checks the replies:
// the resume reply (the connection's ID) then +PONG.
func blockCycles(c net.Conn, cycles int) error {
	rd := bufio.NewReader(c)
	line := func() (string, error) {
		s, err := rd.ReadString('\n')
		return strings.TrimSuffix(s, "\r\n"), err
	}
	if _, err := io.WriteString(c, "CTX\r\n"); err != nil {
		return err
	}
	id, err := line()
	if err != nil {
		return err
	}
	for i := range cycles {
		if _, err := io.WriteString(c, "WAITB\r\nPING\r\n"); err != nil {
			return err
		}
		if got, err := line(); got != id {
			return fmt.Errorf("client %s cycle %d: %q, %v; want the resume reply", id, i, got, err)
		}
		if got, err := line(); got != "+PONG" {
			return fmt.Errorf("client %s cycle %d: %q, %v; want +PONG", id, i, got, err)
		}
	}
	return nil
}

// dialTLS serves h on a TLS listener for the test and returns the server
// and a client connection to it, with the test's deadline set; both close
// at cleanup.
func dialTLS(t *testing.T, h Handler) (*Server, *tls.Conn) {
	t.Helper()
	cert := selfSigned(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(Config{Logger: discardLogger(), EventLoops: testEventLoops}, h)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	a, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	a.SetDeadline(time.Now().Add(testTimeout))
	return srv, a
}

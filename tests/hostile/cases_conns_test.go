package hostile

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/testwait"
)

// partial is a command cut short: the server has to hold it and wait.
const partial = "*2\r\n$4\r\nECHO\r\n$5\r\nhel"

// openPartial opens n connections (32 dialers) that each send partial and
// then nothing. The connections are closed when the test ends.
func openPartial(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	errs, cnt := runParallel(n, 32, func(i int) error {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			return err
		}
		conns[i] = c
		c.SetWriteDeadline(time.Now().Add(ioTimeout))
		_, err = c.Write([]byte(partial))
		return err
	})
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	if cnt > 0 {
		t.Fatalf("opening %d half-open connections: %d failed, e.g. %v", n, cnt, errs)
	}
	return conns
}

// Case 4a: half-open connections with --timeout 1s. 1000 clients send a
// partial command and then nothing; each must be closed (EOF, no reply)
// between 0.9 s and 6 s after it sent its bytes. The probe, active every
// 2 ms, is never idle and keeps its connection.
//
// RSS bound: base + 1000 x 64 KiB + 32 MiB.
func caseHalfOpenTimeout(t *testing.T) {
	const n = 1000
	const timeout = time.Second
	a := begin(t, "4a. 1000 half-open clients, --timeout 1s", false, "--timeout", "1s")
	sent := time.Now()
	conns := openPartial(t, a.addr, n)
	opened := time.Since(sent)
	closedAfter := make([]time.Duration, n)
	var mu sync.Mutex
	errs, cnt := runParallel(n, n, func(i int) error {
		got, err := readAll(conns[i], 10*time.Second)
		d := time.Since(sent)
		mu.Lock()
		closedAfter[i] = d
		mu.Unlock()
		if err != nil && !isReset(err) {
			return fmt.Errorf("not closed within %v: %v", d, err)
		}
		if len(got) != 0 {
			return fmt.Errorf("got %q, want the connection closed without a reply", got)
		}
		return nil
	})
	reportErrs(t, "half-open clients under --timeout", errs, cnt)
	slices.Sort(closedAfter)
	// The first connection was written at sent, the last by sent+opened.
	if first, last := closedAfter[0], closedAfter[n-1]; first < timeout-100*time.Millisecond || last > opened+timeout+5*time.Second {
		t.Errorf("half-open clients closed between %v and %v after the first wrote; want about %v (the timeout)", first, last, timeout)
	}
	if ok, last := testwait.Poll(10*time.Second, connectedClients(a.addr, nil, 2)); !ok { // the probe and this INFO
		t.Errorf("connected_clients did not return to the probe alone (%s)", last)
	}
	a.end(a.base+n*64*kib+32*mib, "base + 1000 x 64 KiB + 32 MiB", false,
		fmt.Sprintf("%d half-open clients all closed %v to %v after writing (timeout %v)", n,
			closedAfter[0].Round(time.Millisecond), closedAfter[n-1].Round(time.Millisecond), timeout))
}

// Case 4b: half-open connections without a timeout: 1000 clients send a
// partial command and then nothing, and stay. They cost bounded memory:
// the RSS growth once the server has read all of them (CLIENT LIST shows
// 1000 clients with qbuf=33), divided by 1000, is the figure per idle
// connection (a goroutine, its 16 KiB read buffer and the Conn). Bound:
// 64 KiB per connection; peak RSS at most base + 1000 x 64 KiB + 32 MiB.
func caseHalfOpenIdle(t *testing.T) {
	const n = 1000
	a := begin(t, "4b. 1000 idle half-open clients, no timeout", false)
	mon := resptest.MustDial(t, a.addr)
	before := a.p.rss()
	conns := openPartial(t, a.addr, n)
	want := fmt.Sprintf("qbuf=%d ", len(partial))
	testwait.For(t, 20*time.Second, fmt.Sprintf("the server to read the %d partial commands", n), func() (bool, string) {
		v, err := mon.Do("CLIENT", "LIST")
		if err != nil {
			return false, err.Error()
		}
		c := strings.Count(v.Str, want)
		return c == n, fmt.Sprintf("CLIENT LIST shows %d clients with %s", c, want)
	})
	after := a.p.rss()
	perConn := (after - before) / n
	if perConn > 64*kib {
		t.Errorf("RSS per idle connection %d KiB, over the 64 KiB bound", perConn/kib)
	}
	for _, c := range conns {
		c.Close()
	}
	if ok, last := testwait.Poll(10*time.Second, connectedClients("", mon, 2)); !ok {
		t.Errorf("connected_clients did not return to 2 after the idle clients left (%s)", last)
	}
	mon.Close()
	a.end(a.base+n*64*kib+32*mib, "base + 1000 x 64 KiB + 32 MiB", false,
		fmt.Sprintf("RSS per idle connection %.1f KiB (%s for %d)", float64(after-before)/n/kib, mb(after-before), n))
}

// Case 5: clients that stop reading. With --client-output-timeout 500ms,
// 16 clients (4 KiB receive buffers) pipeline ECHO of 1 KiB (up to 200,000
// each, 200 MB of replies) and never read. The server stops reading them
// once their socket is full and must disconnect each (its write fails
// with a reset, not the client's own 30 s deadline) shortly after the
// timeout.
//
// RSS bound: base + 64 MiB (per client the server holds at most a 64 KiB
// reply chunk and its read buffer).
func caseNonReading(t *testing.T) {
	const clients = 16
	a := begin(t, "5. clients that stop reading", false, "--client-output-timeout", "500ms")
	cmd := resptest.AppendCommand(nil, "ECHO", strings.Repeat("x", 1024))
	batch := []byte(strings.Repeat(string(cmd), 64))
	start := time.Now()
	took := make([]time.Duration, clients)
	errs, cnt := runParallel(clients, clients, func(i int) error {
		c, err := net.DialTimeout("tcp", a.addr, 10*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		tc := c.(*net.TCPConn)
		tc.SetReadBuffer(4096)
		c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		t0 := time.Now()
		for k := 0; k < 200000/64; k++ {
			if _, err := c.Write(batch); err != nil {
				took[i] = time.Since(t0)
				if isTimeout(err) {
					return fmt.Errorf("own write deadline fired after %v: the server never disconnected", took[i])
				}
				if !isReset(err) {
					return fmt.Errorf("write: %v", err)
				}
				return nil
			}
		}
		return fmt.Errorf("wrote 200,000 ECHO commands without being disconnected")
	})
	reportErrs(t, "non-reading clients", errs, cnt)
	slices.Sort(took)
	if ok, last := testwait.Poll(10*time.Second, connectedClients(a.addr, nil, 2)); !ok { // the probe and this INFO
		t.Errorf("connected_clients did not return to 2 after the non-reading clients were dropped (%s)", last)
	}
	a.end(a.base+64*mib, "base + 64 MiB", false, fmt.Sprintf("%d non-reading clients disconnected %v to %v after they started (all within %v)",
		clients, took[0].Round(time.Millisecond), took[clients-1].Round(time.Millisecond), time.Since(start).Round(time.Millisecond)))
}

// raiseNoFile makes sure this process may open n files, raising
// RLIMIT_NOFILE if needed; it skips the test if that is not allowed.
func raiseNoFile(t *testing.T, n uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("getrlimit: %v", err)
	}
	if lim.Cur >= n {
		return
	}
	want := lim
	want.Cur = n
	if want.Max < n {
		want.Max = n
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		t.Skipf("RLIMIT_NOFILE is %d (max %d) and cannot be raised to %d: %v", lim.Cur, lim.Max, n, err)
	}
}

// ping writes PING on c and requires +PONG.
func ping(c net.Conn, buf []byte) error {
	c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	n, err := readFull(c, buf[:7])
	if err != nil {
		return fmt.Errorf("after %q: %v", buf[:n], err)
	}
	if string(buf[:7]) != "+PONG\r\n" {
		return fmt.Errorf("got %q, want +PONG", buf[:7])
	}
	return nil
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Case 6a: 5,000 concurrent connections. They connect
// (32 dialers), each PINGs, all stay open, then all PING again at once;
// every PING gets PONG and INFO counts them all.
//
// RSS bound: base + 5,000 x 64 KiB + 32 MiB.
func caseConnections(t *testing.T) {
	const n = 5000
	raiseNoFile(t, uint64(n)+1024)
	a := begin(t, fmt.Sprintf("6a. %d concurrent connections", n), false)
	conns := make([]net.Conn, n)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	start := time.Now()
	errs, cnt := runParallel(n, 32, func(i int) error {
		c, err := net.DialTimeout("tcp", a.addr, 20*time.Second)
		if err != nil {
			return err
		}
		conns[i] = c
		return ping(c, make([]byte, 64))
	})
	reportErrs(t, "connect and PING", errs, cnt)
	connected := time.Since(start)
	if cnt > 0 {
		t.FailNow()
	}
	m, err := info(a.addr, "clients")
	if err != nil {
		t.Fatal(err)
	}
	if got := infoInt(m, "connected_clients"); got != int64(n)+2 {
		t.Errorf("connected_clients %d, want %d (the clients, the probe, INFO's)", got, n+2)
	}
	errs, cnt = runParallel(n, 256, func(i int) error { return ping(conns[i], make([]byte, 64)) })
	reportErrs(t, "second PING with all connected", errs, cnt)
	held := a.p.rss()
	for _, c := range conns {
		c.Close()
	}
	a.end(a.base+n*64*kib+32*mib, fmt.Sprintf("base + %d x 64 KiB + 32 MiB", n), false,
		fmt.Sprintf("%d connections all got PONG twice (connected in %v); RSS with all open %s (%.1f KiB each)",
			n, connected.Round(time.Millisecond), mb(held), float64(held-a.base)/float64(n)/kib))
}

// Case 6b: --maxclients 100 and 200 connections. With the probe and a
// monitoring connection open (2 clients), 200 clients connect one after the
// other and PING: the first 98 get PONG, the other 102 get exactly
// "-ERR max number of clients reached" and are closed. Once they leave, a
// new client is served again.
//
// RSS bound: base + 32 MiB.
func caseMaxClients(t *testing.T) {
	const maxClients, n = 100, 200
	a := begin(t, "6b. --maxclients 100, 200 connections", false, "--maxclients", "100")
	mon := resptest.MustDial(t, a.addr)
	if ok, last := testwait.Poll(10*time.Second, connectedClients("", mon, 2)); !ok {
		t.Fatalf("connected_clients is not 2 (the probe, the monitor) before the attack (%s)", last)
	}
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	accepted, refused := 0, 0
	buf := make([]byte, 128)
	const refusal = "-ERR max number of clients reached\r\n"
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", a.addr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		conns = append(conns, c)
		if i < maxClients-2 {
			if err := ping(c, buf); err != nil {
				t.Fatalf("client %d of %d allowed: %v", i+1, maxClients-2, err)
			}
			accepted++
			continue
		}
		got, err := readAll(c, 10*time.Second)
		if err != nil && !isReset(err) {
			t.Fatalf("client %d over maxclients: after %q: %v", i+1, got, err)
		}
		if string(got) != refusal {
			t.Fatalf("client %d over maxclients: got %q, want %q then close", i+1, got, refusal)
		}
		refused++
	}
	m, err := infoOn(mon, "stats")
	if err != nil {
		t.Fatal(err)
	}
	if got := infoInt(m, "rejected_connections"); got != int64(refused) {
		t.Errorf("rejected_connections %d, want %d", got, refused)
	}
	for _, c := range conns {
		c.Close()
	}
	if ok, last := testwait.Poll(10*time.Second, connectedClients("", mon, 2)); !ok {
		t.Errorf("connected_clients did not return to 2 (%s)", last)
	}
	if err := ping(resptest.MustDial(t, a.addr).C, buf); err != nil {
		t.Errorf("a new client after the flood: %v", err)
	}
	mon.Close()
	a.end(a.base+32*mib, "base + 32 MiB", false, fmt.Sprintf("%d served, %d refused with the exact error (rejected_connections %d)", accepted, refused, refused))
}

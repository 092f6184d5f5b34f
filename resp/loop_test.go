package resp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/redcon"
)

// A client that pipelines more replies than the socket buffers hold
// before reading any receives all of them, in order: the server pauses on
// the full socket (an event loop waits for EPOLLOUT, mid-batch) and goes
// on as the client reads.
func TestServerBackpressure(t *testing.T) {
	h := newTestHandler()
	_, addr := startServer(t, Config{}, h)
	c := dial(t, addr)
	// A small receive window (no autotuning) keeps the server's socket
	// full: 18 MB of replies against a few MB of buffers.
	if err := c.(*net.TCPConn).SetReadBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	const n, size = 300, 60000
	req := strings.Repeat(fmt.Sprintf("BIG %d\r\nPING\r\n", size), n)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	reply := fmt.Sprintf("$%d\r\n%s\r\n+PONG\r\n", size, strings.Repeat("b", size))
	got := make([]byte, len(reply))
	for i := range n {
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
		if string(got) != reply {
			t.Fatalf("reply %d differs", i)
		}
	}
	roundTrip(t, c, "PING\r\n", "+PONG\r\n")
	if r := h.ran.Load(); r != 2*n+1 {
		t.Errorf("%d commands ran, want %d", r, 2*n+1)
	}
}

// Clients served by one loop are served concurrently: many clients, each
// with its own pipeline, all get their own replies.
func TestServerManyClientsOneLoop(t *testing.T) {
	_, addr := startServer(t, Config{EventLoops: 1}, newTestHandler())
	const clients, rounds = 40, 50
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for i := range clients {
		c := dial(t, addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				arg := fmt.Sprintf("c%d-r%d", i, r)
				req := fmt.Sprintf("ECHO %s\r\nECHO %s\r\n", arg, arg)
				want := fmt.Sprintf("$%d\r\n%s\r\n", len(arg), arg)
				want += want
				if _, err := io.WriteString(c, req); err != nil {
					errs <- err
					return
				}
				got := make([]byte, len(want))
				if _, err := io.ReadFull(c, got); err != nil {
					errs <- err
					return
				}
				if string(got) != want {
					errs <- fmt.Errorf("client %d round %d: got %q, want %q", i, r, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// Batch is the same for commands that arrived in one read and changes
// with the next read: the commands of one pipelined write share it, a
// command sent after their replies does not.
func TestServerBatch(t *testing.T) {
	_, addr := startServer(t, Config{}, newTestHandler())
	c := dial(t, addr)
	if _, err := io.WriteString(c, "BATCH\r\nBATCH\r\nBATCH\r\n"); err != nil {
		t.Fatal(err)
	}
	var got [4]int
	rd := bufio.NewReader(c)
	for i := range 3 {
		if _, err := fmt.Fscanf(rd, ":%d\r\n", &got[i]); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
	if _, err := io.WriteString(c, "BATCH\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fscanf(rd, ":%d\r\n", &got[3]); err != nil {
		t.Fatal(err)
	}
	if got[0] != got[1] || got[1] != got[2] || got[3] == got[2] || got[0] == 0 {
		t.Errorf("batches %v: want the first three equal and non-zero, the fourth different", got)
	}
}

// EventLoops resolves the configured count: GOMAXPROCS for 0, none for -1
// and off Linux.
func TestServerEventLoopsCount(t *testing.T) {
	for _, tc := range []struct{ cfg, want int }{{-1, 0}, {0, runtime.GOMAXPROCS(0)}, {3, 3}} {
		want := tc.want
		if runtime.GOOS != "linux" {
			want = 0
		}
		if got := NewServer(Config{EventLoops: tc.cfg}, newTestHandler()).EventLoops(); got != want {
			t.Errorf("EventLoops %d: %d loops, want %d", tc.cfg, got, want)
		}
	}
}

// loopHandler answers every command with the index of the event loop
// serving it (Conn.Loop).
type loopHandler struct{ *testHandler }

func (h *loopHandler) ServeRESP(c *Conn, args [][]byte) {
	c.Out = redcon.AppendInt(c.Out, int64(c.Loop()))
}

// Conn.Loop names the event loop that serves the connection (they take
// connections in turn, by ID), and -1 without event loops.
func TestConnLoop(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("event loops need Linux")
	}
	for _, loops := range []int{2, -1} {
		_, addr := startServer(t, Config{EventLoops: loops}, &loopHandler{newTestHandler()})
		seen := map[string]bool{}
		for range 4 {
			c := dial(t, addr)
			if _, err := io.WriteString(c, "LOOP\r\n"); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			seen[strings.TrimSpace(line)] = true
		}
		want := map[string]bool{":0": true, ":1": true}
		if loops < 0 {
			want = map[string]bool{":-1": true}
		}
		if fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Errorf("EventLoops %d: replies %v, want %v", loops, seen, want)
		}
	}
}

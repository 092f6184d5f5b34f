//go:build linux

package resp

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// slowHandler's SLOW n advances the loop's clock by an hour, as a command
// running that long would, then replies n bytes.
type slowHandler struct {
	*testHandler
	clock *atomic.Int64
}

func (h slowHandler) ServeRESP(c *Conn, args [][]byte) {
	if strings.EqualFold(string(args[0]), "SLOW") {
		h.clock.Add(int64(time.Hour))
		n, _ := strconv.Atoi(string(args[1]))
		c.Out = redcon.AppendBulk(c.Out, bytes.Repeat([]byte("s"), n))
		return
	}
	h.testHandler.ServeRESP(c, args)
}

// After a long command, an event loop writing its large reply to a client
// that reads counts the time without progress from when the wait for the
// client began, not from the start of the round: the client is not
// dropped as a slow one.
func TestLoopLongCommandReplyNotDroppedAsSlow(t *testing.T) {
	var clock atomic.Int64
	start := time.Now().UnixNano()
	clock.Store(start)
	crons := make(chan int64, 1000)
	s := NewServer(Config{EventLoops: 1, OutputTimeout: time.Second, Logger: discardLogger()},
		slowHandler{newTestHandler(), &clock})
	s.now = clock.Load
	s.cronHook = func(now int64) {
		select {
		case crons <- now:
		default:
		}
	}
	if s.EventLoops() != 1 {
		t.Skip("no event loops")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	})
	c := dial(t, ln.Addr().String())
	// A small receive window keeps the server's socket full: the reply
	// is far larger than the socket buffers.
	if err := c.(*net.TCPConn).SetReadBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	const size = 16 << 20
	if _, err := fmt.Fprintf(c, "SLOW %d\r\n", size); err != nil {
		t.Fatal(err)
	}
	// Let a check of the timeouts run an hour after the command began,
	// with the reply still waiting for the client.
	timeout := time.After(testTimeout)
	for ok := false; !ok; {
		select {
		case now := <-crons:
			ok = now >= start+int64(time.Hour)
		case <-timeout:
			t.Fatal("no check of the timeouts after the command")
		}
	}
	want := fmt.Sprintf("$%d\r\n%s\r\n", size, strings.Repeat("s", size))
	got := make([]byte, len(want))
	if n, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("reply cut after %d of %d bytes: %v", n, len(want), err)
	}
	if string(got) != want {
		t.Errorf("reply differs")
	}
	roundTrip(t, c, "PING\r\n", "+PONG\r\n")
}

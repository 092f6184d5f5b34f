package resp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// pushHandler is testHandler with PUSHTO id text: it pushes the frame
// ">1\r\n+text\r\n" to connection id from the caller's goroutine.
type pushHandler struct {
	*testHandler
	srv atomic.Pointer[Server]
}

func (h *pushHandler) ServeRESP(c *Conn, args [][]byte) {
	if string(args[0]) != "PUSHTO" {
		h.testHandler.ServeRESP(c, args)
		return
	}
	id, _ := strconv.ParseInt(string(args[1]), 10, 64)
	h.srv.Load().Range(func(o *Conn) bool {
		if o.ID() == id {
			o.Push([]byte(">1\r\n+" + string(args[2]) + "\r\n"))
		}
		return true
	})
	c.Out = append(c.Out, "+OK\r\n"...)
}

// TestPushReachesIdleConn: a frame pushed by another connection reaches a
// client that sends nothing, in both serving modes; a push to a client
// pushing to itself follows the reply of its command.
func TestPushReachesIdleConn(t *testing.T) {
	for _, loops := range []int{-1, 1, 2} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) {
			h := &pushHandler{testHandler: newTestHandler()}
			srv, addr := startServer(t, Config{EventLoops: loops}, h)
			h.srv.Store(srv)
			a, b := dial(t, addr), dial(t, addr)
			roundTrip(t, a, "CTX\r\n", ":1\r\n")
			roundTrip(t, b, "CTX\r\n", ":2\r\n")
			const n = 200
			for i := range n {
				roundTrip(t, b, "PUSHTO 1 m"+strconv.Itoa(i)+"\r\n", "+OK\r\n")
				want := ">1\r\n+m" + strconv.Itoa(i) + "\r\n"
				got := make([]byte, len(want))
				if _, err := io.ReadFull(a, got); err != nil || string(got) != want {
					t.Fatalf("push %d: %q, %v; want %q", i, got, err, want)
				}
			}
			roundTrip(t, a, "PUSHTO 1 self\r\nPING\r\n", "+OK\r\n>1\r\n+self\r\n+PONG\r\n")
			t.Logf("%d pushes to an idle client", n)
		})
	}
}

// TestPushConcurrent: pushes from many goroutines while the target runs
// commands never split a reply (run under -race).
func TestPushConcurrent(t *testing.T) {
	for _, loops := range []int{-1, 2} {
		t.Run(fmt.Sprintf("loops=%d", loops), func(t *testing.T) {
			h := &pushHandler{testHandler: newTestHandler()}
			srv, addr := startServer(t, Config{EventLoops: loops}, h)
			h.srv.Store(srv)
			a := dial(t, addr)
			roundTrip(t, a, "CTX\r\n", ":1\r\n")
			const pushers, each = 4, 50
			done := make(chan struct{})
			for p := range pushers {
				go func() {
					defer func() { done <- struct{}{} }()
					b, err := dialErr(addr)
					if err != nil {
						t.Error(err)
						return
					}
					defer b.Close()
					for i := range each {
						if _, err := io.WriteString(b, "PUSHTO 1 p"+strconv.Itoa(p)+"\r\n"); err != nil {
							t.Error(err)
							return
						}
						buf := make([]byte, 5)
						if _, err := io.ReadFull(b, buf); err != nil {
							t.Error(err, i)
							return
						}
					}
				}()
			}
			// Meanwhile a runs PING; count what arrives, frame by frame.
			pushes, pongs := 0, 0
			rd := newLineReader(a)
			go func() {
				for range 100 {
					io.WriteString(a, "PING\r\n")
				}
			}()
			for pushes < pushers*each || pongs < 100 {
				line := rd.line(t)
				switch {
				case line == "+PONG":
					pongs++
				case line == ">1":
					l2 := rd.line(t)
					if len(l2) < 3 || l2[:2] != "+p" {
						t.Fatalf("push frame split: %q", l2)
					}
					pushes++
				default:
					t.Fatalf("unexpected line %q", line)
				}
			}
			for range pushers {
				<-done
			}
			t.Logf("%d pushes, %d replies, none split", pushes, pongs)
		})
	}
}

func dialErr(addr string) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, testTimeout)
	if err == nil {
		c.SetDeadline(time.Now().Add(testTimeout))
	}
	return c, err
}

type lineReader struct{ r *bufio.Reader }

func newLineReader(c net.Conn) *lineReader { return &lineReader{bufio.NewReader(c)} }

func (l *lineReader) line(t *testing.T) string {
	t.Helper()
	s, err := l.r.ReadString('\n')
	if err != nil {
		t.Fatalf("read: %v (%q)", err, s)
	}
	return strings.TrimSuffix(s, "\r\n")
}

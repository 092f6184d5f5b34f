//go:build linux

package resp

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// holdHandler is testHandler plus a Deferrer: "W" is a write whose reply
// must wait until release(n) makes changes 1..n durable.
type holdHandler struct {
	*testHandler
	mu      sync.Mutex
	cond    *sync.Cond
	seq     uint64           // writes so far
	durable uint64           // released so far
	pending map[int64]uint64 // connection id -> its latest write
	notify  func()
}

func newHoldHandler() *holdHandler {
	h := &holdHandler{testHandler: newTestHandler(), pending: map[int64]uint64{}}
	h.cond = sync.NewCond(&h.mu)
	return h
}

func (h *holdHandler) ServeRESP(c *Conn, args [][]byte) {
	if string(args[0]) != "W" {
		h.testHandler.ServeRESP(c, args)
		return
	}
	h.mu.Lock()
	h.seq++
	h.pending[c.ID()] = h.seq
	h.mu.Unlock()
	c.Out = redcon.AppendOK(c.Out)
}

func (h *holdHandler) BeforeWrite(c *Conn) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for h.pending[c.ID()] > h.durable {
		h.cond.Wait()
	}
	return nil
}

func (h *holdHandler) Ready(c *Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pending[c.ID()] <= h.durable
}

func (h *holdHandler) SetNotify(fn func()) { h.notify = fn }

func (h *holdHandler) release(n uint64) {
	h.mu.Lock()
	h.durable = n
	h.mu.Unlock()
	h.cond.Broadcast()
	h.notify()
}

// expectNothing checks that c has nothing to read for a while (a reply
// that arrives would be one sent before it was allowed to).
func expectNothing(t *testing.T, c net.Conn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	var b [64]byte
	n, err := c.Read(b[:])
	if n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("%s: read %q, %v; want nothing yet", what, b[:n], err)
	}
	c.SetReadDeadline(time.Time{})
}

// TestHoldReplies: with HoldReplies, a reply that must wait for a sync is
// held while the loop serves its other clients, and written once the
// Deferrer says it may leave, in order with what the client sent after.
func TestHoldReplies(t *testing.T) {
	h := newHoldHandler()
	_, addr := startServer(t, Config{EventLoops: 1, HoldReplies: true}, h)
	a, b := dial(t, addr), dial(t, addr)
	write(t, a, "W\r\n")
	// b is served by the same loop while a's reply waits: a loop waiting
	// in BeforeWrite would not answer it until the release.
	roundTrip(t, b, "PING\r\n", "+PONG\r\n")
	expectNothing(t, a, "a's write before its release")
	write(t, b, "W\r\n")
	write(t, a, "PING\r\n") // not read while a's reply is held
	h.release(1)
	expectRead(t, a, "+OK\r\n+PONG\r\n")
	expectNothing(t, b, "b's write (change 2) after change 1's release")
	h.release(2)
	expectRead(t, b, "+OK\r\n")
	roundTrip(t, a, "PING\r\n", "+PONG\r\n")
}

// TestHoldRepliesMidBatch: a pipeline whose replies pass maxPendingOut
// before its end has them written in parts; a part that must wait is held
// like a batch's end, so the loop serves its other clients meanwhile, and
// the rest of the pipeline runs once the part is written.
func TestHoldRepliesMidBatch(t *testing.T) {
	h := newHoldHandler()
	_, addr := startServer(t, Config{EventLoops: 1, HoldReplies: true}, h)
	a, b := dial(t, addr), dial(t, addr)
	big := strings.Repeat("x", maxPendingOut/2+1)
	roundTrip(t, a, "SET big "+big+"\r\n", "+OK\r\n")
	// A write, then two replies that pass maxPendingOut, in one read: the
	// batch is written in parts, the first holding the write's reply.
	bulk := "$" + strconv.Itoa(len(big)) + "\r\n" + big + "\r\n"
	write(t, a, "W\r\nGET big\r\nGET big\r\nW\r\nPING\r\n")
	// b is served while a's first part waits: a loop waiting for it in
	// BeforeWrite would answer b only after the release.
	roundTrip(t, b, "PING\r\n", "+PONG\r\n")
	expectNothing(t, a, "a's replies before their release")
	h.release(1)
	expectRead(t, a, "+OK\r\n"+bulk+bulk)
	expectNothing(t, a, "a's second write before its release")
	roundTrip(t, b, "PING\r\n", "+PONG\r\n")
	h.release(2)
	expectRead(t, a, "+OK\r\n+PONG\r\n")
	roundTrip(t, a, "PING\r\n", "+PONG\r\n")
}

package commands_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// XREAD BLOCK over raw connections: the exact bytes of the reply a blocked
// client receives when a key it waits on changes, of its timeout (on the
// injected clock) in RESP2 and RESP3, and what happens when it leaves.

func blockServer(t *testing.T) (*servertest.Clock, func() *resptest.Conn) {
	t.Helper()
	clock := servertest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	_, addr := servertest.Start(t, server.Config{Clock: clock.Now})
	return clock, func() *resptest.Conn {
		c := resptest.MustDial(t, addr)
		t.Cleanup(func() { c.Close() })
		return c
	}
}

// blockedClients reads INFO clients' blocked_clients.
func blockedClients(t *testing.T, c *resptest.Conn) string {
	t.Helper()
	v := c.MustDo(t, "INFO", "clients")
	for _, line := range strings.Split(v.Str, "\r\n") {
		if n, ok := strings.CutPrefix(line, "blocked_clients:"); ok {
			return n
		}
	}
	return "?"
}

func waitBlocked(t *testing.T, c *resptest.Conn, n string) {
	t.Helper()
	eventually(t, "blocked_clients:"+n, func() bool { return blockedClients(t, c) == n })
}

// readRaw reads one reply from c and returns its bytes.
func readRaw(t *testing.T, c *resptest.Conn) string {
	t.Helper()
	v, err := c.Read()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(v.Encode(nil))
}

func TestXreadBlockServedByXadd(t *testing.T) {
	_, dial := blockServer(t)
	r, w := dial(), dial()
	w.MustDo(t, "XADD", "s", "1-0", "a", "1")
	if err := r.Send("XREAD", "BLOCK", "0", "STREAMS", "other", "s", "0", "$"); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, w, "1")
	// A change that does not give s a greater ID, and a write to the
	// other key that leaves it without a stream, do not answer.
	w.MustDo(t, "XADD", "x", "1-0", "a", "1")
	w.MustDo(t, "SET", "other", "str")
	w.MustDo(t, "XDEL", "s", "1-0")
	w.MustDo(t, "XADD", "s", "2-0", "f", "v", "g", "w")
	want := "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n2-0\r\n*4\r\n$1\r\nf\r\n$1\r\nv\r\n$1\r\ng\r\n$1\r\nw\r\n"
	if got := readRaw(t, r); got != want {
		t.Fatalf("XREAD BLOCK answered %q, want %q", got, want)
	}
	waitBlocked(t, w, "0")
	// The connection serves commands again.
	if v := r.MustDo(t, "XLEN", "s"); v.Str != "1" {
		t.Fatalf("XLEN after the block: %v", v)
	}
}

func TestXreadBlockTransactionAndDelete(t *testing.T) {
	_, dial := blockServer(t)
	r, w := dial(), dial()
	if err := r.Send("XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "s", "0"); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, w, "1")
	// A transaction that adds then deletes: served after EXEC, as Redis,
	// the key holds nothing, so the client stays blocked.
	w.MustDo(t, "MULTI")
	w.MustDo(t, "XADD", "s", "5-0", "a", "1")
	w.MustDo(t, "DEL", "s")
	w.MustDo(t, "EXEC")
	w.MustDo(t, "SET", "s", "not a stream")
	w.MustDo(t, "FLUSHALL")
	if n := blockedClients(t, w); n != "1" {
		t.Fatalf("blocked_clients %s after a change that gives nothing to read", n)
	}
	w.MustDo(t, "XADD", "s", "6-0", "a", "1")
	w.MustDo(t, "XADD", "s", "7-0", "a", "2")
	want := "*1\r\n*2\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n6-0\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"
	if got := readRaw(t, r); got != want {
		t.Fatalf("XREAD BLOCK answered %q, want %q", got, want)
	}
}

func TestXreadBlockTimeout(t *testing.T) {
	clock, dial := blockServer(t)
	r2, r3, w := dial(), dial(), dial()
	r3.MustDo(t, "HELLO", "3")
	for _, r := range []*resptest.Conn{r2, r3} {
		if err := r.Send("XREAD", "BLOCK", "1500", "STREAMS", "s", "$"); err != nil {
			t.Fatal(err)
		}
	}
	waitBlocked(t, w, "2")
	clock.Advance(1499 * time.Millisecond)
	w.MustDo(t, "PING") // a command runs meanwhile: no timeout yet
	if n := blockedClients(t, w); n != "2" {
		t.Fatalf("blocked_clients %s before the timeout", n)
	}
	clock.Advance(time.Millisecond)
	if got := readRaw(t, r2); got != "*-1\r\n" {
		t.Fatalf("RESP2 timeout %q", got)
	}
	if got := readRaw(t, r3); got != "_\r\n" {
		t.Fatalf("RESP3 timeout %q", got)
	}
	waitBlocked(t, w, "0")
}

func TestXreadBlockRESP3AndLeaving(t *testing.T) {
	_, dial := blockServer(t)
	r, gone, w := dial(), dial(), dial()
	r.MustDo(t, "HELLO", "3")
	for _, c := range []*resptest.Conn{gone, r} {
		if err := c.Send("XREAD", "BLOCK", "0", "STREAMS", "s", "$"); err != nil {
			t.Fatal(err)
		}
	}
	waitBlocked(t, w, "2")
	gone.Close()
	waitBlocked(t, w, "1") // the client that left is forgotten
	w.MustDo(t, "XADD", "s", "3-0", "a", "1")
	want := "%1\r\n$1\r\ns\r\n*1\r\n*2\r\n$3\r\n3-0\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"
	if got := readRaw(t, r); got != want {
		t.Fatalf("RESP3 XREAD BLOCK answered %q, want %q", got, want)
	}
}

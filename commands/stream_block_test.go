package commands_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
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

// readRaw reads one reply from c and returns its bytes, failing after a
// generous deadline rather than hanging.
func readRaw(t *testing.T, c *resptest.Conn) string {
	t.Helper()
	c.C.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer c.C.SetReadDeadline(time.Time{})
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

// A primary that becomes a replica unblocks its blocked readers with
// Redis's UNBLOCKED error; a read blocked on the replica keeps waiting.
func TestXreadBlockUnblockedByReplicaof(t *testing.T) {
	_, dial := blockServer(t)
	r, onReplica, w := dial(), dial(), dial()
	if err := r.Send("XREAD", "BLOCK", "0", "STREAMS", "s", "$"); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, w, "1")
	w.MustDo(t, "REPLICAOF", "127.0.0.1", "1") // a primary that is not there
	want := "-UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)\r\n"
	if got := readRaw(t, r); got != want {
		t.Fatalf("blocked XREAD answered %q, want %q", got, want)
	}
	if err := onReplica.Send("XREAD", "BLOCK", "0", "STREAMS", "s", "$"); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, w, "1")
	w.MustDo(t, "REPLICAOF", "NO", "ONE")
	w.MustDo(t, "XADD", "s", "1-0", "a", "1")
	if got := readRaw(t, onReplica); !strings.Contains(got, "1-0") {
		t.Fatalf("XREAD blocked on the replica answered %q", got)
	}
}

// TestXreadBlockNotWokenByOtherStreamChanges: as in Redis, a blocked
// reader is woken by XADD (and XGROUP DESTROY, a new or deleted key), not
// by XSETID, XGROUP SETID or the other in-place changes: XREAD BLOCK ... $
// after XSETID past the last entry keeps waiting (it is not answered an
// empty stream), and XREADGROUP BLOCK after XGROUP SETID 0 delivers
// nothing until an XADD.
func TestXreadBlockNotWokenByOtherStreamChanges(t *testing.T) {
	_, dial := blockServer(t)
	r, w := dial(), dial()
	w.MustDo(t, "XADD", "bs", "1-1", "a", "b")
	xsetidDoesNotWake(t, r, w, "")
	waitBlocked(t, w, "0")

	w.MustDo(t, "XADD", "bg", "1-1", "a", "b")
	w.MustDo(t, "XGROUP", "CREATE", "bg", "g", "$")
	if err := r.Send("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "bg", ">"); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, w, "1")
	w.MustDo(t, "XGROUP", "SETID", "bg", "g", "0")
	w.MustDo(t, "XACK", "bg", "g", "1-1")
	if v := w.MustDo(t, "XPENDING", "bg", "g"); !strings.HasPrefix(string(v.Encode(nil)), "*4\r\n:0\r\n") {
		t.Fatalf("XPENDING after XGROUP SETID with a reader blocked: %q, want nothing pending", v.Encode(nil))
	}
	w.MustDo(t, "XADD", "bg", "2-1", "e", "f")
	// Woken by the XADD, the reader gets what its group has not seen
	// since SETID 0: both entries.
	got := readRaw(t, r)
	if !strings.Contains(got, "1-1") || !strings.Contains(got, "2-1") {
		t.Fatalf("XREADGROUP BLOCK woken by XADD answered %q, want entries 1-1 and 2-1", got)
	}
}

// TestXreadBlockAfterRestartNotWokenByXSetID: with persistence, the first
// change a restarted server journals of a stream it loaded is written
// whole; that does not make the change wake blocked readers as a new
// stream would: XSETID after a restart leaves XREAD BLOCK ... $ waiting.
func TestXreadBlockAfterRestartNotWokenByXSetID(t *testing.T) {
	dir := t.TempDir()
	cfg := server.Config{DataDir: dir, OpenStore: changelog.Opener(pebblestore.OpenStore, changelog.Options{})}
	srv, addr := servertest.Start(t, cfg)
	c := resptest.MustDial(t, addr)
	c.MustDo(t, "XADD", "bs", "1-1", "a", "b")
	c.Close()
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, addr = servertest.Start(t, cfg)
	r, w := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	defer r.Close()
	defer w.Close()
	xsetidDoesNotWake(t, r, w, " after a restart")
}

// xsetidDoesNotWake blocks r in XREAD BLOCK 0 on stream bs (holding
// entries before 100-0) from $, then has w run XSETID bs 100-0 and XADD
// bs 200-0: r must be answered the XADD's entry alone, not woken by the
// XSETID with an empty stream.
func xsetidDoesNotWake(t *testing.T, r, w *resptest.Conn, when string) {
	t.Helper()
	if err := r.Send("XREAD", "BLOCK", "0", "STREAMS", "bs", "$"); err != nil {
		t.Fatal(err)
	}
	waitBlocked(t, w, "1")
	w.MustDo(t, "XSETID", "bs", "100-0")
	w.MustDo(t, "XADD", "bs", "200-0", "c", "d")
	want := "*1\r\n*2\r\n$2\r\nbs\r\n*1\r\n*2\r\n$5\r\n200-0\r\n*2\r\n$1\r\nc\r\n$1\r\nd\r\n"
	if got := readRaw(t, r); got != want {
		t.Fatalf("XREAD BLOCK%s, XSETID then XADD answered %q, want only the XADD's entry %q", when, got, want)
	}
}

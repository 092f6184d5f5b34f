package streams

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/tests/internal/harness"
)

// Sizes of the restart scenario: entries added, and how many of them the
// consumers take before the kill.
const (
	restartEntries = 300
	restartRead    = 200
	restartBatch   = 20
)

// durableNode is one server process whose acknowledged writes are on
// disk (redis-server: appendonly with appendfsync always; cellserver: a
// data directory with --fsync always), restartable on the same port and
// directory.
type durableNode struct {
	t    *testing.T
	srv  server
	name string
	addr string
	argv []string
	p    *harness.Proc
}

func newDurableNode(t *testing.T, srv server) *durableNode {
	port := harness.FreePorts(t, 1)[0]
	dir := t.TempDir()
	n := &durableNode{t: t, srv: srv, name: srv.name, addr: harness.Addr(port)}
	if srv.redis {
		n.argv = []string{"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "yes", "--appendfsync", "always"}
	} else {
		n.argv = []string{"--addr", n.addr, "--data-dir", dir, "--fsync", "always"}
	}
	n.start()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- log of %s (%s):\n%s", n.name, n.addr, n.p.Logs)
		}
	})
	return n
}

func (n *durableNode) start() {
	if n.srv.redis {
		n.p = harness.Start(n.t, n.name, nil, n.argv...)
	} else {
		n.p = harness.StartCellserver(n.t, n.name, n.argv...)
	}
	harness.WaitPing(n.t, n.p, n.addr, 30*time.Second)
}

// kill9 kills the process with SIGKILL and starts it again on the same
// port and data.
func (n *durableNode) kill9() {
	n.p.Kill()
	n.start()
}

// TestRestart: consumer groups survive a kill -9 and restart, through
// each client. See runRestart.
func TestRestart(t *testing.T) {
	eachServer(t, func(t *testing.T, srv server) {
		eachClient(t, func(t *testing.T, ck clientKind) { runRestart(t, srv, ck) })
	})
}

// runRestart, on a fresh durable server, through client ck:
//
//  1. the client adds 300 entries to a stream with a group; consumers c1,
//     c2 and c3 take 200 of them by ">" (batches of 20, in turn) and
//     acknowledge two of every three, one XACK each (each must answer 1);
//     c2 reads its history (ID 0), which counts as a delivery; XPENDING
//     is exactly the rest, with owners and delivery counts;
//  2. kill -9 and restart on the same data;
//  3. XPENDING is still exactly that; each consumer's history is exactly
//     its pending entries; ">" continues after the last delivered ID:
//     exactly the 100 entries never delivered (acknowledged at once), and
//     then nothing; XCLAIM of every entry by c5 gets exactly the pending
//     ones, and XAUTOCLAIM by c4 gets them all again, which c4 then
//     acknowledges; XPENDING is empty;
//  4. kill -9 and restart again: XPENDING still empty, ">" still nothing.
//
// Throughout, the ledger checks that no entry acknowledged is delivered
// again, and at the end that every entry was delivered and acknowledged.
func runRestart(t *testing.T, srv server, ck clientKind) {
	n := newDurableNode(t, srv)
	adm := admin(t, n.addr)
	mustDo(t, adm, "XGROUP", "CREATE", streamKey, groupName, "0", "MKSTREAM")
	d := newDriver(t, ck, target{Addr: n.addr})
	l := newLedger(true)
	defer l.report(t)
	call := func(req request) response {
		t.Helper()
		r := d.call(req)
		if r.Err != "" {
			t.Fatalf("%+v: %s", req, r.Err)
		}
		return r
	}
	pending := func(what string) {
		t.Helper()
		l.checkPending(what, call(request{Op: "pending"}).Pending)
	}

	// 1. Add, deliver, acknowledge two of three.
	for i := range restartEntries {
		l.added(i, call(request{Op: "xadd", I: i}), false)
	}
	consumers := []string{"c1", "c2", "c3"}
	taken := 0
	for k := 0; taken < restartRead; k++ {
		c := consumers[k%len(consumers)]
		r := call(request{Op: "read", Consumer: c, ID: ">", Count: restartBatch})
		l.checkEntries(fmt.Sprintf("%s > batch %d", c, k), r.Entries, l.ids[taken:taken+restartBatch])
		l.delivered(c, ">", r.Entries, true)
		for _, e := range r.Entries {
			if taken%3 != 0 {
				l.acked(e.ID, call(request{Op: "ack", ID: e.ID}), false)
			}
			taken++
		}
	}
	r := call(request{Op: "read", Consumer: "c2", ID: "0", Count: 1000})
	l.checkEntries("c2 history before the kill", r.Entries, l.pendingOf("c2"))
	l.delivered("c2", "0", r.Entries, true)
	pending("before the kill")
	t.Logf("before the kill: %d entries, %d delivered, %d acknowledged, %d pending",
		len(l.ids), taken, len(l.ackedAt), len(l.pendingModel()))
	if t.Failed() || len(l.violations) > 0 {
		return
	}

	// 2. kill -9, restart.
	n.kill9()
	reconnect(t, d)
	if *inject == "setid" {
		mustDo(t, adm, "XGROUP", "SETID", streamKey, groupName, "0")
		t.Log("injected: XGROUP SETID to 0 after the restart")
	}

	// 3. After the restart.
	pending("after the restart")
	for _, c := range consumers {
		r := call(request{Op: "read", Consumer: c, ID: "0", Count: 1000})
		l.checkEntries(c+" history after the restart", r.Entries, l.pendingOf(c))
		l.delivered(c, "0", r.Entries, true)
	}
	pending("after the history reads")
	r = call(request{Op: "read", Consumer: "c1", ID: ">", Count: 1000})
	l.checkEntries("c1 > after the restart", r.Entries, l.ids[restartRead:])
	l.delivered("c1", ">", r.Entries, true)
	for _, e := range r.Entries {
		l.acked(e.ID, call(request{Op: "ack", ID: e.ID}), false)
	}
	r = call(request{Op: "read", Consumer: "c2", ID: ">", Count: 1000})
	l.checkEntries("> once every entry was delivered", r.Entries, nil)
	stillPending := l.pendingOf("")
	r = call(request{Op: "claim", Consumer: "c5", IDs: l.ids})
	l.checkEntries("XCLAIM of every entry by c5", r.Entries, stillPending)
	l.delivered("c5", "XCLAIM", r.Entries, true)
	pending("after XCLAIM")
	r = call(request{Op: "autoclaim", Consumer: "c4", Start: "0-0", Count: 1000})
	l.checkEntries("XAUTOCLAIM by c4", r.Entries, stillPending)
	if r.Next != "0-0" {
		l.violate("XAUTOCLAIM's next ID %q, want 0-0 (every pending entry in one call)", r.Next)
	}
	l.delivered("c4", "XAUTOCLAIM", r.Entries, true)
	for _, e := range r.Entries {
		l.acked(e.ID, call(request{Op: "ack", ID: e.ID}), false)
	}
	pending("once c4 acknowledged")
	l.checkDone()

	// 4. Again, with everything acknowledged.
	n.kill9()
	reconnect(t, d)
	pending("after the second restart")
	r = call(request{Op: "read", Consumer: "c1", ID: ">", Count: 1000})
	l.checkEntries("> after the second restart", r.Entries, nil)
	for _, c := range append(consumers, "c4", "c5") {
		r := call(request{Op: "read", Consumer: c, ID: "0", Count: 1000})
		l.checkEntries(c+" history after the second restart", r.Entries, nil)
	}
}

// reconnect waits (30 s at most) until a ping through d succeeds: the
// client found the restarted server (go-redis and ioredis reconnect by
// themselves; redis-py on the command after the one that failed).
func reconnect(t *testing.T, d driver) {
	t.Helper()
	fails := 0
	testwait.For(t, 30*time.Second, d.version()+" reaches the server again", func() (bool, string) {
		r := d.call(request{Op: "ping"})
		if r.Err != "" {
			fails++
		}
		return r.Err == "", r.Err
	})
	if fails > 0 {
		t.Logf("%s: %d pings failed before the client reconnected", d.version(), fails)
	}
}

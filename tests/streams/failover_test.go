package streams

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/tests/internal/harness"
)

// masterName is the name the sentinels monitor the primary under.
const masterName = "mymaster"

// Sizes of the failover scenario: entries added before the failover and
// after it, a read's COUNT, and how many durable acknowledgements the
// consumers make before the primary is killed (about half of the first
// part's).
const (
	failoverBefore = 200
	failoverAfter  = 100
	failoverBatch  = 10
	failoverKillAt = 60
)

// haNode is one data node of the failover scenario, run from its config
// file (Sentinel rewrites it on a promotion).
type haNode struct {
	name, addr, conf string
	p                *harness.Proc
}

// startHA starts a primary and two replicas of srv, each from its own
// config file, waits until the replicas are linked, then starts three
// sentinels (harness.StartSentinels: quorum 2, down-after 1 s) and waits
// until they agree. redis-server runs without persistence, as in tests/ha;
// cellserver with a data directory and --sync-replicas 1 on every node, so
// that every reply to a write is on a replica (docs/high-availability.md).
func startHA(t *testing.T, srv server) ([]*haNode, []*harness.Sentinel) {
	t.Helper()
	root := t.TempDir()
	ports := harness.FreePorts(t, 6)
	var nodes []*haNode
	for i := range 3 {
		dir := filepath.Join(root, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		n := &haNode{name: fmt.Sprintf("%s-%d", srv.name, i), addr: harness.Addr(ports[i]), conf: filepath.Join(dir, "node.conf")}
		var conf string
		if srv.redis {
			conf = fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsave \"\"\nappendonly no\nrepl-diskless-sync-delay 0\n", ports[i], dir)
		} else {
			syncReplicas := 1
			if *inject == "async" {
				syncReplicas = 0
			}
			conf = fmt.Sprintf("addr %s\ndata-dir %s\nsync-replicas %d\n", n.addr, filepath.Join(dir, "data"), syncReplicas)
		}
		if i > 0 {
			conf += fmt.Sprintf("replicaof 127.0.0.1 %d\n", ports[0])
		}
		if err := os.WriteFile(n.conf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		if srv.redis {
			n.p = harness.Start(t, n.name, nil, "redis-server", n.conf)
		} else {
			n.p = harness.StartCellserver(t, n.name, "--addr", n.addr, "--config", n.conf)
		}
		nodes = append(nodes, n)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CELLSERVER_HA_LOGS") != "" {
			for _, n := range nodes {
				t.Logf("--- %s (%s) log:\n%s", n.name, n.addr, n.p.Logs)
			}
		}
	})
	for _, n := range nodes {
		harness.WaitPing(t, n.p, n.addr, 30*time.Second)
	}
	for _, n := range nodes[1:] {
		harness.WaitReplicaOf(t, n.name, n.addr, nodes[0].addr, 30*time.Second)
	}
	ss := harness.StartSentinels(t, root, ports[3:], nil, harness.Monitor{Name: masterName, Addr: nodes[0].addr, Replicas: 2})
	return nodes, ss
}

// TestFailover: consumer groups survive a Sentinel failover, through each
// client's Sentinel support. See runFailover.
func TestFailover(t *testing.T) {
	harness.NeedProcesses(t, "redis-sentinel")
	eachServer(t, func(t *testing.T, srv server) {
		if !srv.redis {
			harness.NeedFlag(t, "--sync-replicas")
		}
		eachClient(t, func(t *testing.T, ck clientKind) { runFailover(t, srv, ck) })
	})
}

// runFailover, on a fresh primary with two replicas under three sentinels,
// through client ck connected by the sentinels (go-redis
// NewFailoverClient, redis-py Sentinel.master_for, ioredis sentinels):
//
//  1. the client adds 200 entries; consumers c1, c2 and c3 take them by
//     ">" (batches of 10, in turn) and acknowledge two of every three,
//     one XACK each. Once 60 acknowledgements are durable the primary is
//     killed with SIGKILL, while the consumers go on: their commands fail
//     until Sentinel promoted a replica and the client found it, then
//     they continue (a failed XACK is sent again) until ">" has nothing;
//  2. the client adds 100 more entries, consumed the same way;
//  3. XPENDING lists no acknowledged entry and every entry durably
//     delivered and never sent to XACK; so does each consumer's history
//     (ID 0) and XCLAIM of every entry by c5; XAUTOCLAIM by "rescuer"
//     takes every pending entry, which it acknowledges; XPENDING is then
//     empty.
//
// Durable: on redis-server, a write followed by WAIT 1 that answered 1 (on
// the same connection); on cellserver, any reply (--sync-replicas 1). The
// ledger (lenient: a command whose connection broke may or may not have
// taken effect) checks every delivery against the acknowledgements, and
// at the end that every entry was delivered and acknowledged.
func runFailover(t *testing.T, srv server, ck clientKind) {
	nodes, ss := startHA(t, srv)
	primary := nodes[0]
	wait := srv.redis && *inject != "async"
	ctx := context.Background()
	adm := admin(t, primary.addr)
	var created *redis.Cmd
	var acks *redis.IntCmd
	if _, err := adm.Pipelined(ctx, func(p redis.Pipeliner) error {
		created = p.Do(ctx, "XGROUP", "CREATE", streamKey, groupName, "0", "MKSTREAM")
		acks = redis.NewIntCmd(ctx, "WAIT", 2, 5000)
		return p.Process(ctx, acks)
	}); err != nil || acks.Val() != 2 {
		t.Fatalf("XGROUP CREATE: %v; WAIT 2: %d %v", created.Err(), acks.Val(), err)
	}
	d := newDriver(t, ck, target{Sentinels: harness.Addrs(ss), Master: masterName, Wait: wait})
	l := newLedger(false)
	defer l.report(t)

	errs := 0
	backoff := func(r response) {
		// A command fails while no primary answers (redis-py fails at once
		// on a refused connection): before the next attempt, wait for what
		// it waits on, the sentinels agreeing on a primary that answers
		// ROLE as one.
		errs++
		if errs <= 3 || errs%50 == 0 {
			t.Logf("error %d: %s", errs, r.Err)
		}
		testwait.Poll(10*time.Second, func() (bool, string) {
			addrs := harness.MasterAddrs(ctx, ss, masterName)
			addr := harness.Agreed(addrs)
			if addr == "" {
				return false, fmt.Sprint(addrs)
			}
			c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
			defer c.Close()
			role, err := c.Do(ctx, "ROLE").Slice()
			return err == nil && len(role) > 0 && role[0] == "master", fmt.Sprintf("%s: ROLE %v %v", addr, role, err)
		})
	}
	deadline := time.Now().Add(90 * time.Second)
	checkDeadline := func(what string) {
		t.Helper()
		if time.Now().After(deadline) {
			t.Fatalf("%s: not done within 90 s (%d errors)", what, errs)
		}
	}
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			for {
				checkDeadline(fmt.Sprintf("XADD %d", i))
				r := d.call(request{Op: "xadd", I: i})
				l.added(i, r, wait)
				if r.Err == "" {
					break
				}
				backoff(r)
			}
		}
	}

	// The kill, started from the consumers' loop once failoverKillAt
	// acknowledgements are durable.
	var (
		killStarted bool
		killed      = make(chan struct{})
		killedAt    time.Time
	)
	maybeKill := func() {
		if killStarted || len(l.ackedAt) < failoverKillAt {
			return
		}
		killStarted = true
		t.Logf("kill -9 of the primary %s after %d durable acknowledgements", primary.addr, len(l.ackedAt))
		go func() {
			primary.p.Kill()
			killedAt = time.Now()
			close(killed)
		}()
	}
	isKilled := func() bool {
		select {
		case <-killed:
			return true
		default:
			return false
		}
	}

	consumers := []string{"c1", "c2", "c3"}
	taken := 0
	// consume runs the consumers until ">" has nothing for each of them in
	// turn and every XACK was answered; with kill, the primary is killed on
	// the way and the loop goes on until a read after the kill succeeded.
	consume := func(what string, kill bool) {
		var toAck []string
		empties, readAfterKill := 0, false
		for k := 0; empties < len(consumers) || len(toAck) > 0 || kill && !readAfterKill; k++ {
			checkDeadline(what)
			if len(toAck) > 0 {
				r := d.call(request{Op: "ack", ID: toAck[0]})
				if !l.acked(toAck[0], r, wait) {
					backoff(r)
					continue
				}
				toAck = toAck[1:]
				if kill {
					maybeKill()
				}
				continue
			}
			c := consumers[k%len(consumers)]
			afterKill := isKilled()
			r := d.call(request{Op: "read", Consumer: c, ID: ">", Count: failoverBatch})
			if r.Err != "" {
				empties = 0
				backoff(r)
				continue
			}
			if afterKill {
				readAfterKill = true
			}
			l.delivered(c, ">", r.Entries, durable(r, wait))
			if len(r.Entries) == 0 {
				empties++
				continue
			}
			empties = 0
			for _, e := range r.Entries {
				if taken%3 != 0 {
					toAck = append(toAck, e.ID)
				}
				taken++
			}
		}
	}

	// 1. Before, through and after the kill.
	produce(0, failoverBefore)
	consume("consuming through the failover", true)
	if !killStarted {
		t.Fatalf("the primary was never killed: %d durable acknowledgements, want %d", len(l.ackedAt), failoverKillAt)
	}
	newMaster := ""
	testwait.For(t, 30*time.Second, "every sentinel reports the new master", func() (bool, string) {
		addrs := harness.MasterAddrs(ctx, ss, masterName)
		newMaster = harness.Agreed(addrs)
		return newMaster != "" && newMaster != primary.addr, fmt.Sprint(addrs)
	})
	t.Logf("failover: %s promoted; consumers done %v after the kill, %d errors on the way",
		newMaster, time.Since(killedAt).Round(time.Millisecond), errs)
	if *inject == "setid" {
		mustDo(t, admin(t, newMaster), "XGROUP", "SETID", streamKey, groupName, "0")
		t.Log("injected: XGROUP SETID to 0 on the new primary")
	}

	// 2. More entries on the new primary.
	produce(failoverBefore, failoverBefore+failoverAfter)
	consume("consuming after the failover", false)

	// 3. What is pending.
	read := func(req request) response {
		t.Helper()
		for {
			checkDeadline(req.Op)
			r := d.call(req)
			if r.Err == "" {
				return r
			}
			backoff(r)
		}
	}
	mustPend := func(owner string) []string {
		var out []string
		for id := range l.mustPend {
			if owner == "" || l.owner[id] == owner {
				out = append(out, id)
			}
		}
		slices.SortFunc(out, cmpID)
		return out
	}
	covers := func(what string, es []entry, want []string) {
		have := map[string]bool{}
		for _, e := range es {
			have[e.ID] = true
		}
		for _, id := range want {
			if !have[id] {
				l.violate("%s: lacks %s, delivered durably and never acknowledged", what, id)
			}
		}
	}
	l.checkPending("after the failover", read(request{Op: "pending"}).Pending)
	for _, c := range consumers {
		want := mustPend(c)
		r := read(request{Op: "read", Consumer: c, ID: "0", Count: 100000})
		covers(c+" history after the failover", r.Entries, want)
		l.delivered(c, "0", r.Entries, durable(r, wait))
	}
	want := mustPend("")
	r := read(request{Op: "claim", Consumer: "c5", IDs: l.ids})
	covers("XCLAIM of every entry by c5", r.Entries, want)
	l.delivered("c5", "XCLAIM", r.Entries, durable(r, wait))
	rescued := 0
	for start := "0-0"; ; {
		r := read(request{Op: "autoclaim", Consumer: "rescuer", Start: start, Count: 100})
		l.delivered("rescuer", "XAUTOCLAIM", r.Entries, durable(r, wait))
		for _, e := range r.Entries {
			rescued++
			for {
				checkDeadline("rescuer XACK")
				if r := d.call(request{Op: "ack", ID: e.ID}); l.acked(e.ID, r, wait) {
					break
				} else {
					backoff(r)
				}
			}
		}
		if start = r.Next; start == "0-0" {
			break
		}
	}
	if rows := read(request{Op: "pending"}).Pending; len(rows) != 0 {
		l.violate("XPENDING once the rescuer acknowledged everything: %v", short(rows))
	}
	t.Logf("%d entries pending after the failover, all rescued by XAUTOCLAIM", rescued)
	l.checkDone()
}

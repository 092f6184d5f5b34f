package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/server"
)

// migNodes starts n cluster-mode nodes with 40-hex ids.
func migNodes(t *testing.T, n int, cfg server.Config) []*node {
	nodes := make([]*node, n)
	for i := range nodes {
		c := cfg
		c.ClusterEnabled, c.ClusterNodeID = true, fmt.Sprintf("%040x", 0xa0+i)
		nodes[i] = startNode(t, c)
	}
	return nodes
}

// withMigration returns the topology JSON with a migration of slots
// [start, end] from shard `from` to the master of shard `to`.
func withMigration(t *testing.T, cfg string, from, to int, start, end int) string {
	t.Helper()
	var shards []cluster.Shard
	if err := json.Unmarshal([]byte(cfg), &shards); err != nil {
		t.Fatal(err)
	}
	m := shards[to].Master
	shards[from].Migrations = []cluster.Migration{{SlotRanges: []cluster.SlotRange{{Start: start, End: end}}, NodeID: m.ID, IP: m.IP, Port: m.Port}}
	b, err := json.Marshal(shards)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// migrationStates returns node n's SLOT-MIGRATION-STATUS, each line as
// "direction peer state keys error slots".
func migrationStates(t *testing.T, n *node) []string {
	t.Helper()
	v, err := n.rdb.Do(context.Background(), "CELLCLUSTER", "SLOT-MIGRATION-STATUS").Slice()
	if err != nil {
		t.Fatalf("SLOT-MIGRATION-STATUS on %s: %v", n.addr, err)
	}
	var out []string
	for _, e := range v {
		f := e.([]any)
		out = append(out, fmt.Sprintf("%v %v %v %v %q %v", f...))
	}
	return out
}

// waitMigration waits until node n lists one migration in state want.
func waitMigration(t *testing.T, n *node, want string) string {
	t.Helper()
	var line string
	testwait.For(t, 30*time.Second, n.addr+" migration "+want, func() (bool, string) {
		st := migrationStates(t, n)
		if len(st) == 1 && strings.Fields(st[0])[2] == want {
			line = st[0]
			return true, ""
		}
		return false, fmt.Sprint(st)
	})
	return line
}

// TestMigrationCarriesState: keys of migrating slots keep their limiter
// state on the target. A key at its limit before the move is at its limit
// after; the source redirects to the target as soon as the migration is
// FINISHED, before the closing topology; the closing topology makes it
// the topology's; the source's copies are deleted.
func TestMigrationCarriesState(t *testing.T) {
	ctx := context.Background()
	nodes := migNodes(t, 3, server.Config{})
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	open := topology(t, nodes, ranges, nil)
	push(t, open, nodes...)
	// Keys of slots 0..1000 on node 0, each at its limit (CL.THROTTLE
	// key 2 1 86400: 3 admitted, then refused for hours).
	var keys []string
	for i := 0; len(keys) < 300; i++ {
		if k := fmt.Sprintf("m:%d", i); keyslot.Of([]byte(k)) <= 1000 {
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		for range 3 {
			if r, err := nodes[0].rdb.Do(ctx, "CL.THROTTLE", k, 2, 1, 86400).Int64Slice(); err != nil || r[0] != 0 {
				t.Fatalf("CL.THROTTLE %s: %v %v", k, r, err)
			}
		}
	}
	// A stream of the moved slots, with a consumer group and entries
	// pending: it moves whole, groups and pending entries with it.
	sk := "audit:0"
	for keyslot.Of([]byte(sk)) > 1000 {
		sk += "x"
	}
	for i := range 250 {
		if err := nodes[0].rdb.XAdd(ctx, &redis.XAddArgs{Stream: sk, ID: fmt.Sprintf("%d-1", i+1), Values: []any{"n", i}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := nodes[0].rdb.XGroupCreate(ctx, sk, "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "g", Consumer: "c", Streams: []string{sk, ">"}, Count: 40}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := nodes[0].rdb.XAck(ctx, sk, "g", "1-1", "2-1").Err(); err != nil {
		t.Fatal(err)
	}
	dump, err := nodes[0].rdb.Dump(ctx, sk).Result()
	if err != nil {
		t.Fatal(err)
	}
	push(t, withMigration(t, open, 0, 2, 0, 1000), nodes...)
	out := waitMigration(t, nodes[0], cluster.MigFinished)
	in := waitMigration(t, nodes[2], cluster.MigFinished)
	if want := fmt.Sprintf("out %s FINISHED %d \"\" 0-1000", nodes[2].srv.Cluster().MyID(), len(keys)+1); out != want {
		t.Errorf("source's status %q, want %q", out, want)
	}
	if want := fmt.Sprintf("in %s FINISHED %d \"\" 0-1000", nodes[0].srv.Cluster().MyID(), len(keys)+1); in != want {
		t.Errorf("target's status %q, want %q", in, want)
	}
	if got, err := nodes[2].rdb.Dump(ctx, sk).Result(); err != nil || got != dump {
		t.Errorf("the stream on the target: DUMP %q, %v; want the source's, %q", got, err, dump)
	}
	if p, err := nodes[2].rdb.XPending(ctx, sk, "g").Result(); err != nil || p.Count != 38 || p.Lower != "3-1" {
		t.Errorf("the stream's pending entries on the target: %+v, %v; want 38 from 3-1", p, err)
	}
	// Before the closing topology: the source redirects, the target
	// serves with the state it received.
	for _, k := range keys {
		err := nodes[0].rdb.Do(ctx, "CL.THROTTLE", k, 2, 1, 86400).Err()
		if err == nil || err.Error() != fmt.Sprintf("MOVED %d %s", keyslot.Of([]byte(k)), nodes[2].addr) {
			t.Fatalf("CL.THROTTLE %s on the source after the handover: %v", k, err)
		}
		if r, err := nodes[2].rdb.Do(ctx, "CL.THROTTLE", k, 2, 1, 86400).Int64Slice(); err != nil || r[0] != 1 {
			t.Fatalf("CL.THROTTLE %s on the target: %v %v; want refused (the limit was reached before the move)", k, r, err)
		}
	}
	// Keys of the source's other slots stay.
	other := "m:other"
	for keyslot.Of([]byte(other)) <= 1000 || keyslot.Of([]byte(other)) > 5460 {
		other += "x"
	}
	if r, err := nodes[0].rdb.Do(ctx, "CL.THROTTLE", other, 2, 1, 86400).Int64Slice(); err != nil || r[0] != 0 {
		t.Fatalf("CL.THROTTLE %s (not migrating) on the source: %v %v", other, r, err)
	}
	// The closing topology.
	closing := topology(t, nodes, [][2]int{{1001, 5460}, {5461, 10922}, {10923, 16383}}, nil)
	closing = strings.Replace(closing, `"slot_ranges":[{"start":10923,"end":16383}]`, `"slot_ranges":[{"start":0,"end":1000},{"start":10923,"end":16383}]`, 1)
	push(t, closing, nodes...)
	for _, n := range []*node{nodes[0], nodes[2]} {
		testwait.For(t, 10*time.Second, n.addr+" forgets the migration", func() (bool, string) {
			st := migrationStates(t, n)
			return len(st) == 0, fmt.Sprint(st)
		})
	}
	if err := nodes[0].srv.Cluster().WaitDeletes(ctx); err != nil {
		t.Fatal(err)
	}
	for slot := 0; slot <= 1000; slot++ {
		if n := nodes[0].srv.Commands().Keyspace().CountKeysInSlot(0, uint16(slot)); n != 0 {
			t.Fatalf("the source still has %d keys of slot %d", n, slot)
		}
	}
	if r, err := nodes[2].rdb.Do(ctx, "CL.THROTTLE", keys[0], 2, 1, 86400).Int64Slice(); err != nil || r[0] != 1 {
		t.Fatalf("CL.THROTTLE %s on the target after the closing topology: %v %v", keys[0], r, err)
	}
}

// TestMigrationUnderLoad: a reshard under a CL.THROTTLE load through
// go-redis's ClusterClient: every key's admissions over the whole run,
// counted from the replies, are at most its limit, and every key of the
// moved slots that reached its limit before the move stays there (0 keys
// reset).
func TestMigrationUnderLoad(t *testing.T) {
	ctx := context.Background()
	nodes := migNodes(t, 3, server.Config{})
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	open := topology(t, nodes, ranges, nil)
	push(t, open, nodes...)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[1].addr}, Protocol: 2, MaxRedirects: 16})
	t.Cleanup(func() { cc.Close() })
	const nkeys, limit = 400, 10 // CL.THROTTLE key 9 10 86400: 10 admitted, then one per 2.4 hours
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("load:%d", i)
	}
	var admitted [nkeys]atomic.Int64
	var calls, errs atomic.Int64
	var lastErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := rng.IntN(nkeys)
				r, err := cc.Do(ctx, "CL.THROTTLE", keys[i], 9, 10, 86400).Int64Slice()
				calls.Add(1)
				switch {
				case err != nil:
					errs.Add(1)
					lastErr.Store(err.Error())
				case r[0] == 0:
					admitted[i].Add(1)
				}
			}
		}()
	}
	// Run until about half the keys reached their limit, move slots
	// 0..3000 (about a fifth of the keys) to node 2 and back the rest
	// of the way.
	testwait.Until(t, 30*time.Second, "some load", func() bool { return calls.Load() > nkeys*limit/2 })
	push(t, withMigration(t, open, 0, 2, 0, 3000), nodes...)
	waitMigration(t, nodes[0], cluster.MigFinished)
	closing := topology(t, nodes, [][2]int{{3001, 5460}, {5461, 10922}, {10923, 16383}}, nil)
	closing = strings.Replace(closing, `"slot_ranges":[{"start":10923,"end":16383}]`, `"slot_ranges":[{"start":0,"end":3000},{"start":10923,"end":16383}]`, 1)
	push(t, closing, nodes...)
	at := calls.Load()
	testwait.Until(t, 30*time.Second, "more load", func() bool { return calls.Load() > at+nkeys*limit })
	close(stop)
	wg.Wait()
	moved, over := 0, 0
	for i, k := range keys {
		n := admitted[i].Load()
		if n > limit {
			over++
			t.Errorf("%s (slot %d): %d admitted, limit %d", k, keyslot.Of([]byte(k)), n, limit)
		}
		if keyslot.Of([]byte(k)) <= 3000 {
			moved++
		}
	}
	t.Logf("%d calls, %d keys (%d in moved slots), %d over their limit, %d errors (last: %v)", calls.Load(), nkeys, moved, over, errs.Load(), lastErr.Load())
	// The final state of every key agrees with the admissions counted.
	for i, k := range keys {
		r, err := cc.Do(ctx, "CL.THROTTLE", k, 9, 10, 86400, 0).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if left, n := r[2], admitted[i].Load(); left != limit-n {
			t.Errorf("%s (slot %d): %d admitted, but its state says %d left of %d (reset by the move?)", k, keyslot.Of([]byte(k)), n, left, limit)
		}
	}
}

// TestMigrationRetriesAndCancels: a target that does not expect the
// migration yet (its topology lacks it) is retried (ERROR) until it does;
// a target that cannot be reached leaves the source serving the slots,
// retrying, until a topology without the migration cancels it.
func TestMigrationRetriesAndCancels(t *testing.T) {
	ctx := context.Background()
	nodes := migNodes(t, 3, server.Config{})
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	open := topology(t, nodes, ranges, nil)
	push(t, open, nodes...)
	key := "retry:0"
	for keyslot.Of([]byte(key)) > 1000 {
		key += "x"
	}
	if err := nodes[0].rdb.Do(ctx, "CL.THROTTLE", key, 2, 1, 86400).Err(); err != nil {
		t.Fatal(err)
	}
	// Node 2 does not have the opening topology yet.
	mig := withMigration(t, open, 0, 2, 0, 1000)
	push(t, mig, nodes[0], nodes[1])
	testwait.For(t, 10*time.Second, "the source retrying", func() (bool, string) {
		st := migrationStates(t, nodes[0])
		return len(st) == 1 && strings.Contains(st[0], " ERROR ") && strings.Contains(st[0], "UNKNOWN_MIGRATION"), fmt.Sprint(st)
	})
	if r, err := nodes[0].rdb.Do(ctx, "CL.THROTTLE", key, 2, 1, 86400).Int64Slice(); err != nil || r[2] != 1 {
		t.Fatalf("the source while its migration is retried: %v %v", r, err)
	}
	push(t, mig, nodes[2])
	waitMigration(t, nodes[0], cluster.MigFinished)
	if r, err := nodes[2].rdb.Do(ctx, "CL.THROTTLE", key, 2, 1, 86400).Int64Slice(); err != nil || r[2] != 0 {
		t.Fatalf("the target after the retried migration: %v %v", r, err)
	}

	// A target nobody listens at: ERROR, retried; the source serves.
	nowhere := startNode(t, server.Config{ClusterEnabled: true, ClusterNodeID: fmt.Sprintf("%040x", 0xee)})
	ghost := topology(t, []*node{nodes[0], nodes[1], nowhere}, ranges, nil)
	nowhere.srv.Close()
	push(t, ghost, nodes[0], nodes[1])
	push(t, withMigration(t, ghost, 0, 2, 2000, 2100), nodes[0], nodes[1])
	testwait.For(t, 10*time.Second, "the source retrying an unreachable target", func() (bool, string) {
		st := migrationStates(t, nodes[0])
		return len(st) == 1 && strings.Contains(st[0], " ERROR "), fmt.Sprint(st)
	})
	k2 := "retry:1"
	for s := keyslot.Of([]byte(k2)); s < 2000 || s > 2100; s = keyslot.Of([]byte(k2)) {
		k2 += "x"
	}
	if err := nodes[0].rdb.Do(ctx, "CL.THROTTLE", k2, 2, 1, 86400).Err(); err != nil {
		t.Fatalf("the source while its target is unreachable: %v", err)
	}
	// Cancelled: the topology without it.
	push(t, ghost, nodes[0], nodes[1])
	testwait.For(t, 10*time.Second, "the migration cancelled", func() (bool, string) {
		st := migrationStates(t, nodes[0])
		return len(st) == 0, fmt.Sprint(st)
	})
	if r, err := nodes[0].rdb.Do(ctx, "CL.THROTTLE", k2, 2, 1, 86400).Int64Slice(); err != nil || r[2] != 1 {
		t.Fatalf("the source after the cancel: %v %v", r, err)
	}
}

// TestMigrationTargetOutOfMemory: a target past its maxmemory refuses the
// migration for good (FATAL on both sides) and drops the keys it had
// received; the source keeps serving the slots with their state.
func TestMigrationTargetOutOfMemory(t *testing.T) {
	ctx := context.Background()
	nodes := migNodes(t, 2, server.Config{})
	small := startNode(t, server.Config{ClusterEnabled: true, ClusterNodeID: fmt.Sprintf("%040x", 0xb0), MaxMemory: 1 << 20, MaxMemoryPolicy: "noeviction"})
	nodes = append(nodes, small)
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	open := topology(t, nodes, ranges, nil)
	push(t, open, nodes...)
	// About 4 MB of state in slots 0..5460 of node 0.
	p := nodes[0].rdb.Pipeline()
	for i := range 20000 {
		k := fmt.Sprintf("oom:%d", i)
		if keyslot.Of([]byte(k)) <= 5460 {
			p.Do(ctx, "CL.SLIDINGLOG", k, 20, 3600, 10)
		}
	}
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	before := nodes[0].rdb.DBSize(ctx).Val()
	push(t, withMigration(t, open, 0, 2, 0, 5460), nodes...)
	out := waitMigration(t, nodes[0], cluster.MigFatal)
	in := waitMigration(t, nodes[2], cluster.MigFatal)
	if !strings.Contains(out, "out of memory") || !strings.Contains(in, "out of memory") {
		t.Fatalf("statuses %q, %q: want the out-of-memory error", out, in)
	}
	for slot := 0; slot <= 5460; slot++ {
		if n := small.srv.Commands().Keyspace().CountKeysInSlot(0, uint16(slot)); n != 0 {
			t.Fatalf("the target kept %d keys of slot %d", n, slot)
		}
	}
	if after := nodes[0].rdb.DBSize(ctx).Val(); after != before || before == 0 {
		t.Fatalf("the source has %d keys, had %d", after, before)
	}
	k := "oom:0"
	for keyslot.Of([]byte(k)) > 5460 {
		k += "x"
	}
	if err := nodes[0].rdb.Do(ctx, "CL.SLIDINGLOG", k, 20, 3600, 10).Err(); err != nil {
		t.Fatalf("the source after a FATAL migration: %v", err)
	}
}

// TestMigrationSourceGone: a source whose connection ends before the
// handover (killed) leaves nothing on the target: the keys it had sent are
// dropped, and the status says why.
func TestMigrationSourceGone(t *testing.T) {
	nodes := migNodes(t, 2, server.Config{})
	ranges := [][2]int{{0, 8191}, {8192, 16383}}
	open := topology(t, nodes, ranges, nil)
	// Only the target gets the opening topology; the test plays the
	// source on a connection of its own.
	push(t, withMigration(t, open, 0, 1, 0, 100), nodes[1])
	src := nodes[0].srv.Cluster().MyID()
	c := resptest.MustDial(t, nodes[1].addr)
	if v := c.MustDo(t, "CELLCLUSTER", "MIGRATE-PUT", src, "k", "x"); v.Kind != '-' || !strings.HasPrefix(v.Str, "UNKNOWN_MIGRATION") {
		t.Fatalf("MIGRATE-PUT before MIGRATE-START = %v", v)
	}
	c.MustDo(t, "CELLCLUSTER", "MIGRATE-START", src, "1")
	var sent []string
	for i := 0; len(sent) < 50; i++ {
		k := fmt.Sprintf("gone:%d", i)
		if keyslot.Of([]byte(k)) > 100 {
			continue
		}
		// A value as a source encodes it: DUMP's payload without its
		// trailer is persistence.EncodeValue.
		payload := persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindString, Obj: []byte("v")})
		if v := c.MustDo(t, "CELLCLUSTER", "MIGRATE-PUT", src, k, string(payload)); v.Str != "OK" {
			t.Fatalf("MIGRATE-PUT %s = %v", k, v)
		}
		sent = append(sent, k)
	}
	if v := c.MustDo(t, "CELLCLUSTER", "MIGRATE-PUT", src, "not-migrating-"+strings.Repeat("z", 3), "x"); v.Kind != '-' {
		t.Fatalf("MIGRATE-PUT of a key outside the slots = %v", v)
	}
	count := func() int {
		n := 0
		for slot := 0; slot <= 100; slot++ {
			n += nodes[1].srv.Commands().Keyspace().CountKeysInSlot(0, uint16(slot))
		}
		return n
	}
	if n := count(); n != len(sent) {
		t.Fatalf("the target holds %d keys of the slots, %d were sent", n, len(sent))
	}
	c.Close()
	testwait.For(t, 10*time.Second, "the target to drop the keys", func() (bool, string) {
		n := count()
		return n == 0, fmt.Sprintf("%d keys left", n)
	})
	st := migrationStates(t, nodes[1])
	if len(st) != 1 || !strings.Contains(st[0], " ERROR ") || !strings.Contains(st[0], "connection ended") {
		t.Fatalf("the target's status after the source left: %v", st)
	}
}

// TestMigrationReplicasConverge: the target's replicas get the migrated
// keys through replication, as any change of the target.
func TestMigrationReplicasConverge(t *testing.T) {
	ctx := context.Background()
	nodes := migNodes(t, 2, server.Config{})
	replica := startNode(t, server.Config{ClusterEnabled: true, ClusterNodeID: fmt.Sprintf("%040x", 0xc0)})
	ranges := [][2]int{{0, 8191}, {8192, 16383}}
	open := topology(t, nodes, ranges, map[int][]*node{1: {replica}})
	push(t, open, append(nodes, replica)...)
	h, p := nodes[1].hostPort()
	if err := replica.rdb.Do(ctx, "REPLICAOF", h, p).Err(); err != nil {
		t.Fatal(err)
	}
	waitInSync(t, nodes[1], replica)
	n := 0
	for i := 0; n < 500; i++ {
		if k := fmt.Sprintf("rep:%d", i); keyslot.Of([]byte(k)) <= 2000 {
			if err := nodes[0].rdb.Do(ctx, "CL.THROTTLE", k, 5, 10, 86400).Err(); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	push(t, withMigration(t, open, 0, 1, 0, 2000), append(nodes, replica)...)
	waitMigration(t, nodes[0], cluster.MigFinished)
	waitInSync(t, nodes[1], replica)
	if got := sameState(t, nodes[1], replica); got < n {
		t.Fatalf("the target has %d keys, want at least the %d migrated", got, n)
	}
}

// TestMigrationTargetDropsPartial: the target drops what an unfinished
// attempt left when the next attempt starts (a source that reconnects,
// or a target restarted with its data), and when a topology cancels the
// migration.
func TestMigrationTargetDropsPartial(t *testing.T) {
	nodes := migNodes(t, 2, server.Config{})
	open := topology(t, nodes, [][2]int{{0, 8191}, {8192, 16383}}, nil)
	push(t, withMigration(t, open, 0, 1, 0, 100), nodes[1])
	src := nodes[0].srv.Cluster().MyID()
	payload := string(persistence.EncodeValue(nil, keyspace.Value{Kind: keyspace.KindString, Obj: []byte("v")}))
	var keys []string
	for i := 0; len(keys) < 20; i++ {
		if k := fmt.Sprintf("partial:%d", i); keyslot.Of([]byte(k)) <= 100 {
			keys = append(keys, k)
		}
	}
	count := func() int {
		n := 0
		for slot := 0; slot <= 100; slot++ {
			n += nodes[1].srv.Commands().Keyspace().CountKeysInSlot(0, uint16(slot))
		}
		return n
	}
	attempt := func(n string) *resptest.Conn {
		c := resptest.MustDial(t, nodes[1].addr)
		c.MustDo(t, "CELLCLUSTER", "MIGRATE-START", src, n)
		for _, k := range keys {
			if v := c.MustDo(t, "CELLCLUSTER", "MIGRATE-PUT", src, k, payload); v.Str != "OK" {
				t.Fatalf("MIGRATE-PUT %s = %v", k, v)
			}
		}
		return c
	}
	first := attempt("1")
	if n := count(); n != len(keys) {
		t.Fatalf("after the first attempt: %d keys, want %d", n, len(keys))
	}
	// A second attempt on another connection (the first one still open):
	// the first attempt's keys go, and its connection may write no more.
	c := resptest.MustDial(t, nodes[1].addr)
	c.MustDo(t, "CELLCLUSTER", "MIGRATE-START", src, "2")
	if n := count(); n != 0 {
		t.Fatalf("a new attempt left %d keys of the previous one", n)
	}
	if v := first.MustDo(t, "CELLCLUSTER", "MIGRATE-PUT", src, keys[0], payload); v.Kind != '-' {
		t.Fatalf("MIGRATE-PUT on the first attempt's connection after a second started = %v", v)
	}
	c.Close()
	second := attempt("3")
	// Cancelled by a topology without the migration: the keys go.
	push(t, open, nodes[1])
	testwait.For(t, 10*time.Second, "the cancelled migration's keys dropped", func() (bool, string) {
		n := count()
		return n == 0, fmt.Sprintf("%d keys left", n)
	})
	if v := second.MustDo(t, "CELLCLUSTER", "MIGRATE-END", src, "20"); v.Kind != '-' || !strings.HasPrefix(v.Str, "UNKNOWN_MIGRATION") {
		t.Fatalf("MIGRATE-END after the cancel = %v", v)
	}
}

package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/internal/topotest"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// clusterNodes starts n cluster-mode nodes with fresh ids.
func clusterNodes(t *testing.T, n int) []*node {
	nodes := make([]*node, n)
	for i := range nodes {
		nodes[i] = startNode(t, server.Config{ClusterEnabled: true, ClusterNodeID: topotest.ID(fmt.Sprintf("node-%d", i+1))})
	}
	return nodes
}

// topology builds the JSON: shard i is nodes[i] with slots ranges[i];
// replicas[i] (if any) are its replicas.
func topology(t *testing.T, nodes []*node, ranges [][2]int, replicas map[int][]*node) string {
	t.Helper()
	nj := func(n *node) cluster.Node {
		h, p, _ := net.SplitHostPort(n.addr)
		port, _ := strconv.Atoi(p)
		return cluster.Node{ID: n.srv.Cluster().MyID(), IP: h, Port: port}
	}
	var shards []cluster.Shard
	for i, r := range ranges {
		sh := cluster.Shard{SlotRanges: []cluster.SlotRange{{Start: r[0], End: r[1]}}, Master: nj(nodes[i]), Replicas: []cluster.Node{}}
		for _, rep := range replicas[i] {
			sh.Replicas = append(sh.Replicas, nj(rep))
		}
		shards = append(shards, sh)
	}
	b, err := json.Marshal(shards)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func push(t *testing.T, cfg string, nodes ...*node) {
	t.Helper()
	for _, n := range nodes {
		if err := n.rdb.Do(context.Background(), "CELLCLUSTER", "CONFIG", cfg).Err(); err != nil {
			t.Fatalf("CELLCLUSTER CONFIG on %s: %v", n.addr, err)
		}
	}
}

// owner returns the index of the range holding slot.
func owner(ranges [][2]int, slot uint16) int {
	for i, r := range ranges {
		if int(slot) >= r[0] && int(slot) <= r[1] {
			return i
		}
	}
	return -1
}

func errorstat(t *testing.T, n *node, code string) int {
	t.Helper()
	s, err := n.rdb.Info(context.Background(), "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(l, "errorstat_"+code+":count="); ok {
			c, _ := strconv.Atoi(v)
			return c
		}
	}
	return 0
}

// TestClusterThreeNodes: three masters and a replica of the first, in
// process on loopback, with a topology pushed with their real addresses.
func TestClusterThreeNodes(t *testing.T) {
	ctx := context.Background()
	nodes := clusterNodes(t, 4)
	masters, replica := nodes[:3], nodes[3]

	// No topology yet: keyed commands get CLUSTERDOWN, the rest run.
	if err := masters[0].rdb.Get(ctx, "k").Err(); err == nil || err.Error() != "CLUSTERDOWN Hash slot not served" {
		t.Fatalf("GET before a topology: %v", err)
	}
	if err := masters[0].rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	cfg := topology(t, masters, ranges, map[int][]*node{0: {replica}})
	push(t, cfg, nodes...)

	// Topology agreement: CLUSTER SLOTS identical everywhere, NODES too
	// but for the myself flag.
	var slots0, nodes0 string
	for i, n := range nodes {
		s := fmt.Sprint(n.rdb.Do(ctx, "CLUSTER", "SLOTS").Val())
		nl, err := n.rdb.Do(ctx, "CLUSTER", "NODES").Text()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(nl, "myself") != 1 {
			t.Errorf("node %d: NODES without exactly one myself:\n%s", i, nl)
		}
		nl = strings.Replace(nl, "myself,", "", 1)
		if i == 0 {
			slots0, nodes0 = s, nl
			continue
		}
		if s != slots0 || nl != nodes0 {
			t.Errorf("node %d disagrees:\n%s\n%s\nnode 0:\n%s\n%s", i, s, nl, slots0, nodes0)
		}
	}
	if v, err := masters[1].rdb.Do(ctx, "CLUSTER", "KEYSLOT", "123456789").Int(); err != nil || v != 12739 {
		t.Fatalf("CLUSTER KEYSLOT 123456789 = %d, %v", v, err)
	}
	if v, _ := masters[0].rdb.Do(ctx, "INFO", "cluster").Text(); !strings.Contains(v, "cluster_enabled:1") {
		t.Fatalf("INFO cluster: %q", v)
	}

	// MOVED: node 1 serves its slots and redirects the others to their
	// owner's real address.
	served, moved := 0, 0
	for i := range 300 {
		key := fmt.Sprintf("user:%d", i)
		slot := keyslot.Of([]byte(key))
		o := owner(ranges, slot)
		err := masters[0].rdb.Do(ctx, "CL.THROTTLE", key, 4, 1, 60).Err()
		if o == 0 {
			if err != nil {
				t.Fatalf("%s (slot %d) on its owner: %v", key, slot, err)
			}
			served++
			continue
		}
		want := fmt.Sprintf("MOVED %d %s", slot, masters[o].addr)
		if err == nil || err.Error() != want {
			t.Fatalf("%s on node 1: %v, want %s", key, err, want)
		}
		moved++
	}
	t.Logf("node 1 served %d keys, redirected %d", served, moved)

	// CROSSSLOT: CL.ALL and DEL across slots; a hash tag keeps them
	// together.
	if err := masters[0].rdb.Do(ctx, "CL.ALL", "CL.THROTTLE", "b", 1, 1, 1, 1, "CL.FIXED", "f", 1, 1, 1).Err(); err == nil ||
		err.Error() != "CROSSSLOT Keys in request don't hash to the same slot" {
		t.Fatalf("CL.ALL across slots: %v", err)
	}
	if err := masters[0].rdb.Do(ctx, "CL.ALL", "CL.THROTTLE", "{b}1", 1, 1, 1, 1, "CL.FIXED", "{b}2", 1, 1, 1).Err(); err != nil {
		t.Fatalf("CL.ALL in one slot: %v", err)
	}

	// READONLY: the replica of shard 0 serves reads of shard 0 only to a
	// READONLY client, never writes.
	rc := replica.rdb.Conn()
	defer rc.Close()
	key0 := "b" // slot 3300, shard 0
	if err := rc.Get(ctx, key0).Err(); err == nil || err.Error() != "MOVED 3300 "+masters[0].addr {
		t.Fatalf("replica without READONLY: %v", err)
	}
	if err := rc.ReadOnly(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Get(ctx, key0).Err(); err != redis.Nil {
		t.Fatalf("READONLY read on the replica: %v", err)
	}
	if err := rc.Do(ctx, "CL.THROTTLE", key0, 1, 1, 1).Err(); err == nil || err.Error() != "MOVED 3300 "+masters[0].addr {
		t.Fatalf("READONLY write on the replica: %v", err)
	}
	if err := rc.Get(ctx, "c").Err(); err == nil || err.Error() != "MOVED 7365 "+masters[1].addr {
		t.Fatalf("READONLY read of another shard: %v", err)
	}
	if err := rc.ReadWrite(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Get(ctx, key0).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED") {
		t.Fatalf("after READWRITE: %v", err)
	}

	// go-redis's ClusterClient routes by CLUSTER SLOTS: once it has the
	// slot map, no MOVED.
	before := 0
	for _, n := range masters {
		before += errorstat(t, n, "MOVED")
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{masters[2].addr}, Protocol: 2})
	defer cc.Close()
	cc.ReloadState(ctx)
	for i := range 1000 {
		key := fmt.Sprintf("cc:%d", i)
		r, err := cc.Do(ctx, "CL.THROTTLE", key, 4, 1, 60).Int64Slice()
		if err != nil || r[0] != 0 {
			t.Fatalf("ClusterClient CL.THROTTLE %s: %v %v", key, r, err)
		}
	}
	after := 0
	for _, n := range masters {
		after += errorstat(t, n, "MOVED")
	}
	if after != before {
		t.Fatalf("ClusterClient caused %d MOVED replies", after-before)
	}
}

// TestClusterPushDeletesMovedSlots: a topology that takes slots away
// from a node deletes their keys there in the background; the new owner
// starts them fresh and the old one redirects.
func TestClusterPushDeletesMovedSlots(t *testing.T) {
	ctx := context.Background()
	nodes := clusterNodes(t, 2)
	ranges := [][2]int{{0, 8191}, {8192, 16383}}
	push(t, topology(t, nodes, ranges, nil), nodes...)

	var stay, leave []string
	for i := 0; len(stay) < 50 || len(leave) < 50; i++ {
		key := fmt.Sprintf("k:%d", i)
		slot := keyslot.Of([]byte(key))
		if slot >= 8192 {
			continue
		}
		if slot < 4096 {
			stay = append(stay, key)
		} else {
			leave = append(leave, key)
		}
		if err := nodes[0].rdb.Do(ctx, "CL.THROTTLE", key, 0, 1, 60).Err(); err != nil {
			t.Fatal(err)
		}
	}
	size := func(n *node) int64 { return n.rdb.DBSize(ctx).Val() }
	if got := size(nodes[0]); got != int64(len(stay)+len(leave)) {
		t.Fatalf("DBSIZE %d before the push", got)
	}
	// Slots 4096-8191 go to node 2.
	moved := [][2]int{{0, 4095}, {4096, 16383}}
	push(t, topology(t, nodes, moved, nil), nodes...)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := nodes[0].srv.Cluster().WaitDeletes(wctx); err != nil {
		t.Fatal(err)
	}
	if got := size(nodes[0]); got != int64(len(stay)) {
		t.Fatalf("DBSIZE %d after the push, want %d (the keys that stayed)", got, len(stay))
	}
	k := leave[0]
	slot := keyslot.Of([]byte(k))
	if err := nodes[0].rdb.Get(ctx, k).Err(); err == nil || err.Error() != fmt.Sprintf("MOVED %d %s", slot, nodes[1].addr) {
		t.Fatalf("moved key on its old node: %v", err)
	}
	// The new owner starts the moved key fresh: the limit (1 per 60 s)
	// admits once more there; a key that stayed is still limited.
	if r, err := nodes[1].rdb.Do(ctx, "CL.THROTTLE", k, 0, 1, 60).Int64Slice(); err != nil || r[0] != 0 {
		t.Fatalf("moved key on its new node: %v %v", r, err)
	}
	if r, err := nodes[0].rdb.Do(ctx, "CL.THROTTLE", stay[0], 0, 1, 60).Int64Slice(); err != nil || r[0] != 1 {
		t.Fatalf("a key that stayed must still be limited: %v %v", r, err)
	}
	if n := nodes[0].srv.Cluster().DeletedKeys(); n != int64(len(leave)) {
		t.Fatalf("DeletedKeys = %d, want %d", n, len(leave))
	}
}

// TestClusterConfigFile: the last topology installed and the node id are
// kept across a restart.
func TestClusterConfigFile(t *testing.T) {
	ctx := context.Background()
	file := t.TempDir() + "/topology.json"
	cfg := server.Config{ClusterEnabled: true, ClusterConfigFile: file}
	n1 := startNode(t, cfg)
	id := n1.srv.Cluster().MyID()
	top := topology(t, []*node{n1}, [][2]int{{0, 16383}}, nil)
	push(t, top, n1)
	if err := n1.rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	n2 := startNode(t, cfg) // the same files, as a restart would find them
	if got := n2.srv.Cluster().MyID(); got != id {
		t.Fatalf("id after restart %s, want %s", got, id)
	}
	// n2 has n1's id, so it finds itself as the master of every slot.
	if err := n2.rdb.Get(ctx, "k").Err(); err != redis.Nil {
		t.Fatalf("GET on the restarted node: %v", err)
	}
	if v, _ := n2.rdb.Do(ctx, "CLUSTER", "INFO").Text(); !strings.Contains(v, "cluster_state:ok") {
		t.Fatalf("CLUSTER INFO after restart: %s", v)
	}
	// Options that need cluster mode are refused without it.
	if err := (server.Config{ClusterConfigFile: file}).Validate(); err == nil {
		t.Fatal("cluster-config-file without cluster-enabled accepted")
	}
	if err := (server.Config{ClusterEnabled: true, ClusterNodeID: "a b"}).Validate(); err == nil {
		t.Fatal("an id with a space accepted")
	}
	// An id must be 40 lower-case hex digits: one more digit is refused
	// (it would not be the id the topology names, and the node would show
	// itself as a stray master without slots).
	if err := (server.Config{ClusterEnabled: true, ClusterNodeID: topotest.ID("n") + "0"}).Validate(); err == nil || !strings.Contains(err.Error(), "not 41 bytes") {
		t.Fatalf("a 41-digit id: %v", err)
	}
	if err := (server.Config{ClusterEnabled: true, ClusterNodeID: topotest.ID("n")}).Validate(); err != nil {
		t.Fatalf("a 40-hex id: %v", err)
	}
	if _, err := server.New(server.Config{ClusterEnabled: true, ClusterConfigFile: t.TempDir()}); err == nil {
		t.Fatal("a directory as the cluster config file accepted")
	}
}

// TestClusterAdminNeedsAuth: with a password, only an authenticated
// client may change the topology or the id.
func TestClusterAdminNeedsAuth(t *testing.T) {
	ctx := context.Background()
	n := startNode(t, server.Config{ClusterEnabled: true, Password: "pw"})
	for _, args := range [][]any{{"CELLCLUSTER", "CONFIG", "[]"}, {"CELLCLUSTER", "MYID", topotest.ID("x")}, {"CLUSTER", "SLOTS"}, {"READONLY"}} {
		if err := n.rdb.Do(ctx, args...).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
			t.Fatalf("%v before AUTH: %v", args, err)
		}
	}
	c := n.rdb.Conn()
	defer c.Close()
	if err := c.Do(ctx, "AUTH", "pw").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "CELLCLUSTER", "MYID", topotest.ID("x")).Err(); err != nil {
		t.Fatal(err)
	}
	if id, _ := c.Do(ctx, "CLUSTER", "MYID").Text(); id != topotest.ID("x") {
		t.Fatalf("CLUSTER MYID = %q", id)
	}
}

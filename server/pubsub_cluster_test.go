package server_test

import (
	"context"
	"fmt"
	"github.com/cellserver/cellserver/internal/topotest"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// pubsubNode starts a cluster-mode node with password pw.
func pubsubNode(t *testing.T, i int, pw string) *node {
	t.Helper()
	n := startNode(t, server.Config{ClusterEnabled: true, ClusterNodeID: topotest.ID(fmt.Sprintf("node-%d", i+1)), Password: pw})
	n.rdb.Close()
	n.rdb = redis.NewClient(&redis.Options{Addr: n.addr, Protocol: 2, MaxRetries: -1, Password: pw})
	return n
}

// clusterInfo returns one INFO cluster field.
func clusterInfo(t *testing.T, n *node, field string) string {
	t.Helper()
	s, err := n.rdb.Info(context.Background(), "cluster").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	return ""
}

func waitLinksUp(t *testing.T, want string, nodes ...*node) {
	t.Helper()
	for _, n := range nodes {
		testwait.For(t, 10*time.Second, n.addr+" pub/sub links up", func() (bool, string) {
			v := clusterInfo(t, n, "cluster_pubsub_links_up")
			return v == want, v
		})
	}
}

// receive reads n messages from ch, failing after timeout.
func receive(t *testing.T, who string, ch <-chan *redis.Message, n int) []string {
	t.Helper()
	var out []string
	deadline := time.After(20 * time.Second)
	for len(out) < n {
		select {
		case m := <-ch:
			out = append(out, m.Channel+" "+m.Payload)
		case <-deadline:
			t.Fatalf("%s: %d of %d messages", who, len(out), n)
		}
	}
	return out
}

// TestClusterPubSub: three masters and a replica of the first, with a
// password: PUBLISH on any node reaches SUBSCRIBE and PSUBSCRIBE clients
// (RESP2 and RESP3) on every node, each message once and in publishing
// order, the reply counting the local receivers; SPUBLISH reaches the
// shard's master and replica, not the other shards; the links
// authenticate, and the internal command needs AUTH.
func TestClusterPubSub(t *testing.T) {
	ctx := context.Background()
	const pw = "s3cret"
	var nodes []*node
	for i := range 4 {
		nodes = append(nodes, pubsubNode(t, i, pw))
	}
	masters, replica := nodes[:3], nodes[3]
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	push(t, topology(t, masters, ranges, map[int][]*node{0: {replica}}), nodes...)
	waitLinksUp(t, "3", nodes...)

	// A subscriber on every node: RESP2 and RESP3 alternately, and one
	// pattern subscriber on node 2.
	var subs []*redis.PubSub
	for i, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.addr, Protocol: 2 + i%2, Password: pw})
		t.Cleanup(func() { c.Close() })
		ps := c.Subscribe(ctx, "news")
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		subs = append(subs, ps)
	}
	pc := redis.NewClient(&redis.Options{Addr: nodes[1].addr, Protocol: 3, Password: pw})
	t.Cleanup(func() { pc.Close() })
	pat := pc.PSubscribe(ctx, "ne*")
	if _, err := pat.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	const perNode = 100
	var want []string
	for i := range perNode {
		for j, n := range nodes {
			msg := fmt.Sprintf("from%d-%d", j, i)
			got, err := n.rdb.Publish(ctx, "news", msg).Result()
			if err != nil {
				t.Fatal(err)
			}
			local := int64(1)
			if j == 1 {
				local = 2 // and the pattern
			}
			if got != local {
				t.Fatalf("PUBLISH on node %d = %d, want its %d local receivers", j, got, local)
			}
			want = append(want, "news "+msg)
		}
	}
	check := func(who string, got []string) {
		t.Helper()
		// Each message once; per publishing node, in publishing order.
		seen := map[string]bool{}
		last := map[string]int{}
		for _, m := range got {
			if seen[m] {
				t.Fatalf("%s: %q twice", who, m)
			}
			seen[m] = true
			var from, seq int
			fmt.Sscanf(strings.TrimPrefix(m, "news "), "from%d-%d", &from, &seq)
			if l, ok := last[fmt.Sprint(from)]; ok && seq != l+1 {
				t.Fatalf("%s: from node %d, %d after %d", who, from, seq, l)
			}
			last[fmt.Sprint(from)] = seq
		}
		for _, w := range want {
			if !seen[w] {
				t.Fatalf("%s: %q missing", who, w)
			}
		}
	}
	for i, ps := range subs {
		check(fmt.Sprintf("subscriber on node %d", i), receive(t, fmt.Sprint(i), ps.Channel(), len(want)))
	}
	check("pattern subscriber", receive(t, "pattern", pat.Channel(), len(want)))
	for i, n := range nodes {
		if v := clusterInfo(t, n, "cluster_pubsub_dropped"); v != "0" {
			t.Errorf("node %d dropped %s messages", i, v)
		}
		if v := clusterInfo(t, n, "cluster_pubsub_received"); v != fmt.Sprint(3*perNode) {
			t.Errorf("node %d received %s forwarded messages, want %d", i, v, 3*perNode)
		}
	}

	// Shard channels: {b}sh is in slot 3300, shard 0 (masters[0] and the
	// replica). SSUBSCRIBE on the replica needs no READONLY.
	const sch = "{b}sh"
	var ssubs []*redis.PubSub
	for _, n := range []*node{masters[0], replica} {
		c := redis.NewClient(&redis.Options{Addr: n.addr, Protocol: 3, Password: pw})
		t.Cleanup(func() { c.Close() })
		ps := c.SSubscribe(ctx, sch)
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatalf("SSUBSCRIBE on %s: %v", n.addr, err)
		}
		ssubs = append(ssubs, ps)
	}
	if err := masters[1].rdb.SPublish(ctx, sch, "x").Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED 3300 ") {
		t.Fatalf("SPUBLISH on another shard: %v", err)
	}
	if err := masters[1].rdb.Do(ctx, "SSUBSCRIBE", sch).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED 3300 ") {
		t.Fatalf("SSUBSCRIBE on another shard: %v", err)
	}
	for i := range 50 {
		n := masters[0]
		if i%2 == 1 {
			n = replica
		}
		if got, err := n.rdb.SPublish(ctx, sch, fmt.Sprint(i)).Result(); err != nil || got != 1 {
			t.Fatalf("SPUBLISH %d on %s = %d, %v; want its 1 local receiver", i, n.addr, got, err)
		}
	}
	for i, ps := range ssubs {
		// Each once, and in order per publishing node (even numbers on
		// the master, odd on the replica): a message published here can
		// pass one forwarded from the other node, as in Redis.
		got := receive(t, fmt.Sprint("shard subscriber ", i), ps.Channel(), 50)
		next := [2]int{0, 1}
		for _, m := range got {
			var j int
			fmt.Sscanf(strings.TrimPrefix(m, sch+" "), "%d", &j)
			if j != next[j%2] {
				t.Fatalf("shard subscriber %d: %q, want %d next from that node (all: %v)", i, m, next[j%2], got)
			}
			next[j%2] += 2
		}
	}
	for _, n := range masters[1:] {
		if v := clusterInfo(t, n, "cluster_pubsub_received"); v != fmt.Sprint(3*perNode) {
			t.Errorf("%s (another shard) received %s, want only the %d PUBLISH", n.addr, v, 3*perNode)
		}
	}

	// The internal command needs AUTH.
	raw := redis.NewClient(&redis.Options{Addr: masters[0].addr, Protocol: 2})
	t.Cleanup(func() { raw.Close() })
	if err := raw.Do(ctx, "CELLCLUSTER", "PUBLISH", "news", "forged").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("CELLCLUSTER PUBLISH without AUTH: %v", err)
	}

	// A topology without node 3 (its slots to node 2): its link closes;
	// the shard subscribers of a slot that moves are unsubscribed.
	ranges2 := [][2]int{{0, 5460}, {5461, 16383}}
	push(t, topology(t, masters[:2], ranges2, map[int][]*node{0: {replica}}), nodes[0], nodes[1], nodes[3])
	for _, n := range []*node{nodes[0], nodes[1], nodes[3]} {
		if v := clusterInfo(t, n, "cluster_pubsub_links"); v != "2" {
			t.Errorf("%s: %s links after node 3 left", n.addr, v)
		}
	}
}

// TestClusterPubSubSlotLost: a node that stops serving a slot sends its
// shard channel subscribers an sunsubscribe (Redis 7).
func TestClusterPubSubSlotLost(t *testing.T) {
	ctx := context.Background()
	nodes := clusterNodes(t, 2)
	push(t, topology(t, nodes, [][2]int{{0, 8191}, {8192, 16383}}, nil), nodes...)
	c := redis.NewClient(&redis.Options{Addr: nodes[0].addr, Protocol: 3})
	t.Cleanup(func() { c.Close() })
	ps := c.SSubscribe(ctx, "{b}sh") // slot 3300
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	push(t, topology(t, nodes, [][2]int{{0, 1000}, {1001, 16383}}, nil), nodes...)
	msg, err := ps.ReceiveTimeout(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := msg.(*redis.Subscription); !ok || s.Kind != "sunsubscribe" || s.Channel != "{b}sh" || s.Count != 0 {
		t.Fatalf("after the slot moved: %#v", msg)
	}
	if v, _ := nodes[0].rdb.Do(ctx, "PUBSUB", "SHARDNUMSUB", "{b}sh").Slice(); fmt.Sprint(v) != "[{b}sh 0]" {
		t.Fatalf("PUBSUB SHARDNUMSUB after the slot moved: %v", v)
	}
}

package acl

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/tests/internal/harness"
)

// clusterLinkRules are what a cluster node's --masteruser needs on the
// other nodes for the pub/sub bus (PING, then CELLCLUSTER PUBLISH and
// SPUBLISH) beside a replica's +psync +replconf +ping.
var clusterLinkRules = []any{"reset", "on", ">link-pw", "+psync", "+replconf", "+ping",
	"+cellcluster|publish", "+cellcluster|spublish"}

// TestClusterLinkUser: the pub/sub link between two cluster nodes
// authenticates with --masteruser/--masterauth as a user holding only
// the link's commands; while the other node refuses the password the
// link stays down (INFO cluster), the refusals are in that node's ACL LOG
// and the dialling node's log says WRONGPASS; once the password is
// accepted the link comes up and a PUBLISH on one node reaches a
// subscriber of the other.
func TestClusterLinkUser(t *testing.T) {
	harness.NeedClusterMode(t)
	testwait.SetBudget(t, 2*time.Minute)
	ctx := context.Background()
	var ns []*node
	var shards []harness.Shard
	for i := range 2 {
		id := fmt.Sprintf("%040x", 0xac100000+i)
		n := cellserver.start(t, fmt.Sprintf("node%d", i+1), "--cluster-enabled", "yes", "--cluster-node-id", id,
			"--masteruser", "link", "--masterauth", "link-pw")
		_, port, _ := net.SplitHostPort(n.addr)
		p, _ := strconv.Atoi(port)
		shards = append(shards, harness.Shard{Master: harness.Peer{ID: id, IP: "127.0.0.1", Port: p},
			SlotRanges: []harness.SlotRange{{Start: i * 8192, End: i*8192 + 8191}}})
		ns = append(ns, n)
	}
	a, b := ns[0], ns[1]
	a.do(t, append([]any{"ACL", "SETUSER", "link"}, clusterLinkRules...)...)
	// b refuses a's password at first.
	refusing := append([]any{"ACL", "SETUSER", "link", "reset", "on", ">another-pw"}, clusterLinkRules[3:]...)
	b.do(t, refusing...)
	b.do(t, "ACL", "LOG", "RESET")
	js := harness.TopologyJSON(shards)
	for _, n := range ns {
		n.do(t, "CELLCLUSTER", "CONFIG", js)
	}
	linksUp := func(n *node) string {
		m, err := harness.Info(ctx, n.addr, "cluster")
		if err != nil {
			return err.Error()
		}
		return m["cluster_pubsub_links_up"]
	}
	testwait.For(t, 30*time.Second, "b's link to a up, a's link to b refused twice (b's ACL LOG) with WRONGPASS in a's log", func() (bool, string) {
		var refused int64
		for _, e := range b.aclLog(t) {
			if e.Reason == "auth" && e.Username == "link" {
				refused += e.Count
			}
		}
		logged := strings.Contains(a.p.Logs.String(), "WRONGPASS")
		return linksUp(b) == "1" && refused >= 2 && logged, fmt.Sprintf("links up: a %s, b %s; %d refused AUTH on b; WRONGPASS in a's log: %v",
			linksUp(a), linksUp(b), refused, logged)
	})
	if up := linksUp(a); up != "0" {
		t.Fatalf("a's link to b is up (%s) with a password b refuses", up)
	}
	// The link user can do nothing but the link's commands.
	c := a.client("link", "link-pw")
	v, err := c.Do(ctx, "GET", "k").Result()
	if have := render(v, err, false); have != nopermCmd("get") {
		t.Errorf("GET as the link user: %s", have)
	}
	c.Close()

	b.do(t, "ACL", "SETUSER", "link", ">link-pw")
	testwait.For(t, 30*time.Second, "a's link to b up once b takes its password", func() (bool, string) {
		return linksUp(a) == "1", "links up on a: " + linksUp(a)
	})
	sub := b.admin.Subscribe(ctx, "news")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		t.Fatal(err)
	}
	if err := a.admin.Publish(ctx, "news", "over the link").Err(); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	msg, err := sub.ReceiveMessage(rctx)
	if err != nil || msg.Payload != "over the link" {
		t.Fatalf("b's subscriber: %v %v", msg, err)
	}
}

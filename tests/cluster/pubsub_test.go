package clustertests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/tests/internal/harness"
	"github.com/redis/go-redis/v9"
)

// Cluster pub/sub: a subscriber through each cluster client (go-redis
// ClusterClient, redis-py RedisCluster, ioredis Cluster) subscribes to
// "news" on whichever node its client picks, and to one shard channel per
// node (SSUBSCRIBE, routed by slot). PUBLISH is then sent to every node in
// turn through plain clients, so that most messages are published on a
// node other than the subscriber's, and SPUBLISH through a ClusterClient
// (to each channel's owner); every subscriber must get every message
// exactly once. The real Redis flavor proves the test itself.

const (
	pubPerNode   = 100 // PUBLISH per node
	spubPerShard = 50  // SPUBLISH per shard channel
)

func TestPubSubRedisCluster(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server not installed")
	}
	runPubSub(t, redisFlavor)
}

func TestPubSubCellserverCluster(t *testing.T) { runPubSub(t, cellserverFlavor) }

// shardChannels returns one shard channel per node, each in a slot that
// node owns.
func shardChannels(c *cluster) []string {
	out := make([]string, len(c.nodes))
	for i := 0; slicesHasEmpty(out); i++ {
		ch := fmt.Sprintf("shard:%d", i)
		if o := c.ownerOf(ch); out[o] == "" {
			out[o] = ch
		}
	}
	return out
}

func slicesHasEmpty(l []string) bool {
	for _, s := range l {
		if s == "" {
			return true
		}
	}
	return false
}

// subscriber is one cluster client's subscriptions.
type subscriber struct {
	name string
	// collect returns the messages received, "kind channel payload".
	collect func() []string
}

func runPubSub(t *testing.T, f flavor) {
	c := newCluster(t, f)
	if f.name == "cellserver" {
		for _, n := range c.nodes {
			cl := n.client()
			testwait.For(t, 10*time.Second, n.name+" pub/sub links up", func() (bool, string) {
				s, err := cl.Info(context.Background(), "cluster").Result()
				return err == nil && strings.Contains(s, fmt.Sprintf("cluster_pubsub_links_up:%d", nodes-1)), s
			})
			cl.Close()
		}
	}
	shard := shardChannels(c)
	total := nodes*pubPerNode + len(shard)*spubPerShard
	var subs []subscriber
	subs = append(subs, goRedisSubscriber(t, c, shard))
	if py := harness.Python("redis.cluster"); py != "" {
		subs = append(subs, scriptSubscriber(t, "redis-py", "testdata", py,
			append([]string{"redispy_pubsub.py", "127.0.0.1", fmt.Sprint(c.nodes[0].port), fmt.Sprint(total)}, shard...)...))
	} else {
		t.Log("redis-py: python3 with redis.cluster not found; skipped")
	}
	if dir, why := harness.NodeModules(); why == "" {
		subs = append(subs, scriptSubscriber(t, "ioredis", dir, "node",
			append([]string{"iopubsub.js", "127.0.0.1", fmt.Sprint(c.nodes[0].port), fmt.Sprint(total)}, shard...)...))
	} else {
		t.Logf("ioredis: %s; skipped", why)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var want []string
	var pubs []*redis.Client
	for _, n := range c.nodes {
		cl := n.client()
		defer cl.Close()
		pubs = append(pubs, cl)
	}
	for i := range pubPerNode {
		for j, cl := range pubs {
			msg := fmt.Sprintf("n%d-%d", j, i)
			if err := cl.Publish(ctx, "news", msg).Err(); err != nil {
				t.Fatalf("PUBLISH on %s: %v", c.nodes[j].name, err)
			}
			want = append(want, "message news "+msg)
		}
	}
	cc := clusterClient(c.seeds())
	defer cc.Close()
	for i := range spubPerShard {
		for _, ch := range shard {
			msg := fmt.Sprintf("s-%d", i)
			if err := cc.SPublish(ctx, ch, msg).Err(); err != nil {
				t.Fatalf("SPUBLISH %s through ClusterClient: %v", ch, err)
			}
			want = append(want, fmt.Sprintf("smessage %s %s", ch, msg))
		}
	}
	// SPUBLISH on a node that does not serve the channel's slot: MOVED.
	for i, ch := range shard {
		other := pubs[(i+1)%len(pubs)]
		err := other.SPublish(ctx, ch, "x").Err()
		if err == nil || !strings.HasPrefix(err.Error(), fmt.Sprintf("MOVED %d ", keyslot.Of([]byte(ch)))) {
			t.Fatalf("SPUBLISH %s on a node not serving it: %v", ch, err)
		}
	}
	sort.Strings(want)
	for _, s := range subs {
		got := s.collect()
		counts := map[string]int{}
		for _, m := range got {
			counts[m]++
		}
		var missing, dup []string
		for _, w := range want {
			if counts[w] == 0 {
				missing = append(missing, w)
			} else if counts[w] > 1 {
				dup = append(dup, w)
			}
			delete(counts, w)
		}
		if len(missing) > 0 || len(dup) > 0 || len(counts) > 0 {
			t.Errorf("%s %s: %d messages received of %d; %d missing (first %v), %d duplicated (first %v), %d unexpected",
				f.name, s.name, len(got), len(want), len(missing), first(missing), len(dup), first(dup), len(counts))
			continue
		}
		t.Logf("%s %s: %d messages (%d PUBLISH on 3 nodes, %d SPUBLISH on 3 shard channels), each once", f.name, s.name,
			len(got), nodes*pubPerNode, len(shard)*spubPerShard)
	}
	if f.name == "cellserver" {
		t.Logf("cellserver: forwarded %d, dropped %d, received %d (INFO cluster, all nodes)",
			c.infoSum(allNodes(), "cluster", "cluster_pubsub_forwarded:"), c.infoSum(allNodes(), "cluster", "cluster_pubsub_dropped:"),
			c.infoSum(allNodes(), "cluster", "cluster_pubsub_received:"))
		if d := c.infoSum(allNodes(), "cluster", "cluster_pubsub_dropped:"); d != 0 {
			t.Errorf("cellserver dropped %d messages", d)
		}
	}
}

func first(l []string) []string { return l[:min(3, len(l))] }

// goRedisSubscriber subscribes through a go-redis ClusterClient: "news"
// (on the master of its slot) and each shard channel (SSubscribe, one
// per channel: they are in different slots).
func goRedisSubscriber(t *testing.T, c *cluster, shard []string) subscriber {
	ctx := context.Background()
	cc := clusterClient(c.seeds())
	t.Cleanup(func() { cc.Close() })
	var pss []*redis.PubSub
	ps := cc.Subscribe(ctx, "news")
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatalf("go-redis SUBSCRIBE: %v", err)
	}
	pss = append(pss, ps)
	for _, ch := range shard {
		ss := cc.SSubscribe(ctx, ch)
		if _, err := ss.Receive(ctx); err != nil {
			t.Fatalf("go-redis SSUBSCRIBE %s: %v", ch, err)
		}
		pss = append(pss, ss)
	}
	return subscriber{name: "go-redis ClusterClient", collect: func() []string {
		want := nodes*pubPerNode + len(shard)*spubPerShard
		msgs := make(chan string, want)
		for _, p := range pss {
			go func() {
				for m := range p.Channel() {
					kind := "message"
					if m.Pattern == "" && strings.HasPrefix(m.Channel, "shard:") {
						kind = "smessage"
					}
					msgs <- kind + " " + m.Channel + " " + m.Payload
				}
			}()
		}
		var got []string
		timeout := time.After(30 * time.Second)
		for len(got) < want {
			select {
			case m := <-msgs:
				got = append(got, m)
			case <-timeout:
				return got
			}
		}
		// Anything more (a duplicate) within a moment.
		for {
			select {
			case m := <-msgs:
				got = append(got, m)
			case <-time.After(200 * time.Millisecond):
				return got
			}
		}
	}}
}

// scriptSubscriber starts a client script that prints {"phase":"ready"}
// once subscribed, then its messages.
func scriptSubscriber(t *testing.T, name, dir, bin string, args ...string) subscriber {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() { cancel(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	sc.Buffer(nil, 16<<20)
	var line struct {
		Phase    string   `json:"phase"`
		Messages []string `json:"messages"`
	}
	if !sc.Scan() || json.Unmarshal(sc.Bytes(), &line) != nil || line.Phase != "ready" {
		t.Fatalf("%s: not ready: %q\n%s", name, sc.Text(), stderr.String())
	}
	return subscriber{name: name, collect: func() []string {
		if !sc.Scan() || json.Unmarshal(sc.Bytes(), &line) != nil || line.Phase != "done" {
			t.Fatalf("%s: %q\n%s", name, sc.Text(), stderr.String())
		}
		return line.Messages
	}}
}

// Package clustertests runs three-node clusters on 127.0.0.1 and drives
// them with the Redis Cluster clients people use: go-redis ClusterClient
// (the v9 the project pins, and v9.17.x built from testdata/goredis917),
// redis-cli -c, redis-py RedisCluster (Debian python3-redis) and ioredis
// Cluster (tests/testdata/node). Each client runs 10,000 keys with a
// limit per key; the test checks that every key was admitted exactly its
// limit, that every key lives on exactly one node (its slot's owner), and
// counts MOVED replies on the servers (INFO errorstats) before and after.
// Then one node is killed (SIGKILL by its PID), which must fail only its
// slots, and a new topology giving its slots to the survivors is pushed,
// which clients must follow within a bounded wait.
//
// The harness is parametrized by flavor: real Redis Cluster (Debian's
// redis-server 7.0.15, created with redis-cli --cluster create), which
// proves the harness itself, and cellserver in cluster mode. Real Redis
// has no CL.THROTTLE, so its flavor counts with INCR (a call is admitted
// while the counter is at most the limit), which routes the same way: the
// key is argv[1].
package clustertests

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/tests/internal/harness"
	"github.com/redis/go-redis/v9"
)

const (
	nodes = 3
	// burst is the max_burst of every limit: each key admits burst+1
	// calls (CL.THROTTLE key 4 1 3600: one per hour after the burst).
	burst = 4
	limit = burst + 1
)

func TestMain(m *testing.M) {
	flag.Parse()
	redis.SetLogger(clientLog)
	code := m.Run()
	binproc.RemoveBinary()
	if gr917Bin != "" {
		os.RemoveAll(filepath.Dir(gr917Bin))
	}
	os.Exit(code)
}

// clientLog keeps go-redis's log lines (a dial refused by the killed node
// is logged on every attempt) out of the test output; nodeLoss reports
// how many there were.
var clientLog = &countingLogger{}

type countingLogger struct {
	mu    sync.Mutex
	n     int
	first string
}

func (l *countingLogger) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		l.first = fmt.Sprintf(format, v...)
	}
	l.n++
}

// reset forgets the lines so far.
func (l *countingLogger) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n, l.first = 0, ""
}

func (l *countingLogger) count() (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, l.first
}

// slotRange is one range of a topology and the index of its owner.
type slotRange struct {
	start, end int
	owner      int
}

// node is one cluster node.
type node struct {
	name string
	id   string // 40 hex characters
	addr string // 127.0.0.1:port
	port int
	p    *harness.Proc
}

func (n *node) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.addr, Protocol: 2, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
}

// flavor is one implementation of the cluster's nodes.
type flavor struct {
	name string
	// start launches nodes nodes, forms the cluster with topology top and
	// returns them once every node agrees on it.
	start func(t *testing.T, top []slotRange) []*node
	// push installs topology top on the nodes listed in live (the dead
	// node's slots handed to the survivors).
	push func(t *testing.T, c *cluster, top []slotRange, live []int)
	// mode names the counting command for the client scripts: "throttle"
	// (CL.THROTTLE key burst 1 3600, admitted when reply[0] is 0) or
	// "incr" (INCR key, admitted while the reply is at most limit).
	mode string
}

// cmd is one counting call on key.
func (f flavor) cmd(key string) []any {
	if f.mode == "incr" {
		return []any{"INCR", key}
	}
	return []any{"CL.THROTTLE", key, burst, 1, 3600}
}

// admitted says whether the reply to cmd admitted the call.
func (f flavor) admitted(v any) (bool, error) {
	if f.mode == "incr" {
		n, ok := v.(int64)
		if !ok {
			return false, fmt.Errorf("INCR replied %#v", v)
		}
		return n <= limit, nil
	}
	a, ok := v.([]any)
	if !ok || len(a) != 5 {
		return false, fmt.Errorf("CL.THROTTLE replied %#v", v)
	}
	d, ok := a[0].(int64)
	if !ok {
		return false, fmt.Errorf("CL.THROTTLE replied %#v", v)
	}
	return d == 0, nil
}

// cluster is a running cluster and what the test wrote to it.
type cluster struct {
	t     *testing.T
	f     flavor
	nodes []*node
	top   []slotRange
	owner [keyslot.Slots]int // index into nodes
	dir   string
	mu    sync.Mutex
	keys  map[string]bool // every key written and still expected to exist
}

// initialTopology splits the slots as redis-cli --cluster create does.
func initialTopology() []slotRange {
	return []slotRange{{0, 5460, 0}, {5461, 10922, 1}, {10923, 16383, 2}}
}

func newCluster(t *testing.T, f flavor) *cluster {
	c := &cluster{t: t, f: f, dir: t.TempDir()}
	c.setTop(initialTopology())
	c.nodes = f.start(t, c.top)
	c.checkTopology(allNodes())
	return c
}

func allNodes() []int {
	var l []int
	for i := range nodes {
		l = append(l, i)
	}
	return l
}

func (c *cluster) setTop(top []slotRange) {
	c.top = top
	for i := range c.owner {
		c.owner[i] = -1
	}
	for _, r := range top {
		for s := r.start; s <= r.end; s++ {
			c.owner[s] = r.owner
		}
	}
	for s, o := range c.owner {
		if o < 0 {
			c.t.Fatalf("topology %v leaves slot %d unowned", top, s)
		}
	}
}

func (c *cluster) seeds() []string {
	var l []string
	for _, n := range c.nodes {
		l = append(l, n.addr)
	}
	return l
}

func (c *cluster) ownerOf(key string) int { return c.owner[keyslot.Of([]byte(key))] }

// slotsReply is CLUSTER SLOTS as ranges of (start, end, addr), sorted.
func slotsReply(ctx context.Context, cl *redis.Client) (string, error) {
	rs, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	var parts []string
	for _, r := range rs {
		addr := ""
		if len(r.Nodes) > 0 {
			addr = r.Nodes[0].Addr
		}
		parts = append(parts, fmt.Sprintf("%d-%d@%s", r.Start, r.End, addr))
	}
	sortStrings(parts)
	return strings.Join(parts, " "), nil
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// wantSlots is the expected slotsReply of c.top, with adjacent ranges of
// one owner merged (as Redis does).
func (c *cluster) wantSlots() string {
	var parts []string
	start := 0
	for s := 1; s <= keyslot.Slots; s++ {
		if s == keyslot.Slots || c.owner[s] != c.owner[start] {
			parts = append(parts, fmt.Sprintf("%d-%d@%s", start, s-1, c.nodes[c.owner[start]].addr))
			start = s
		}
	}
	sortStrings(parts)
	return strings.Join(parts, " ")
}

// checkTopology waits (10 s at most) until CLUSTER SLOTS on every live
// node matches c.top and its CLUSTER INFO says cluster_state:ok (a new
// Redis Cluster answers CLUSTERDOWN for a moment after its slots agree).
func (c *cluster) checkTopology(live []int) {
	c.t.Helper()
	want := c.wantSlots()
	for _, i := range live {
		cl := c.nodes[i].client()
		testwait.For(c.t, 10*time.Second, c.nodes[i].name+" CLUSTER SLOTS = "+want, func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := slotsReply(ctx, cl)
			if err != nil {
				return false, err.Error()
			}
			if got != want {
				return false, got
			}
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil {
				return false, err.Error()
			}
			return strings.Contains(info, "cluster_state:ok"), info
		})
		cl.Close()
	}
	c.t.Logf("%s: every node's CLUSTER SLOTS is %s", c.f.name, want)
}

// moved sums errorstat_MOVED over the nodes listed.
func (c *cluster) moved(live []int) int {
	c.t.Helper()
	return c.infoSum(live, "errorstats", "errorstat_MOVED:count=")
}

// commandCalls sums the calls of bare COMMAND (what go-redis and redis-py
// send to learn key positions) over every node.
func (c *cluster) commandCalls() int {
	c.t.Helper()
	return c.infoSum(allNodes(), "commandstats", "cmdstat_command:calls=")
}

// infoSum sums the number after prefix in INFO section over the nodes
// listed.
func (c *cluster) infoSum(live []int, section, prefix string) int {
	c.t.Helper()
	total := 0
	for _, i := range live {
		cl := c.nodes[i].client()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s, err := cl.Info(ctx, section).Result()
		cancel()
		cl.Close()
		if err != nil {
			c.t.Fatalf("%s INFO %s: %v", c.nodes[i].name, section, err)
		}
		for _, line := range strings.Split(s, "\n") {
			line = strings.TrimSpace(line)
			if v, ok := strings.CutPrefix(line, prefix); ok {
				n, err := strconv.Atoi(strings.SplitN(v, ",", 2)[0])
				if err != nil {
					c.t.Fatalf("%s: %q", c.nodes[i].name, line)
				}
				total += n
			}
		}
	}
	return total
}

// wrote records keys as written (each now exists on its slot's owner).
func (c *cluster) wrote(keys []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys = map[string]bool{}
	}
	for _, k := range keys {
		c.keys[k] = true
	}
}

// lostSlots forgets the keys of the slots lost says (a dead node's).
func (c *cluster) lostSlots(lost func(slot uint16) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.keys {
		if lost(keyslot.Of([]byte(k))) {
			delete(c.keys, k)
		}
	}
}

// sampleSlots are the slots checkPlacement asks CLUSTER COUNTKEYSINSLOT
// about on every node: 64 spread over the whole range.
func sampleSlots() []int {
	var l []int
	for s := 0; s < keyslot.Slots; s += 257 {
		l = append(l, s)
	}
	return l
}

// checkPlacement checks that every key written lives on exactly one node,
// its slot's owner: on each live node, EXISTS is 1 for every key it owns
// (single-key EXISTS, pipelined, never sent to a non-owner, so it causes
// no MOVED) and DBSIZE equals their number, so the node holds no other
// key. The node's own slot accounting is cross-checked with CLUSTER
// COUNTKEYSINSLOT on 64 slots: the keys written there on the owner, 0
// elsewhere.
func (c *cluster) checkPlacement(live []int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c.mu.Lock()
	byOwner := map[int][]string{}
	perSlot := map[int]int{}
	for k := range c.keys {
		s := keyslot.Of([]byte(k))
		byOwner[c.owner[s]] = append(byOwner[c.owner[s]], k)
		perSlot[int(s)]++
	}
	c.mu.Unlock()
	var bad []string
	total := 0
	var sizes []string
	for _, i := range live {
		n := c.nodes[i]
		cl := n.client()
		missing := 0
		own := byOwner[i]
		for b := 0; b < len(own); b += 1000 {
			pipe := cl.Pipeline()
			var cmds []*redis.IntCmd
			for _, k := range own[b:min(b+1000, len(own))] {
				cmds = append(cmds, pipe.Exists(ctx, k))
			}
			if _, err := pipe.Exec(ctx); err != nil {
				c.t.Fatalf("%s EXISTS: %v", n.name, err)
			}
			for j, cmd := range cmds {
				if cmd.Val() != 1 {
					missing++
					if len(bad) < 10 {
						bad = append(bad, fmt.Sprintf("%s: key %s missing on its owner", n.name, own[b+j]))
					}
				}
			}
		}
		pipe := cl.Pipeline()
		dbsize := pipe.DBSize(ctx)
		samples := sampleSlots()
		counts := make([]*redis.IntCmd, len(samples))
		for j, s := range samples {
			counts[j] = pipe.ClusterCountKeysInSlot(ctx, s)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			c.t.Fatalf("%s DBSIZE, COUNTKEYSINSLOT: %v", n.name, err)
		}
		cl.Close()
		if int(dbsize.Val()) != len(own) {
			bad = append(bad, fmt.Sprintf("%s: DBSIZE %d, but it owns %d keys written", n.name, dbsize.Val(), len(own)))
		}
		for j, s := range samples {
			want := 0
			if c.owner[s] == i {
				want = perSlot[s]
			}
			if got := int(counts[j].Val()); got != want && len(bad) < 20 {
				bad = append(bad, fmt.Sprintf("%s: COUNTKEYSINSLOT %d = %d, want %d", n.name, s, got, want))
			}
		}
		total += len(own) - missing
		sizes = append(sizes, fmt.Sprintf("%s %d", n.name, dbsize.Val()))
	}
	if len(bad) > 0 {
		c.t.Fatalf("placement: %s", strings.Join(bad, "; "))
	}
	c.t.Logf("placement: %d keys, each on its slot's owner only (EXISTS on the owner, DBSIZE %s; COUNTKEYSINSLOT on %d slots x %d nodes)",
		total, strings.Join(sizes, ", "), len(sampleSlots()), len(live))
}

// nodeID makes a node id of 40 hex digits.
func nodeID(i int) string {
	return fmt.Sprintf("%040x", 0xce110000+i)
}

// redisFlavor: Debian's redis-server 7.0.15 with cluster-enabled yes,
// formed by redis-cli --cluster create. cluster-require-full-coverage no
// keeps the survivors serving when a node dies, as cellserver does.
var redisFlavor = flavor{
	name: "redis",
	mode: "incr",
	start: func(t *testing.T, top []slotRange) []*node {
		ports := harness.FreePorts(t, 2*nodes)
		var ns []*node
		var addrs []string
		for i := range nodes {
			dir := filepath.Join(t.TempDir(), fmt.Sprint(i))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			conf := filepath.Join(dir, "redis.conf")
			s := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsave \"\"\nappendonly no\n"+
				"cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-port %d\n"+
				"cluster-node-timeout 1000\ncluster-require-full-coverage no\n", ports[i], dir, ports[nodes+i])
			if err := os.WriteFile(conf, []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
			n := &node{name: fmt.Sprintf("node%d", i+1), port: ports[i], addr: fmt.Sprintf("127.0.0.1:%d", ports[i])}
			n.p = harness.Start(t, n.name, nil, "redis-server", conf)
			ns = append(ns, n)
			addrs = append(addrs, n.addr)
		}
		for _, n := range ns {
			harness.WaitPing(t, n.p, n.addr, 20*time.Second)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
			"--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
		}
		for _, n := range ns {
			cl := n.client()
			id, err := cl.ClusterMyID(ctx).Result()
			cl.Close()
			if err != nil {
				t.Fatal(err)
			}
			n.id = id
		}
		return ns
	},
	push: func(t *testing.T, c *cluster, top []slotRange, live []int) {
		// Real Redis: the survivors forget the dead node (its slots become
		// unassigned) and each adds the ranges top gives it.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dead := map[int]bool{}
		for i := range c.nodes {
			dead[i] = true
		}
		for _, i := range live {
			dead[i] = false
		}
		for _, i := range live {
			cl := c.nodes[i].client()
			for j, d := range dead {
				if d {
					if err := cl.ClusterForget(ctx, c.nodes[j].id).Err(); err != nil {
						t.Fatalf("%s CLUSTER FORGET: %v", c.nodes[i].name, err)
					}
				}
			}
			cl.Close()
		}
		for _, r := range top {
			if dead[r.owner] {
				t.Fatalf("topology gives slots to a dead node: %v", top)
			}
			old := c.owner[r.start]
			if dead[old] {
				cl := c.nodes[r.owner].client()
				if err := cl.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", r.start, r.end).Err(); err != nil {
					t.Fatalf("%s CLUSTER ADDSLOTSRANGE %d %d: %v", c.nodes[r.owner].name, r.start, r.end, err)
				}
				cl.Close()
			}
		}
	},
}

// topologyJSON renders top in the CELLCLUSTER CONFIG (DFLYCLUSTER CONFIG)
// format, listing only the nodes in live.
func topologyJSON(c *cluster, top []slotRange, live []int) string {
	var shards []harness.Shard
	for _, i := range live {
		n := c.nodes[i]
		s := harness.Shard{Master: harness.Peer{ID: n.id, IP: "127.0.0.1", Port: n.port}}
		for _, r := range top {
			if r.owner == i {
				s.SlotRanges = append(s.SlotRanges, harness.SlotRange{Start: r.start, End: r.end})
			}
		}
		shards = append(shards, s)
	}
	return harness.TopologyJSON(shards)
}

func pushCellserver(t *testing.T, c *cluster, top []slotRange, live []int) {
	js := topologyJSON(c, top, live)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, i := range live {
		cl := c.nodes[i].client()
		err := cl.Do(ctx, "CELLCLUSTER", "CONFIG", js).Err()
		cl.Close()
		if err != nil {
			t.Fatalf("%s CELLCLUSTER CONFIG: %v\n%s", c.nodes[i].name, err, js)
		}
	}
}

// cellserverFlavor: the binary TestMain built, with --cluster-enabled yes
// and a fixed node id; the topology is pushed with CELLCLUSTER CONFIG.
var cellserverFlavor = flavor{
	name: "cellserver",
	mode: "throttle",
	start: func(t *testing.T, top []slotRange) []*node {
		// Each node listens on a port the kernel picks (binproc reads it
		// from the startup line); the topology pushed afterwards names it.
		var ns []*node
		for i := range nodes {
			n := &node{name: fmt.Sprintf("node%d", i+1), id: nodeID(i)}
			n.p, n.addr = harness.ListenCellserver(t, n.name, "--cluster-enabled", "yes", "--cluster-node-id", n.id)
			_, port, _ := net.SplitHostPort(n.addr)
			n.port, _ = strconv.Atoi(port)
			ns = append(ns, n)
		}
		for _, n := range ns {
			harness.WaitPing(t, n.p, n.addr, 20*time.Second)
		}
		c := &cluster{t: t, nodes: ns}
		pushCellserver(t, c, top, allNodes())
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, n := range ns {
			cl := n.client()
			id, err := cl.ClusterMyID(ctx).Result()
			cl.Close()
			if err != nil || id != n.id {
				t.Fatalf("%s CLUSTER MYID = %q, %v; want %s", n.name, id, err, n.id)
			}
		}
		return ns
	},
	push: pushCellserver,
}

// keys returns n keys prefix:user:<i>.
func keys(prefix string, n int) []string {
	l := make([]string, n)
	for i := range l {
		l[i] = fmt.Sprintf("%s:user:%d", prefix, i)
	}
	return l
}

package clusterha

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/redis/go-redis/v9"
)

// The Sentinel settings of the recipe's test (as in tests/ha).
const (
	quorum         = 2
	downAfterMS    = 1000
	failoverTimeMS = 3000
)

// shardSlots are the two shards' slot ranges.
var shardSlots = [2][2]int{{0, 8191}, {8192, keyslot.Slots - 1}}

// cnode is one cellserver node in cluster mode.
type cnode struct {
	name string
	port int
	addr string
	dir  string
	conf string
	id   string
	p    *proc
}

func (n *cnode) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.addr, Protocol: 2, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
}

// do runs one command on n.
func (n *cnode) do(ctx context.Context, args ...any) (any, error) {
	c := n.client()
	defer c.Close()
	return c.Do(ctx, args...).Result()
}

// replication returns n's INFO replication fields.
func (n *cnode) replication(ctx context.Context) (map[string]string, error) {
	c := n.client()
	defer c.Close()
	s, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil, err
	}
	return infoFields(s), nil
}

// slotMaster returns the address CLUSTER SLOTS on n gives as slot's master.
func (n *cnode) slotMaster(ctx context.Context, slot int) (string, error) {
	c := n.client()
	defer c.Close()
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, s := range slots {
		if s.Start <= slot && slot <= s.End && len(s.Nodes) > 0 {
			return s.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("CLUSTER SLOTS of %s: no range holds slot %d: %v", n.name, slot, slots)
}

// topologyJSON is the CELLCLUSTER CONFIG of the two shards, masters
// first in each pair.
func topologyJSON(shards [2][2]*cnode) string {
	type node struct {
		ID   string `json:"id"`
		IP   string `json:"ip"`
		Port int    `json:"port"`
	}
	type rng struct {
		Start int `json:"start"`
		End   int `json:"end"`
	}
	type shard struct {
		SlotRanges []rng  `json:"slot_ranges"`
		Master     node   `json:"master"`
		Replicas   []node `json:"replicas"`
	}
	var out []shard
	for i, sh := range shards {
		out = append(out, shard{
			SlotRanges: []rng{{shardSlots[i][0], shardSlots[i][1]}},
			Master:     node{sh[0].id, "127.0.0.1", sh[0].port},
			Replicas:   []node{{sh[1].id, "127.0.0.1", sh[1].port}},
		})
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// TestPerShardSentinelFailover: two shards, each a primary and a replica,
// three sentinels monitoring shard-0 and shard-1 with
// scripts/cluster-reconfig.sh as client-reconfig-script, and a go-redis
// ClusterClient sending CL.THROTTLE to keys of both shards. SIGKILL of
// shard-0's primary: Sentinel promotes its replica, the script pushes the
// new topology to every node, the client's shard-0 commands succeed again
// on the promoted node, and shard-1 never sees an error.
func TestPerShardSentinelFailover(t *testing.T) {
	needSentinel(t)
	needClusterMode(t)
	start := time.Now()
	// Every wait below ends within 55 s of the start (about 6 s when all
	// goes well).
	testwait.SetBudget(t, 55*time.Second)
	ctx := context.Background()
	root := t.TempDir()
	script := scriptPath(t)
	reconfigLog := filepath.Join(root, "reconfig.log")
	ports := freePorts(t, 4+3)

	// Four nodes: shard-0 = n0 (primary), n1; shard-1 = n2 (primary), n3.
	var nodes []*cnode
	for i := 0; i < 4; i++ {
		n := &cnode{name: fmt.Sprintf("node-%d", i), port: ports[i], addr: addrOf(ports[i]),
			dir: filepath.Join(root, fmt.Sprintf("node%d", i))}
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		n.conf = filepath.Join(n.dir, "node.conf")
		conf := fmt.Sprintf("# written by tests/clusterha\naddr %s\n", n.addr)
		if i%2 == 1 {
			conf += fmt.Sprintf("replicaof 127.0.0.1 %d\n", ports[i-1])
		}
		if err := os.WriteFile(n.conf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		launch(t, n)
		nodes = append(nodes, n)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CELLSERVER_HA_LOGS") != "" {
			for _, n := range nodes {
				t.Logf("--- %s (%s) log:\n%s", n.name, n.addr, n.p.Logs)
			}
			if b, err := os.ReadFile(reconfigLog); err == nil {
				t.Logf("--- %s:\n%s", reconfigLog, b)
			}
		}
	})
	for _, n := range nodes {
		testwait.For(t, 20*time.Second, n.name+" answers CLUSTER MYID", func() (bool, string) {
			if !n.p.Alive() {
				t.Fatalf("%s exited: %v\n%s", n.name, n.p.Err, n.p.Logs)
			}
			id, err := n.do(ctx, "CLUSTER", "MYID")
			if err != nil {
				return false, err.Error()
			}
			n.id = fmt.Sprint(id)
			return len(n.id) == 40, "id " + n.id
		})
	}
	shards := [2][2]*cnode{{nodes[0], nodes[1]}, {nodes[2], nodes[3]}}
	topo := topologyJSON(shards)
	for _, n := range nodes {
		if r, err := n.do(ctx, "CELLCLUSTER", "CONFIG", topo); err != nil || r != "OK" {
			t.Fatalf("%s: CELLCLUSTER CONFIG: %v %v\n%s", n.name, r, err, topo)
		}
	}
	for _, sh := range shards {
		waitReplicaOf(t, sh[1], sh[0], 30*time.Second)
	}

	// Three sentinels, each monitoring both shards, the script configured.
	var sentinels []*redis.SentinelClient
	for i := 0; i < 3; i++ {
		port := ports[4+i]
		dir := filepath.Join(root, fmt.Sprintf("sentinel%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		conf := fmt.Sprintf("bind 127.0.0.1\nport %d\ndir %s\nsentinel announce-ip 127.0.0.1\n", port, dir)
		for s, sh := range shards {
			name := fmt.Sprintf("shard-%d", s)
			conf += fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d\nsentinel down-after-milliseconds %s %d\n"+
				"sentinel failover-timeout %s %d\nsentinel client-reconfig-script %s %s\n",
				name, sh[0].port, quorum, name, downAfterMS, name, failoverTimeMS, name, script)
		}
		path := filepath.Join(dir, "sentinel.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		var seeds []string
		for _, n := range nodes {
			seeds = append(seeds, n.addr)
		}
		p := startProc(t, fmt.Sprintf("sentinel-%d", i), []string{
			"CELLSERVER_SENTINEL=" + addrOf(port), "CELLSERVER_SEEDS=" + strings.Join(seeds, " "),
			"CELLSERVER_RECONFIG_LOG=" + reconfigLog, "TMPDIR=" + dir,
		}, "redis-sentinel", path)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("--- %s log:\n%s", p.Name, p.Logs)
			}
		})
		sc := redis.NewSentinelClient(&redis.Options{Addr: addrOf(port), Protocol: 2, MaxRetries: -1,
			DialTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
		t.Cleanup(func() { sc.Close() })
		testwait.For(t, 20*time.Second, p.Name+" answers PING", func() (bool, string) {
			if !p.Alive() {
				t.Fatalf("%s exited: %v\n%s", p.Name, p.Err, p.Logs)
			}
			err := sc.Ping(ctx).Err()
			return err == nil, fmt.Sprint(err)
		})
		sentinels = append(sentinels, sc)
	}
	sentinelDebug(t, sentinels, "tilt-trigger", 10000, "publish-period", 250)
	for s, sh := range shards {
		waitSettled(t, sentinels, fmt.Sprintf("shard-%d", s), sh[0].addr, 30*time.Second)
	}
	sentinelDebug(t, sentinels, "publish-period", 2000)
	t.Logf("setup done in %v", time.Since(start).Round(time.Millisecond))

	// The load: a ClusterClient seeded with every node, CL.THROTTLE on 50
	// keys of each shard in turn, never limited (1e6 per second).
	var keys [2][]string
	for i := 0; len(keys[0]) < 50 || len(keys[1]) < 50; i++ {
		k := "user:" + strconv.Itoa(i)
		s := 0
		if int(keyslot.Of([]byte(k))) > shardSlots[0][1] {
			s = 1
		}
		if len(keys[s]) < 50 {
			keys[s] = append(keys[s], k)
		}
	}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.addr)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, DialTimeout: 500 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: 1, DialerRetries: 1,
		// The slot map is reloaded at least every second: a dead node sends
		// no MOVED, so this is how the client learns the promoted master.
		ClusterStateReloadInterval: time.Second})
	t.Cleanup(func() { cc.Close() })
	var (
		ok, errs  [2]atomic.Int64
		mu        sync.Mutex
		lastErr   [2]string
		killedAt  atomic.Int64 // UnixNano of the kill, 0 before
		recovered atomic.Int64 // UnixNano of shard-0's first success after its first error after the kill
		sawErr    atomic.Bool
		wg        sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	// One loop per shard, so that shard-0's failures never hold up
	// shard-1's commands.
	for s := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; loadCtx.Err() == nil; i++ {
				key := keys[s][i%len(keys[s])]
				octx, cancel := context.WithTimeout(loadCtx, 3*time.Second)
				err := cc.Do(octx, "CL.THROTTLE", key, 1000000, 1000000, 1).Err()
				cancel()
				if loadCtx.Err() != nil {
					return
				}
				if err != nil {
					errs[s].Add(1)
					mu.Lock()
					lastErr[s] = err.Error()
					mu.Unlock()
					if s == 0 && killedAt.Load() != 0 {
						sawErr.Store(true)
					}
					continue
				}
				ok[s].Add(1)
				if s == 0 && sawErr.Load() && recovered.Load() == 0 {
					recovered.Store(time.Now().UnixNano())
				}
			}
		}()
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopLoad()
			wg.Wait()
		}
	}
	defer stop()
	testwait.For(t, 20*time.Second, "the client's load succeeds on both shards", func() (bool, string) {
		return ok[0].Load() >= 100 && ok[1].Load() >= 100,
			fmt.Sprintf("ok %d/%d errors %d/%d", ok[0].Load(), ok[1].Load(), errs[0].Load(), errs[1].Load())
	})
	if e0, e1 := errs[0].Load(), errs[1].Load(); e0 != 0 || e1 != 0 {
		t.Fatalf("errors before the kill: shard-0 %d, shard-1 %d (%v)", e0, e1, lastErr)
	}

	// SIGKILL shard-0's primary.
	killed := time.Now()
	killedAt.Store(killed.UnixNano())
	nodes[0].p.Kill()
	ok1AtKill := ok[1].Load()
	t.Logf("killed %s (%s) at %v", nodes[0].name, nodes[0].addr, killed.Sub(start).Round(time.Millisecond))

	testwait.For(t, 30*time.Second, "every sentinel names node-1 shard-0's master", func() (bool, string) {
		var got []string
		for _, sc := range sentinels {
			hp, err := sc.GetMasterAddrByName(ctx, "shard-0").Result()
			if err != nil || len(hp) != 2 {
				got = append(got, fmt.Sprint(err))
				continue
			}
			got = append(got, net.JoinHostPort(hp[0], hp[1]))
		}
		for _, g := range got {
			if g != nodes[1].addr {
				return false, fmt.Sprint(got)
			}
		}
		return true, ""
	})
	switched := time.Since(killed)
	// shard-1 went on while shard-0 had no master.
	if n := ok[1].Load() - ok1AtKill; n < 100 {
		t.Errorf("shard-1 served %d commands between the kill and the switch; want it to go on", n)
	}
	testwait.For(t, 20*time.Second, "every live node serves the topology with node-1 as shard-0's master", func() (bool, string) {
		for _, n := range nodes[1:] {
			m, err := n.slotMaster(ctx, 0)
			if err != nil {
				return false, n.name + ": " + err.Error()
			}
			if m != nodes[1].addr {
				return false, fmt.Sprintf("%s: slot 0 master %s", n.name, m)
			}
		}
		return true, ""
	})
	pushed := time.Since(killed)
	testwait.For(t, 20*time.Second, "the client's shard-0 commands succeed on node-1", func() (bool, string) {
		mu.Lock()
		defer mu.Unlock()
		return recovered.Load() != 0 || !sawErr.Load() && ok[0].Load() > 0,
			fmt.Sprintf("ok %d errors %d, last error %q", ok[0].Load(), errs[0].Load(), lastErr[0])
	})
	var recoveredAfter time.Duration
	if r := recovered.Load(); r != 0 {
		recoveredAfter = time.Duration(r - killed.UnixNano())
	}
	// A few more successes on both shards after the recovery.
	o0, o1 := ok[0].Load(), ok[1].Load()
	testwait.For(t, 10*time.Second, "the load goes on on both shards", func() (bool, string) {
		return ok[0].Load() >= o0+50 && ok[1].Load() >= o1+50, fmt.Sprintf("ok %d/%d", ok[0].Load(), ok[1].Load())
	})
	stop()

	// The other shard never failed, and its nodes kept their roles.
	if e := errs[1].Load(); e != 0 {
		t.Errorf("shard-1 saw %d errors (last %q); want 0", e, lastErr[1])
	}
	if m, err := nodes[2].replication(ctx); err != nil || m["role"] != "master" {
		t.Errorf("node-2: role %q (%v), want master", m["role"], err)
	}
	waitReplicaOf(t, nodes[3], nodes[2], 5*time.Second)
	if m, err := nodes[1].replication(ctx); err != nil || m["role"] != "master" {
		t.Errorf("node-1: role %q (%v), want master", m["role"], err)
	}
	for _, n := range nodes[1:] {
		if m, err := n.slotMaster(ctx, shardSlots[1][0]); err != nil || m != nodes[2].addr {
			t.Errorf("%s: slot %d master %q (%v), want node-2 %s", n.name, shardSlots[1][0], m, err, nodes[2].addr)
		}
	}
	b, err := os.ReadFile(reconfigLog)
	if err != nil {
		t.Fatal(err)
	}
	runs := strings.Count(string(b), ": start: ")
	if runs == 0 || !strings.Contains(string(b), "pushed to "+nodes[1].addr+": OK") {
		t.Errorf("the script's log shows %d runs and no push to node-1:\n%s", runs, b)
	}
	// The killed primary comes back with the topology it had (its cluster
	// config file): it still names itself shard-0's master until
	// cluster-reconfig.sh --sync pushes the current one.
	launch(t, nodes[0])
	testwait.For(t, 20*time.Second, "node-0 is back", func() (bool, string) {
		if !nodes[0].p.Alive() {
			t.Fatalf("node-0 exited: %v\n%s", nodes[0].p.Err, nodes[0].p.Logs)
		}
		m, err := nodes[0].slotMaster(ctx, 0)
		return err == nil, fmt.Sprint(m, err)
	})
	stale, _ := nodes[0].slotMaster(ctx, 0)
	t.Logf("node-0 restarted naming %s as slot 0's master (itself: %v)", stale, stale == nodes[0].addr)
	code, out := runScript(t, []string{"CELLSERVER_SENTINEL=" + addrOf(ports[4])}, "--sync", "127.0.0.1", strconv.Itoa(nodes[1].port))
	if code != 0 {
		t.Fatalf("cluster-reconfig.sh --sync: exit %d\n%s", code, out)
	}
	for _, n := range nodes {
		if m, err := n.slotMaster(ctx, 0); err != nil || m != nodes[1].addr {
			t.Errorf("after --sync, %s: slot 0 master %q (%v), want node-1 %s", n.name, m, err, nodes[1].addr)
		}
	}
	t.Logf("shard-0: %d ok, %d errors; shard-1: %d ok, %d errors; sentinels switched %v after the kill, "+
		"topology on every live node after %v, client's first shard-0 success after %v; script runs: %d; total %v",
		ok[0].Load(), errs[0].Load(), ok[1].Load(), errs[1].Load(), switched.Round(time.Millisecond),
		pushed.Round(time.Millisecond), recoveredAfter.Round(time.Millisecond), runs, time.Since(start).Round(time.Millisecond))
}

// launch starts n in cluster mode from its config file, keeping its
// topology in its directory's cluster.json.
func launch(t *testing.T, n *cnode) {
	t.Helper()
	bp, _, err := binproc.Launch(binproc.Path(), "--addr", n.addr, "--config", n.conf,
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(n.dir, "cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	n.p = fromBinproc(t, n.name, bp)
}

// waitReplicaOf waits until n reports role:slave of primary, link up.
func waitReplicaOf(t *testing.T, n, primary *cnode, timeout time.Duration) {
	t.Helper()
	testwait.For(t, timeout, fmt.Sprintf("%s replicates %s (role:slave, link up)", n.name, primary.name), func() (bool, string) {
		m, err := n.replication(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return m["role"] == "slave" && m["master_host"] == "127.0.0.1" && m["master_port"] == strconv.Itoa(primary.port) &&
				m["master_link_status"] == "up",
			fmt.Sprintf("role %s master %s:%s link %s", m["role"], m["master_host"], m["master_port"], m["master_link_status"])
	})
}

// sentinelDebug sets Sentinel's internal periods on every sentinel.
func sentinelDebug(t *testing.T, sentinels []*redis.SentinelClient, args ...any) {
	t.Helper()
	ctx := context.Background()
	for _, sc := range sentinels {
		if err := sc.Process(ctx, redis.NewStatusCmd(ctx, append([]any{"SENTINEL", "DEBUG"}, args...)...)); err != nil {
			t.Fatalf("SENTINEL DEBUG %v: %v", args, err)
		}
	}
}

// waitSettled waits until every sentinel sees name's master at addr with
// flags "master", one linked replica, two other sentinels, CKQUORUM OK.
func waitSettled(t *testing.T, sentinels []*redis.SentinelClient, name, addr string, timeout time.Duration) {
	t.Helper()
	ctx := context.Background()
	testwait.For(t, timeout, "the sentinels settle on "+name, func() (bool, string) {
		for i, sc := range sentinels {
			m, err := sc.Master(ctx, name).Result()
			if err != nil {
				return false, fmt.Sprintf("sentinel-%d: %v", i, err)
			}
			if net.JoinHostPort(m["ip"], m["port"]) != addr || m["flags"] != "master" || m["num-slaves"] != "1" ||
				m["num-other-sentinels"] != "2" {
				return false, fmt.Sprintf("sentinel-%d: %s at %s:%s flags %q slaves %s other sentinels %s",
					i, name, m["ip"], m["port"], m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
			reps, err := sc.Replicas(ctx, name).Result()
			if err != nil || len(reps) != 1 || reps[0]["flags"] != "slave" || reps[0]["master-link-status"] != "ok" {
				return false, fmt.Sprintf("sentinel-%d: replicas %v %v", i, reps, err)
			}
			if q, err := sc.CkQuorum(ctx, name).Result(); err != nil || !strings.HasPrefix(q, "OK") {
				return false, fmt.Sprintf("sentinel-%d: CKQUORUM %q %v", i, q, err)
			}
		}
		return true, ""
	})
}

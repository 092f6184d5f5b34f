package clusterha

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/tests/internal/harness"
	"github.com/redis/go-redis/v9"
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
	p    *harness.Proc
}

func (n *cnode) client() *redis.Client { return harness.Client(n.addr) }

// do runs one command on n.
func (n *cnode) do(ctx context.Context, args ...any) (any, error) {
	c := n.client()
	defer c.Close()
	return c.Do(ctx, args...).Result()
}

// replication returns n's INFO replication fields.
func (n *cnode) replication(ctx context.Context) (map[string]string, error) {
	return harness.Info(ctx, n.addr, "replication")
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
	var out []harness.Shard
	for i, sh := range shards {
		out = append(out, harness.Shard{
			SlotRanges: []harness.SlotRange{{Start: shardSlots[i][0], End: shardSlots[i][1]}},
			Master:     harness.Peer{ID: sh[0].id, IP: "127.0.0.1", Port: sh[0].port},
			Replicas:   []harness.Peer{{ID: sh[1].id, IP: "127.0.0.1", Port: sh[1].port}},
		})
	}
	return harness.TopologyJSON(out)
}

// TestPerShardSentinelFailover: two shards, each a primary and a replica,
// three sentinels monitoring shard-0 and shard-1 with
// scripts/cluster-reconfig.sh as client-reconfig-script, and a go-redis
// ClusterClient sending CL.THROTTLE to keys of both shards. SIGKILL of
// shard-0's primary: Sentinel promotes its replica, the script pushes the
// new topology to every node, the client's shard-0 commands succeed again
// on the promoted node, and shard-1 never sees an error.
func TestPerShardSentinelFailover(t *testing.T) {
	harness.NeedProcesses(t, "redis-sentinel")
	needRedisCLI(t)
	harness.NeedClusterMode(t)
	start := time.Now()
	// Every wait below ends within 55 s of the start (about 6 s when all
	// goes well).
	testwait.SetBudget(t, 55*time.Second)
	ctx := context.Background()
	root := t.TempDir()
	script := scriptPath(t)
	reconfigLog := filepath.Join(root, "reconfig.log")
	ports := harness.FreePorts(t, 4+3)

	// Four nodes: shard-0 = n0 (primary), n1; shard-1 = n2 (primary), n3.
	var nodes []*cnode
	for i := 0; i < 4; i++ {
		n := &cnode{name: fmt.Sprintf("node-%d", i), port: ports[i], addr: harness.Addr(ports[i]),
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
		harness.WaitReplicaOf(t, sh[1].name, sh[1].addr, sh[0].addr, 30*time.Second)
	}

	// Three sentinels, each monitoring both shards, the script configured.
	var seeds []string
	for _, n := range nodes {
		seeds = append(seeds, n.addr)
	}
	var monitors []harness.Monitor
	for s, sh := range shards {
		monitors = append(monitors, harness.Monitor{Name: fmt.Sprintf("shard-%d", s), Addr: sh[0].addr, Replicas: 1, ReconfigScript: script})
	}
	sentinels := harness.StartSentinels(t, root, ports[4:], func(s *harness.Sentinel) []string {
		return []string{"CELLSERVER_SENTINEL=" + s.Addr, "CELLSERVER_SEEDS=" + strings.Join(seeds, " "),
			"CELLSERVER_RECONFIG_LOG=" + reconfigLog, "TMPDIR=" + s.Dir}
	}, monitors...)
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
		got := harness.MasterAddrs(ctx, sentinels, "shard-0")
		return harness.Agreed(got) == nodes[1].addr, fmt.Sprint(got)
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
	harness.WaitReplicaOf(t, nodes[3].name, nodes[3].addr, nodes[2].addr, 5*time.Second)
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
	code, out := runScript(t, []string{"CELLSERVER_SENTINEL=" + harness.Addr(ports[4])}, "--sync", "127.0.0.1", strconv.Itoa(nodes[1].port))
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
	n.p = harness.StartCellserver(t, n.name, "--addr", n.addr, "--config", n.conf,
		"--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(n.dir, "cluster.json"))
}

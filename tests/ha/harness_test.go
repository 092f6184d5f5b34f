// Package ha runs cellserver under the real Redis Sentinel
// (Debian's redis-sentinel 7.0.15): a primary and two replicas, each a
// process started from its own config file, monitored by three sentinel
// processes, all on 127.0.0.1 at ports picked free. The tests kill the
// primary with SIGKILL, ask Sentinel for a failover, restart nodes from
// their config files, and check what Sentinel and Sentinel-aware clients
// (go-redis NewFailoverClient, redis-py Sentinel, redis-cli) see.
//
// The harness runs the same scenario with real redis-server data nodes
// (TestHarnessWithRedisServer), which shows the harness itself is right
// and gives the reference timings.
package ha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/tests/internal/harness"
	"github.com/redis/go-redis/v9"
)

// masterName is the name the sentinels monitor the primary under.
const masterName = "mymaster"

func TestMain(m *testing.M) { binproc.Main(m) }

// nodeKind launches data nodes of one implementation.
type nodeKind struct {
	name string
	// config is the config file of a node on port; replicaOf is "" or
	// "host port".
	config func(dir string, port int, replicaOf string) string
	// start launches the node from its config file.
	start func(t *testing.T, n *node) *harness.Proc
	// write is a state-changing command on key whose resulting state GET
	// reads back.
	write func(key string) []any
}

// redisKind: Debian's redis-server, no persistence, full syncs at once
// (not after the default 5 s wait for more replicas).
var redisKind = nodeKind{
	name: "redis-server",
	config: func(dir string, port int, replicaOf string) string {
		s := fmt.Sprintf("# written by tests/ha\nport %d\nbind 127.0.0.1\ndir %s\nsave \"\"\nappendonly no\nrepl-diskless-sync-delay 0\n", port, dir)
		if replicaOf != "" {
			s += "replicaof " + replicaOf + "\n"
		}
		return s
	},
	start: func(t *testing.T, n *node) *harness.Proc {
		p, err := binproc.Start(n.name, nil, "redis-server", n.conf)
		if err != nil {
			t.Fatal(err)
		}
		return p
	},
	write: func(key string) []any { return []any{"SET", key, "v-" + key} },
}

// cellserverKind: the cellserver binary TestMain built, with a data
// directory, so a restarted former primary comes back with the state it
// had (which the full resync must replace).
var cellserverKind = nodeKind{
	name: "cellserver",
	config: func(dir string, port int, replicaOf string) string {
		s := fmt.Sprintf("# written by tests/ha\naddr 127.0.0.1:%d\ndata-dir %s\n", port, filepath.Join(dir, "data"))
		if replicaOf != "" {
			s += "replicaof " + replicaOf + "\n"
		}
		return s
	},
	start: func(t *testing.T, n *node) *harness.Proc {
		// binproc puts --addr 127.0.0.1:0 first; the later flag wins.
		bp, _, err := binproc.Launch(binproc.Path(), "--addr", n.addr, "--config", n.conf)
		if err != nil {
			t.Fatal(err)
		}
		return binproc.Adopt(n.name, bp)
	},
	write: func(key string) []any { return []any{"CL.THROTTLE", key, 10, 1, 3600, 1} },
}

// node is one data node: its port and config file stay across restarts.
type node struct {
	owner *testing.T // the test whose end kills the process
	name  string
	kind  nodeKind
	port  int
	addr  string
	dir   string
	conf  string
	p     *harness.Proc
}

// start launches the node from its config file and waits until it
// answers PING (20 s at most). The process is killed when n.owner ends,
// so that a node restarted in a subtest lives on after it.
func (n *node) start(t *testing.T) {
	t.Helper()
	n.p = n.kind.start(t, n)
	n.owner.Cleanup(n.p.Kill)
	harness.WaitPing(t, n.p, n.addr, 20*time.Second)
}

func (n *node) client() *redis.Client { return harness.Client(n.addr) }

// replication returns the node's INFO replication fields.
func (n *node) replication(ctx context.Context) (map[string]string, error) {
	return harness.Info(ctx, n.addr, "replication")
}

// cluster is a primary, its replicas and the sentinels monitoring them.
type cluster struct {
	t         *testing.T
	kind      nodeKind
	nodes     []*node
	sentinels []*harness.Sentinel
}

// newCluster starts kind data nodes (nodes[0] the primary, the others
// replicas through replicaof in their config files), waits until the
// replicas are in sync, then starts three sentinels from fresh configs
// (ha.md §5) and waits until they agree: every one sees the primary with
// flags "master", two replicas, two other sentinels, and CKQUORUM OK.
func newCluster(t *testing.T, kind nodeKind, replicas int) *cluster {
	t.Helper()
	root := t.TempDir()
	ports := harness.FreePorts(t, 1+replicas+3)
	cl := &cluster{t: t, kind: kind}
	for i := 0; i <= replicas; i++ {
		n := &node{owner: t, name: fmt.Sprintf("%s-%d", kind.name, i), kind: kind, port: ports[i], addr: harness.Addr(ports[i])}
		n.dir = filepath.Join(root, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(n.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		n.conf = filepath.Join(n.dir, "node.conf")
		replicaOf := ""
		if i > 0 {
			replicaOf = fmt.Sprintf("127.0.0.1 %d", ports[0])
		}
		if err := os.WriteFile(n.conf, []byte(kind.config(n.dir, n.port, replicaOf)), 0o644); err != nil {
			t.Fatal(err)
		}
		cl.nodes = append(cl.nodes, n)
	}
	for _, n := range cl.nodes {
		n.start(t)
	}
	primary := cl.nodes[0]
	for _, n := range cl.nodes[1:] {
		cl.waitReplicaOf(n, primary, 30*time.Second)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CELLSERVER_HA_LOGS") != "" {
			cl.dumpLogs()
		}
	})
	cl.sentinels = harness.StartSentinels(t, root, ports[1+replicas:], nil,
		harness.Monitor{Name: masterName, Addr: primary.addr, Replicas: replicas})
	return cl
}

// dumpLogs logs the data nodes' logs and config files (StartSentinels
// logs the sentinels').
func (cl *cluster) dumpLogs() {
	for _, n := range cl.nodes {
		if n.p != nil {
			cl.t.Logf("--- %s (%s) log:\n%s", n.name, n.addr, n.p.Logs)
		}
		if b, err := os.ReadFile(n.conf); err == nil {
			cl.t.Logf("--- %s config file:\n%s", n.name, b)
		}
	}
}

// nodeAt returns the node listening on addr.
func (cl *cluster) nodeAt(addr string) *node {
	for _, n := range cl.nodes {
		if n.addr == addr {
			return n
		}
	}
	cl.t.Fatalf("no data node at %s", addr)
	return nil
}

// waitSwitch waits until every sentinel reports one master address other
// than old, and returns it with the time the first and the last sentinel
// switched, measured from since.
func (cl *cluster) waitSwitch(old string, since time.Time, timeout time.Duration) (addr string, first, all time.Duration) {
	cl.t.Helper()
	ctx := context.Background()
	testwait.For(cl.t, timeout, "every sentinel reports a new master", func() (bool, string) {
		addrs := harness.MasterAddrs(ctx, cl.sentinels, masterName)
		for _, a := range addrs {
			if a != "" && a != old && first == 0 {
				first = time.Since(since)
			}
		}
		addr = harness.Agreed(addrs)
		return addr != "" && addr != old, fmt.Sprint(addrs)
	})
	return addr, first, time.Since(since)
}

// waitSettled waits until every sentinel reports the same master (primary
// if not nil) with no failover in progress, numSlaves replicas of which
// okReplicas are linked, the other sentinels and CKQUORUM OK
// (harness.WaitSettled). It returns the master's node.
func (cl *cluster) waitSettled(primary *node, numSlaves, okReplicas int, timeout time.Duration) *node {
	cl.t.Helper()
	addr := ""
	if primary != nil {
		addr = primary.addr
	}
	return cl.nodeAt(harness.WaitSettled(cl.t, cl.sentinels, masterName, addr, numSlaves, okReplicas, timeout))
}

// configEpoch returns the master's config-epoch as the first sentinel
// sees it: one more for every failover.
func (cl *cluster) configEpoch() string {
	m, err := cl.sentinels[0].C.Master(context.Background(), masterName).Result()
	if err != nil {
		return err.Error()
	}
	return m["config-epoch"]
}

// waitFollowsMaster waits until n reports role:slave of the master every
// sentinel agrees on, with master_link_status:up, and returns that master.
func (cl *cluster) waitFollowsMaster(n *node, timeout time.Duration) *node {
	cl.t.Helper()
	ctx := context.Background()
	var master string
	testwait.For(cl.t, timeout, n.name+" replicates the master the sentinels agree on (role:slave, link up)", func() (bool, string) {
		addrs := harness.MasterAddrs(ctx, cl.sentinels, masterName)
		master = harness.Agreed(addrs)
		if master == "" {
			return false, fmt.Sprint("sentinels disagree: ", addrs)
		}
		m, err := n.replication(ctx)
		if err != nil {
			return false, err.Error()
		}
		host, port, _ := net.SplitHostPort(master)
		return m["role"] == "slave" && m["master_host"] == host && m["master_port"] == port && m["master_link_status"] == "up",
			fmt.Sprintf("sentinels say %s; role %s master %s:%s link %s", master, m["role"], m["master_host"], m["master_port"], m["master_link_status"])
	})
	return cl.nodeAt(master)
}

// waitReplicaOf waits until n reports role:slave of primary with
// master_link_status:up.
func (cl *cluster) waitReplicaOf(n, primary *node, timeout time.Duration) {
	cl.t.Helper()
	harness.WaitReplicaOf(cl.t, n.name, n.addr, primary.addr, timeout)
}

// waitMaster waits until n reports role:master.
func (cl *cluster) waitMaster(n *node, timeout time.Duration) {
	cl.t.Helper()
	harness.WaitMaster(cl.t, n.name, n.addr, timeout)
}

// keyValues returns every key of db 0 and its GET value.
func keyValues(ctx context.Context, c *redis.Client) (map[string]string, error) {
	var keys []string
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	out := make(map[string]string, len(keys))
	for len(keys) > 0 {
		batch := keys[:min(len(keys), 1000)]
		keys = keys[len(batch):]
		cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.Get(ctx, k)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		for i, cmd := range cmds {
			out[batch[i]] = cmd.(*redis.StringCmd).Val()
		}
	}
	return out, nil
}

// configLines returns the lines of a config file that set name.
func configLines(t *testing.T, path, name string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.EqualFold(f[0], name) {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

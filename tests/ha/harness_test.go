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
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/redis/go-redis/v9"
)

// The Sentinel settings of every test, as the issue sets them.
const (
	masterName     = "mymaster"
	quorum         = 2
	downAfterMS    = 1000
	failoverTimeMS = 3000
)

var (
	// replOnce probes, once, whether the built cellserver knows REPLICAOF.
	replOnce sync.Once
	replErr  error
)

func TestMain(m *testing.M) { binproc.Main(m) }

// needSentinel skips the test without the redis-sentinel binary (Debian
// redis-sentinel; scripts/ensure-tools.sh installs it, CI has it).
func needSentinel(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs redis-sentinel and data-node processes")
	}
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		t.Skip("redis-sentinel not installed (Debian redis-sentinel; scripts/ensure-tools.sh installs it)")
	}
}

// needCellserverReplication builds nothing more: it fails on a build
// error, and skips when the built cellserver answers REPLICAOF with
// "unknown command" (replication not in this build yet).
func needCellserverReplication(t *testing.T) {
	t.Helper()
	binproc.Binary(t)
	replOnce.Do(func() {
		p, addrc, err := binproc.Launch(binproc.Path())
		if err != nil {
			replErr = err
			return
		}
		defer p.Kill()
		var addr string
		select {
		case addr = <-addrc:
		case <-p.Exited:
			replErr = fmt.Errorf("cellserver exited before listening: %v\n%s", p.Err, p.Logs)
			return
		case <-time.After(20 * time.Second):
			replErr = fmt.Errorf("cellserver did not listen within 20s\n%s", p.Logs)
			return
		}
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			replErr = err
		}
	})
	if replErr != nil {
		if strings.HasPrefix(replErr.Error(), "ERR unknown command") {
			t.Skipf("this cellserver build has no replication (REPLICAOF: %v)", replErr)
		}
		t.Fatal(replErr)
	}
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := binproc.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

func addrOf(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// proc is a process the test started (or adopted from binproc.Launch).
type proc = binproc.Child

// startProc starts argv with its stdout and stderr kept in its log. The
// caller registers its kill with the test that owns the process (a node
// restarted in a subtest lives on after it).
func startProc(t *testing.T, name string, argv ...string) *proc {
	t.Helper()
	p, err := binproc.Start(name, nil, argv...)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// fromBinproc adopts a process binproc.Launch started.
func fromBinproc(name string, bp *binproc.Proc) *proc { return binproc.Adopt(name, bp) }

// nodeKind launches data nodes of one implementation.
type nodeKind struct {
	name string
	// config is the config file of a node on port; replicaOf is "" or
	// "host port".
	config func(dir string, port int, replicaOf string) string
	// start launches the node from its config file.
	start func(t *testing.T, n *node) *proc
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
	start: func(t *testing.T, n *node) *proc {
		return startProc(t, n.name, "redis-server", n.conf)
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
	start: func(t *testing.T, n *node) *proc {
		// binproc puts --addr 127.0.0.1:0 first; the later flag wins.
		bp, _, err := binproc.Launch(binproc.Path(), "--addr", n.addr, "--config", n.conf)
		if err != nil {
			t.Fatal(err)
		}
		return fromBinproc(n.name, bp)
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
	p     *proc
}

// start launches the node from its config file and waits until it
// answers PING (20 s at most).
func (n *node) start(t *testing.T) {
	t.Helper()
	n.p = n.kind.start(t, n)
	n.owner.Cleanup(n.p.Kill)
	c := n.client()
	defer c.Close()
	testwait.For(t, 20*time.Second, n.name+" answers PING", func() (bool, string) {
		if !n.p.Alive() {
			t.Fatalf("%s exited: %v\n%s", n.name, n.p.Err, n.p.Logs)
		}
		err := c.Ping(context.Background()).Err()
		return err == nil, fmt.Sprint(err)
	})
}

func (n *node) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: n.addr, Protocol: 2, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
}

// replication returns the node's INFO replication fields.
func (n *node) replication(ctx context.Context) (map[string]string, error) {
	c := n.client()
	defer c.Close()
	s, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m, nil
}

// sentinel is one redis-sentinel process.
type sentinel struct {
	name string
	port int
	addr string
	conf string
	p    *proc
	c    *redis.SentinelClient
}

// cluster is a primary, its replicas and the sentinels monitoring them.
type cluster struct {
	t         *testing.T
	kind      nodeKind
	nodes     []*node
	sentinels []*sentinel
}

// newCluster starts kind data nodes (nodes[0] the primary, the others
// replicas through replicaof in their config files), waits until the
// replicas are in sync, then starts three sentinels from fresh configs
// (ha.md §5) and waits until they agree: every one sees the primary with
// flags "master", two replicas, two other sentinels, and CKQUORUM OK.
func newCluster(t *testing.T, kind nodeKind, replicas int) *cluster {
	t.Helper()
	root := t.TempDir()
	ports := freePorts(t, 1+replicas+3)
	cl := &cluster{t: t, kind: kind}
	for i := 0; i <= replicas; i++ {
		n := &node{owner: t, name: fmt.Sprintf("%s-%d", kind.name, i), kind: kind, port: ports[i], addr: addrOf(ports[i])}
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
	for i := 0; i < 3; i++ {
		port := ports[1+replicas+i]
		dir := filepath.Join(root, fmt.Sprintf("sentinel%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		s := &sentinel{name: fmt.Sprintf("sentinel-%d", i), port: port, addr: addrOf(port), conf: filepath.Join(dir, "sentinel.conf")}
		conf := fmt.Sprintf("bind 127.0.0.1\nport %d\ndir %s\nsentinel announce-ip 127.0.0.1\n"+
			"sentinel monitor %s %s %d\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s %d\n",
			port, dir, masterName, strings.ReplaceAll(primary.addr, ":", " "), quorum, masterName, downAfterMS, masterName, failoverTimeMS)
		if err := os.WriteFile(s.conf, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		s.p = startProc(t, s.name, "redis-sentinel", s.conf)
		t.Cleanup(s.p.Kill)
		s.c = redis.NewSentinelClient(&redis.Options{Addr: s.addr, Protocol: 2, MaxRetries: -1,
			DialTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second})
		t.Cleanup(func() { s.c.Close() })
		cl.sentinels = append(cl.sentinels, s)
	}
	ctx := context.Background()
	for _, s := range cl.sentinels {
		testwait.For(t, 20*time.Second, s.name+" answers PING", func() (bool, string) {
			if !s.p.Alive() {
				t.Fatalf("%s exited: %v\n%s", s.name, s.p.Err, s.p.Logs)
			}
			err := s.c.Ping(ctx).Err()
			return err == nil, fmt.Sprint(err)
		})
	}
	// A CPU stall of more than 2 s (a loaded CI machine under -race) would
	// put Sentinel into TILT mode, 30 s without any action; that is all
	// tilt-trigger changes. Hellos every 250 ms instead of 2 s make the
	// sentinels find each other sooner; the default is back before any
	// test starts.
	cl.sentinelDebug("tilt-trigger", 10000, "publish-period", 250)
	cl.waitSettled(primary, replicas, replicas, 30*time.Second)
	cl.sentinelDebug("publish-period", 2000)
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CELLSERVER_HA_LOGS") != "" {
			cl.dumpLogs()
		}
	})
	return cl
}

func (cl *cluster) dumpLogs() {
	for _, n := range cl.nodes {
		if n.p != nil {
			cl.t.Logf("--- %s (%s) log:\n%s", n.name, n.addr, n.p.Logs)
		}
		if b, err := os.ReadFile(n.conf); err == nil {
			cl.t.Logf("--- %s config file:\n%s", n.name, b)
		}
	}
	for _, s := range cl.sentinels {
		cl.t.Logf("--- %s (%s) log:\n%s", s.name, s.addr, s.p.Logs)
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

// masterAddrs returns what each sentinel answers to
// SENTINEL GET-MASTER-ADDR-BY-NAME ("" for an error).
func (cl *cluster) masterAddrs(ctx context.Context) []string {
	var out []string
	for _, s := range cl.sentinels {
		hp, err := s.c.GetMasterAddrByName(ctx, masterName).Result()
		if err != nil || len(hp) != 2 {
			out = append(out, "")
			continue
		}
		out = append(out, net.JoinHostPort(hp[0], hp[1]))
	}
	return out
}

// agreed returns the address every sentinel reports, or "".
func agreed(addrs []string) string {
	for _, a := range addrs {
		if a == "" || a != addrs[0] {
			return ""
		}
	}
	return addrs[0]
}

// waitSwitch waits until every sentinel reports one master address other
// than old, and returns it with the time the first and the last sentinel
// switched, measured from since.
func (cl *cluster) waitSwitch(old string, since time.Time, timeout time.Duration) (addr string, first, all time.Duration) {
	cl.t.Helper()
	ctx := context.Background()
	testwait.For(cl.t, timeout, "every sentinel reports a new master", func() (bool, string) {
		addrs := cl.masterAddrs(ctx)
		for _, a := range addrs {
			if a != "" && a != old && first == 0 {
				first = time.Since(since)
			}
		}
		addr = agreed(addrs)
		return addr != "" && addr != old, fmt.Sprint(addrs)
	})
	return addr, first, time.Since(since)
}

// waitSettled waits until every sentinel reports the same master (primary
// if not nil) with flags exactly "master" (no failover in progress),
// numSlaves replicas of which okReplicas have flags "slave" and
// master-link-status ok, two other sentinels, and SENTINEL CKQUORUM OK.
// It returns the master's node.
func (cl *cluster) waitSettled(primary *node, numSlaves, okReplicas int, timeout time.Duration) *node {
	cl.t.Helper()
	ctx := context.Background()
	what := fmt.Sprintf("the sentinels settle with %d replicas, %d of them linked", numSlaves, okReplicas)
	if primary != nil {
		what += " on " + primary.name
	}
	var master string
	testwait.For(cl.t, timeout, what, func() (bool, string) {
		master = ""
		for _, s := range cl.sentinels {
			m, err := s.c.Master(ctx, masterName).Result()
			if err != nil {
				return false, s.name + ": SENTINEL MASTER: " + err.Error()
			}
			got := net.JoinHostPort(m["ip"], m["port"])
			if master == "" {
				master = got
			}
			if got != master || primary != nil && got != primary.addr || m["flags"] != "master" ||
				m["num-slaves"] != strconv.Itoa(numSlaves) || m["num-other-sentinels"] != "2" {
				return false, fmt.Sprintf("%s: master %s flags %q num-slaves %s num-other-sentinels %s",
					s.name, got, m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
			reps, err := s.c.Replicas(ctx, masterName).Result()
			if err != nil {
				return false, s.name + ": SENTINEL REPLICAS: " + err.Error()
			}
			ok := 0
			for _, r := range reps {
				if r["flags"] == "slave" && r["master-link-status"] == "ok" {
					ok++
				}
			}
			if ok != okReplicas {
				return false, fmt.Sprintf("%s: %d of %d replicas with flags slave and link ok: %v", s.name, ok, okReplicas, reps)
			}
			if q, err := s.c.CkQuorum(ctx, masterName).Result(); err != nil || !strings.HasPrefix(q, "OK") {
				return false, fmt.Sprintf("%s: CKQUORUM %q %v", s.name, q, err)
			}
		}
		return true, ""
	})
	return cl.nodeAt(master)
}

// configEpoch returns the master's config-epoch as the first sentinel
// sees it: one more for every failover.
func (cl *cluster) configEpoch() string {
	m, err := cl.sentinels[0].c.Master(context.Background(), masterName).Result()
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
		addrs := cl.masterAddrs(ctx)
		master = agreed(addrs)
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
	host, port, _ := net.SplitHostPort(primary.addr)
	testwait.For(cl.t, timeout, fmt.Sprintf("%s replicates %s (role:slave, link up)", n.name, primary.name), func() (bool, string) {
		m, err := n.replication(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return m["role"] == "slave" && m["master_host"] == host && m["master_port"] == port && m["master_link_status"] == "up",
			fmt.Sprintf("role %s master %s:%s link %s", m["role"], m["master_host"], m["master_port"], m["master_link_status"])
	})
}

// waitRole waits until n reports role:master.
func (cl *cluster) waitMaster(n *node, timeout time.Duration) {
	cl.t.Helper()
	testwait.For(cl.t, timeout, n.name+" reports role:master", func() (bool, string) {
		m, err := n.replication(context.Background())
		if err != nil {
			return false, err.Error()
		}
		return m["role"] == "master", "role " + m["role"]
	})
}

// sentinelDebug sets Sentinel's internal periods on every sentinel.
func (cl *cluster) sentinelDebug(args ...any) {
	cl.t.Helper()
	ctx := context.Background()
	for _, s := range cl.sentinels {
		if err := s.c.Process(ctx, redis.NewStatusCmd(ctx, append([]any{"SENTINEL", "DEBUG"}, args...)...)); err != nil {
			cl.t.Fatalf("%s: SENTINEL DEBUG %v: %v", s.name, args, err)
		}
	}
}

// sentinelAddrs lists the sentinels' addresses.
func (cl *cluster) sentinelAddrs() []string {
	var out []string
	for _, s := range cl.sentinels {
		out = append(out, s.addr)
	}
	return out
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

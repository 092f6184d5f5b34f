package partition

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/tests/internal/harness"
)

// masterName is the name the sentinels monitor the primary under.
const masterName = "mymaster"

// nodePort is every data node's port (each node has an address of its
// own); sentinelPorts are the sentinels', sharing one namespace.
const nodePort = 6379

var sentinelPorts = []int{26379, 26380, 26381}

// node is one cellserver data node in its namespace.
type node struct {
	name string
	host *harness.Host
	addr string // host.IP:nodePort
	conf string
	p    *harness.Proc
}

// cluster is a primary and two replicas, each in a network namespace of
// its own, and three sentinels in a fourth, on one Net with the test
// process (the clients) at .1.
type cluster struct {
	t         *testing.T
	net       *harness.Net
	nodes     []*node // nodes[0] is the first primary
	sentinels []*harness.Sentinel
	senHost   *harness.Host
	args      []string // the nodes' flags, after --config
}

// newCluster starts the nodes with args (the mode's flags) after their
// config file, waits until both replicas are linked, then starts the
// sentinels and waits until they agree (harness.StartSentinelsAt).
func newCluster(t *testing.T, args []string) *cluster {
	t.Helper()
	root := t.TempDir()
	nt := harness.NewNet(t, "n0", "n1", "n2", "sen")
	cl := &cluster{t: t, net: nt, senHost: nt.Host("sen"), args: args}
	for i := range 3 {
		h := nt.Host(fmt.Sprintf("n%d", i))
		n := &node{name: fmt.Sprintf("cellserver-%d", i), host: h, addr: h.Place().Addr(nodePort)}
		dir := filepath.Join(root, h.Name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		n.conf = filepath.Join(dir, "node.conf")
		var primary *node
		if i > 0 {
			primary = cl.nodes[0]
		}
		cl.start(n, primary)
		cl.nodes = append(cl.nodes, n)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("CELLSERVER_PARTITION_LOGS") != "" {
			for _, n := range cl.nodes {
				t.Logf("--- %s (%s) log:\n%s", n.name, n.addr, n.p.Logs)
			}
		}
	})
	for _, n := range cl.nodes {
		harness.WaitPing(t, n.p, n.addr, 20*time.Second)
	}
	for _, n := range cl.nodes[1:] {
		harness.WaitReplicaOf(t, n.name, n.addr, cl.nodes[0].addr, 30*time.Second)
	}
	cl.sentinels = harness.StartSentinelsAt(t, cl.senHost.Place(), root, sentinelPorts, nil,
		harness.Monitor{Name: masterName, Addr: cl.nodes[0].addr, Replicas: 2})
	return cl
}

// start writes n's config file, a replica of primary (nil: a primary),
// and starts n with the cluster's flags.
func (cl *cluster) start(n *node, primary *node) {
	cl.t.Helper()
	conf := fmt.Sprintf("# written by tests/partition\naddr %s\nprotected-mode no\nreplica-announce-ip %s\n", n.addr, n.host.IP)
	if primary != nil {
		conf += fmt.Sprintf("replicaof %s %d\n", primary.host.IP, nodePort)
	}
	if err := os.WriteFile(n.conf, []byte(conf), 0o644); err != nil {
		cl.t.Fatal(err)
	}
	argv := append([]string{binproc.Binary(cl.t), "--config", n.conf}, cl.args...)
	n.p = harness.StartAt(cl.t, n.host.Place(), n.name, nil, argv...)
}

// restart starts n again (it was killed), empty, as a replica of
// primary, and waits until it is linked.
func (cl *cluster) restart(n, primary *node) {
	cl.t.Helper()
	cl.start(n, primary)
	harness.WaitPing(cl.t, n.p, n.addr, 20*time.Second)
	harness.WaitReplicaOf(cl.t, n.name, n.addr, primary.addr, 30*time.Second)
}

// newestReplica returns the replica of primary with the largest
// acknowledged offset in primary's INFO (the first listed on a tie), and
// the offsets, for a report.
func (cl *cluster) newestReplica(primary *node) (*node, string) {
	cl.t.Helper()
	m, err := harness.Info(context.Background(), primary.addr, "replication")
	if err != nil {
		cl.t.Fatalf("INFO replication of %s: %v", primary.name, err)
	}
	var best *node
	bestOff := int64(-1)
	var offsets []string
	for i := 0; m[fmt.Sprintf("slave%d", i)] != ""; i++ {
		f := map[string]string{}
		for _, kv := range strings.Split(m[fmt.Sprintf("slave%d", i)], ",") {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		off, err := strconv.ParseInt(f["offset"], 10, 64)
		if err != nil {
			cl.t.Fatalf("%s: slave%d:%s: no offset", primary.name, i, m[fmt.Sprintf("slave%d", i)])
		}
		n := cl.nodeAt(net.JoinHostPort(f["ip"], f["port"]))
		offsets = append(offsets, fmt.Sprintf("%s %d", n.name, off))
		if off > bestOff {
			best, bestOff = n, off
		}
	}
	if best == nil {
		cl.t.Fatalf("%s lists no replica: %v", primary.name, m)
	}
	return best, fmt.Sprintf("%s, primary %s", strings.Join(offsets, ", "), m["master_repl_offset"])
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

// waitSwitch waits until every sentinel reports one master other than
// old and returns it.
func (cl *cluster) waitSwitch(old *node, timeout time.Duration) *node {
	cl.t.Helper()
	var addr string
	testwait.For(cl.t, timeout, "every sentinel reports a new master", func() (bool, string) {
		addrs := harness.MasterAddrs(context.Background(), cl.sentinels, masterName)
		addr = harness.Agreed(addrs)
		return addr != "" && addr != old.addr, fmt.Sprint(addrs)
	})
	return cl.nodeAt(addr)
}

// loadConns counts the connections of the load's clients (named
// loadClientName) on n.
func loadConns(ctx context.Context, n *node) (int, error) {
	c := harness.Client(n.addr)
	defer c.Close()
	s, err := c.ClientList(ctx).Result()
	if err != nil {
		return 0, err
	}
	return strings.Count(s, "name="+loadClientName+" "), nil
}

// waitReplicaDown waits until every sentinel flags the replica n down
// (s_down).
func (cl *cluster) waitReplicaDown(n *node, timeout time.Duration) {
	cl.t.Helper()
	ctx := context.Background()
	host, port, _ := net.SplitHostPort(n.addr)
	testwait.For(cl.t, timeout, "every sentinel flags "+n.name+" s_down", func() (bool, string) {
		for _, s := range cl.sentinels {
			reps, err := s.C.Replicas(ctx, masterName).Result()
			if err != nil {
				return false, s.Name + ": " + err.Error()
			}
			found := false
			for _, r := range reps {
				if r["ip"] == host && r["port"] == port {
					found = true
					if !strings.Contains(r["flags"], "s_down") {
						return false, fmt.Sprintf("%s: %s flags %q", s.Name, n.name, r["flags"])
					}
				}
			}
			if !found {
				return false, s.Name + " does not list " + n.name
			}
		}
		return true, ""
	})
}

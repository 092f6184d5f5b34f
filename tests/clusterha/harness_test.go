// Package clusterha runs the per-shard Sentinel recipe of the README
// ("Cluster", failover per shard) with real processes on 127.0.0.1: two
// shards of cellserver nodes in cluster mode, each a primary and a
// replica (REPLICAOF), three redis-sentinel processes (Debian
// redis-sentinel 7.0.15) monitoring shard-0 and shard-1 with
// scripts/cluster-reconfig.sh as client-reconfig-script, and a go-redis
// ClusterClient load. It also checks the script alone against fake nodes
// (script_test.go), which needs only redis-cli.
package clusterha

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/cellserver/cellserver/internal/binproc"
)

var (
	// clusterOnce probes, once, whether the built cellserver knows
	// --cluster-enabled.
	clusterOnce sync.Once
	clusterErr  error
)

// CELLSERVER_BIN: test this binary instead of building one (binproc.Path).
func TestMain(m *testing.M) { binproc.Main(m) }

// needSentinel skips the test without the redis-sentinel binary (Debian
// redis-sentinel; scripts/ensure-tools.sh installs it, CI has it).
func needSentinel(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs redis-sentinel and cellserver processes")
	}
	if _, err := exec.LookPath("redis-sentinel"); err != nil {
		t.Skip("redis-sentinel not installed (Debian redis-sentinel; scripts/ensure-tools.sh installs it)")
	}
	needRedisCLI(t)
}

// needClusterMode fails on a build error and skips, saying why, when the
// built cellserver has no --cluster-enabled option (cluster mode not in
// this build yet).
func needClusterMode(t *testing.T) {
	t.Helper()
	binproc.Binary(t)
	clusterOnce.Do(func() {
		out, err := exec.Command(binproc.Path(), "--help").CombinedOutput()
		if err != nil {
			clusterErr = fmt.Errorf("cellserver --help: %v\n%s", err, out)
			return
		}
		if !strings.Contains(string(out), "--cluster-enabled") {
			clusterErr = errNoClusterMode
		}
	})
	if clusterErr == errNoClusterMode {
		t.Skip("this cellserver build has no --cluster-enabled option (cluster mode not in this build)")
	}
	if clusterErr != nil {
		t.Fatal(clusterErr)
	}
}

var errNoClusterMode = fmt.Errorf("no --cluster-enabled")

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

// startProc starts argv with env added to the test's environment, its
// stdout and stderr kept in its log; it is killed when the test ends.
func startProc(t *testing.T, name string, env []string, argv ...string) *proc {
	t.Helper()
	p, err := binproc.Start(name, env, argv...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// fromBinproc adopts a process binproc.Launch started; it is killed when
// the test ends.
func fromBinproc(t *testing.T, name string, bp *binproc.Proc) *proc {
	p := binproc.Adopt(name, bp)
	t.Cleanup(p.Kill)
	return p
}

// infoFields parses an INFO reply into its fields.
func infoFields(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

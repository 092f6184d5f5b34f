// Package harness is what the end-to-end suites under tests/ share: it
// starts processes (cellserver, redis-server, redis-sentinel) on
// 127.0.0.1 at free ports, talks to them as a node of a multi-process
// test (INFO fields, PING and replication waits), runs Redis Sentinel,
// renders cluster topologies, and finds the client tools the suites drive
// (redis-py, the Node.js clients).
//
// The layers under it: internal/binproc builds the cellserver binary once
// per test process and runs it as a child process; internal/testwait
// waits with deadlines. Both stay in internal/ because unit tests outside
// tests/ use them too.
//
// # Processes
//
// Start and StartCellserver tie a process to the test that started it:
// it is killed (SIGKILL, by its PID) when that test ends, and its log is
// kept in memory for the failure message. A test whose process must
// outlive a subtest starts it from the parent test.
//
// # Gates
//
// NeedProcesses skips a test under -short or when a tool it runs is not
// installed (scripts/ensure-tools.sh installs them all); NeedClusterMode,
// NeedReplication and NeedFlag skip when the built cellserver lacks the
// feature; NeedNetns skips when the test cannot create network
// namespaces (not root).
//
// # Networks
//
// NewNet builds a private network of namespaces joined by a bridge, with
// partitions (Cut, Heal) by policy routing; a Place (Loopback, or a Net
// host's) says where StartAt and StartSentinelsAt run a process.
package harness

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/internal/binproc"
)

// Proc is a process a test started.
type Proc = binproc.Child

// debianPackage names the Debian package of a tool, for skip messages.
var debianPackage = map[string]string{
	"redis-server":   "redis-server",
	"redis-cli":      "redis-tools",
	"redis-sentinel": "redis-sentinel",
	"node":           "nodejs",
	"npm":            "npm",
}

// NeedTools skips t when one of tools is not on PATH.
func NeedTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			if pkg, ok := debianPackage[tool]; ok {
				t.Skipf("%s not installed (Debian %s; scripts/ensure-tools.sh installs it)", tool, pkg)
			}
			t.Skipf("%s not installed", tool)
		}
	}
}

// NeedProcesses skips t under -short (it starts processes) and when one
// of tools is not on PATH.
func NeedProcesses(t testing.TB, tools ...string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("starts processes (%s)", strings.Join(tools, ", "))
	}
	NeedTools(t, tools...)
}

// FreePorts returns n distinct loopback ports that were free a moment ago.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := binproc.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

// Addr is 127.0.0.1:port.
func Addr(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// Start starts argv, with env added to the environment, keeping its
// stdout and stderr in its log; it is killed when t ends.
func Start(t testing.TB, name string, env []string, argv ...string) *Proc {
	t.Helper()
	p, err := binproc.Start(name, env, argv...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

// StartCellserver launches the test process's cellserver binary
// (binproc.Binary) with args after --addr 127.0.0.1:0 (a later --addr
// wins); it is killed when t ends. It does not wait for the process to
// listen: wait for what the test needs (WaitPing).
func StartCellserver(t testing.TB, name string, args ...string) *Proc {
	t.Helper()
	bp, _, err := binproc.Launch(binproc.Binary(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	p := binproc.Adopt(name, bp)
	t.Cleanup(p.Kill)
	return p
}

// ListenCellserver is StartCellserver on a port the kernel picks: it
// waits (binproc.StartTimeout at most) until the process logs its address
// and returns it.
func ListenCellserver(t testing.TB, name string, args ...string) (*Proc, string) {
	t.Helper()
	bp, addr := binproc.StartServer(t, args...)
	return binproc.Adopt(name, bp), addr
}

// gate is a feature probe of the built cellserver, run once per test
// process.
type gate struct {
	once sync.Once
	skip string // why tests needing the feature skip, "" when they run
	err  error  // a probe that failed: tests needing the feature fail
}

var clusterGate, replicationGate gate

// NeedClusterMode fails t on a build error and skips it when the built
// cellserver has no cluster mode (its --help does not list
// --cluster-enabled).
func NeedClusterMode(t testing.TB) {
	t.Helper()
	binproc.Binary(t)
	g := &clusterGate
	g.once.Do(func() {
		out, err := exec.Command(binproc.Path(), "--help").CombinedOutput()
		if err != nil {
			g.err = fmt.Errorf("cellserver --help: %v\n%s", err, out)
			return
		}
		if !bytes.Contains(out, []byte("--cluster-enabled")) {
			g.skip = "this cellserver build has no cluster mode (--help does not list --cluster-enabled)"
		}
	})
	g.check(t)
}

// help is the built cellserver's --help, read once per test process.
var help struct {
	once sync.Once
	out  []byte
	err  error
}

// NeedFlag fails t on a build error and skips it when the built
// cellserver's --help does not list flag (e.g. "--sync-replicas").
func NeedFlag(t testing.TB, flag string) {
	t.Helper()
	binproc.Binary(t)
	help.once.Do(func() {
		help.out, help.err = exec.Command(binproc.Path(), "--help").CombinedOutput()
		if help.err != nil {
			help.err = fmt.Errorf("cellserver --help: %v\n%s", help.err, help.out)
		}
	})
	if help.err != nil {
		t.Fatal(help.err)
	}
	if !bytes.Contains(help.out, []byte(flag+" ")) && !bytes.Contains(help.out, []byte(flag+"\n")) &&
		!bytes.Contains(help.out, []byte(flag+"=")) {
		t.Skipf("this cellserver build has no %s (--help does not list it)", flag)
	}
}

// NeedReplication fails t on a build error and skips it when the built
// cellserver answers REPLICAOF with "unknown command" (no replication in
// this build).
func NeedReplication(t testing.TB) {
	t.Helper()
	binproc.Binary(t)
	g := &replicationGate
	g.once.Do(func() {
		p, addrc, err := binproc.Launch(binproc.Path())
		if err != nil {
			g.err = err
			return
		}
		defer p.Kill()
		var addr string
		select {
		case addr = <-addrc:
		case <-p.Exited:
			g.err = fmt.Errorf("cellserver exited before listening: %v\n%s", p.Err, p.Logs)
			return
		case <-time.After(binproc.StartTimeout):
			g.err = fmt.Errorf("cellserver did not listen within %v\n%s", binproc.StartTimeout, p.Logs)
			return
		}
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
			if strings.HasPrefix(err.Error(), "ERR unknown command") {
				g.skip = fmt.Sprintf("this cellserver build has no replication (REPLICAOF: %v)", err)
				return
			}
			g.err = err
		}
	})
	g.check(t)
}

func (g *gate) check(t testing.TB) {
	t.Helper()
	if g.err != nil {
		t.Fatal(g.err)
	}
	if g.skip != "" {
		t.Skip(g.skip)
	}
}

// Python returns a Python 3 interpreter that can import module (Debian's
// python3-redis, which scripts/ensure-tools.sh installs, lives under
// /usr/bin/python3 even when another python3 comes first in PATH), or "".
func Python(module string) string {
	var cands []string
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	cands = append(cands, "/usr/bin/python3")
	for _, p := range cands {
		if exec.Command(p, "-c", "import "+module).Run() == nil {
			return p
		}
	}
	return ""
}

// nodeDir is the Node.js project of the client scripts the suites run
// (tests/testdata/node): package.json and package-lock.json pin
// node-redis and ioredis.
func nodeDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "testdata", "node")
}

// nodeStamp, under node_modules, holds the lock file node_modules was
// installed from.
const nodeStamp = "node_modules/.cellserver-lock.json"

var nodeModules struct {
	once sync.Once
	dir  string
	why  string
}

// NodeModules returns the directory of the Node.js client scripts with
// their pinned node_modules installed, or why it cannot (node or npm
// missing, npm ci failed). npm ci runs in tests/testdata/node itself, at
// most once per lock file: the install is kept (git-ignored) with a stamp
// of the lock file it came from, and a lock on the directory makes test
// processes running at once (go test runs packages in parallel) wait for
// one another's install instead of installing over it.
func NodeModules() (dir, why string) {
	m := &nodeModules
	m.once.Do(func() { m.dir, m.why = installNodeModules(nodeDir()) })
	return m.dir, m.why
}

func installNodeModules(dir string) (string, string) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Sprintf("%s not installed (Debian %s)", tool, debianPackage[tool])
		}
	}
	lockFile, err := os.OpenFile(filepath.Join(dir, ".install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err.Error()
	}
	defer lockFile.Close()
	if err := syscall.Flock(int(lockFile.Fd()), syscall.LOCK_EX); err != nil {
		return "", "flock: " + err.Error()
	}
	defer syscall.Flock(int(lockFile.Fd()), syscall.LOCK_UN)
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return "", err.Error()
	}
	if stamp, err := os.ReadFile(filepath.Join(dir, nodeStamp)); err == nil && bytes.Equal(stamp, lock) {
		return dir, ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--prefer-offline",
		"--fetch-retries=1", "--fetch-timeout=30000")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "npm ci in tests/testdata/node failed (no registry access?): " + err.Error() + "\n" + string(out)
	}
	if err := os.WriteFile(filepath.Join(dir, nodeStamp), lock, 0o644); err != nil {
		return "", err.Error()
	}
	return dir, ""
}

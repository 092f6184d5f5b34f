package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/keyslot"
	"github.com/redis/go-redis/v9"
)

// nKeys is how many keys each client runs; each gets limit+1 calls, so
// that exactly limit are admitted and one is refused.
const (
	nKeys = 10000
	calls = limit + 1
)

// TestRedisCluster runs the scenario on a real Redis Cluster: three
// redis-server 7.0.15 nodes formed by redis-cli --cluster create. It
// proves the harness: the same checks must hold on the reference.
func TestRedisCluster(t *testing.T) {
	needRedisServer(t)
	runScenario(t, redisFlavor)
}

// TestCellserverCluster runs the scenario on three cellserver processes
// in cluster mode, the topology pushed with CELLCLUSTER CONFIG. It skips
// while the built cellserver has no --cluster-enabled.
func TestCellserverCluster(t *testing.T) {
	needCellserverCluster(t)
	runScenario(t, cellserverFlavor)
}

func runScenario(t *testing.T, f flavor) {
	start := time.Now()
	c := newCluster(t, f)
	t.Logf("%s: cluster of %d nodes up in %v", f.name, nodes, time.Since(start).Round(time.Millisecond))
	t.Run("goredis", func(t *testing.T) { c.t = t; goRedisClients(t, c, "gr") })
	t.Run("goredis917", func(t *testing.T) { c.t = t; goRedis917(t, c, "gr917") })
	t.Run("redis-cli", func(t *testing.T) { c.t = t; redisCLI(t, c, "cli") })
	t.Run("redis-py", func(t *testing.T) { c.t = t; redisPy(t, c, "py") })
	t.Run("ioredis", func(t *testing.T) { c.t = t; ioredisCluster(t, c, "io", true) })
	t.Run("ioredis-unkeyed", func(t *testing.T) { c.t = t; ioredisCluster(t, c, "iou", false) })
	t.Run("node-loss", func(t *testing.T) { c.t = t; nodeLoss(t, c) })
	t.Logf("%s: whole scenario %v", f.name, time.Since(start).Round(time.Millisecond))
}

// histogram counts keys by how many calls each had admitted.
func histogram(admitted []int32) map[int]int {
	h := map[int]int{}
	for _, n := range admitted {
		h[int(n)]++
	}
	return h
}

// checkHist fails unless every one of n keys was admitted exactly limit
// times.
func checkHist(t *testing.T, who string, h map[int]int, n int) {
	t.Helper()
	if len(h) != 1 || h[limit] != n {
		t.Errorf("%s: keys by admitted calls %v, want {%d:%d}", who, h, limit, n)
	}
}

// checkMoved fails unless the servers counted want MOVED replies during
// the client's run.
func checkMoved(t *testing.T, c *cluster, who string, before, want int) {
	t.Helper()
	got := c.moved(allNodes()) - before
	if got != want {
		t.Errorf("%s: servers sent %d MOVED replies, want %d", who, got, want)
	} else {
		t.Logf("%s: servers sent %d MOVED replies (INFO errorstats before/after)", who, got)
	}
}

func clusterClient(addrs []string) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs,
		DialTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
}

// goRedisClients: three ClusterClients of the pinned go-redis, each seeded
// with a different node, run concurrently over the same keys, two calls
// per key each (six in all): every key must be admitted exactly limit
// times, and no MOVED may be sent.
func goRedisClients(t *testing.T, c *cluster, prefix string) {
	ks := keys(prefix, nKeys)
	c.wrote(ks)
	before := c.moved(allNodes())
	admitted := make([]int32, len(ks))
	var errs atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const workers = 4
	const perClient = 2
	var wg sync.WaitGroup
	start := time.Now()
	for j := range nodes {
		cl := clusterClient([]string{c.nodes[j].addr})
		defer cl.Close()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for idx := w; idx < len(ks); idx += workers {
					i := (idx + j*len(ks)/nodes) % len(ks)
					for range perClient {
						v, err := cl.Do(ctx, c.f.cmd(ks[i])...).Result()
						if err == nil {
							var ok bool
							ok, err = c.f.admitted(v)
							if ok {
								atomic.AddInt32(&admitted[i], 1)
							}
						}
						if err != nil {
							errs.Add(1)
							firstErr.CompareAndSwap(nil, fmt.Sprintf("%s: %v", ks[i], err))
						}
					}
				}
			}()
		}
	}
	wg.Wait()
	t.Logf("go-redis %s: 3 clients x %d workers, %d calls in %v", redis.Version(), workers,
		nodes*perClient*len(ks), time.Since(start).Round(time.Millisecond))
	if n := errs.Load(); n > 0 {
		t.Fatalf("%d errors, first: %v", n, firstErr.Load())
	}
	checkHist(t, "go-redis "+redis.Version(), histogram(admitted), len(ks))
	checkMoved(t, c, "go-redis "+redis.Version(), before, 0)
	c.checkPlacement(allNodes())
}

var (
	gr917Once sync.Once
	gr917Bin  string
	gr917Err  error
)

// goRedis917 runs testdata/goredis917 (its own module pinning go-redis
// v9.17.x, whose ClusterClient never asks COMMAND) with the same load as
// goRedisClients.
func goRedis917(t *testing.T, c *cluster, prefix string) {
	gr917Once.Do(func() {
		dir, err := os.MkdirTemp("", "goredis917-")
		if err != nil {
			gr917Err = err
			return
		}
		gr917Bin = filepath.Join(dir, "goredis917")
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", gr917Bin, ".")
		cmd.Dir = "testdata/goredis917"
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
		if out, err := cmd.CombinedOutput(); err != nil {
			gr917Err = fmt.Errorf("go build testdata/goredis917 (module proxy reachable?): %v\n%s", err, out)
		}
	})
	if gr917Err != nil {
		t.Skip(gr917Err)
	}
	c.wrote(keys(prefix, nKeys))
	before := c.moved(allNodes())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, gr917Bin, "-seeds", strings.Join(c.seeds(), ","), "-prefix", prefix,
		"-n", fmt.Sprint(nKeys), "-mode", c.f.mode, "-burst", fmt.Sprint(burst), "-calls-per-client", "2").Output()
	if err != nil {
		t.Fatalf("goredis917: %v\n%s", err, stderrOf(err))
	}
	var res scriptResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("goredis917 output %q: %v", out, err)
	}
	res.check(t, "go-redis "+res.Version, nKeys)
	checkMoved(t, c, "go-redis "+res.Version, before, 0)
	c.checkPlacement(allNodes())
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// scriptResult is what the client programs print: admitted-count
// histogram (JSON object keys are strings), errors, and timing.
type scriptResult struct {
	Client, Version string
	Hist            map[string]int
	Errors          int
	FirstErrors     []string
	Calls           int
	Ms              int
	Note            string
}

func (r scriptResult) check(t *testing.T, who string, n int) {
	t.Helper()
	t.Logf("%s: %d calls in %d ms %s", who, r.Calls, r.Ms, r.Note)
	if r.Errors > 0 {
		t.Fatalf("%s: %d errors, first: %v", who, r.Errors, r.FirstErrors)
	}
	h := map[int]int{}
	for k, v := range r.Hist {
		i, err := strconv.Atoi(k)
		if err != nil {
			t.Fatalf("%s: histogram %v", who, r.Hist)
		}
		h[i] = v
	}
	checkHist(t, who, h, n)
}

// redisCLI pipes limit+1 calls per key into one redis-cli -c connected to
// node1. redis-cli has no slot map: it sends to the node it is connected
// to, follows a MOVED by reconnecting to the named node and stays there.
// So the servers must count exactly one MOVED per change of owner along
// the key sequence, which the test predicts from the topology.
func redisCLI(t *testing.T, c *cluster, prefix string) {
	ks := keys(prefix, nKeys)
	var in bytes.Buffer
	wantMoved, cur := 0, 0
	for _, k := range ks {
		for range calls {
			for i, a := range c.f.cmd(k) {
				if i > 0 {
					in.WriteByte(' ')
				}
				fmt.Fprint(&in, a)
			}
			in.WriteByte('\n')
		}
		if o := c.ownerOf(k); o != cur {
			wantMoved++
			cur = o
		}
	}
	c.wrote(ks)
	before := c.moved(allNodes())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "redis-cli", "-c", "-h", "127.0.0.1", "-p", fmt.Sprint(c.nodes[0].port))
	cmd.Stdin = &in
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("redis-cli: %v\n%s", err, stderrOf(err))
	}
	elapsed := time.Since(start)
	// redis-cli prints "-> Redirected to slot [s] located at ip:port"
	// for each MOVED it follows; count them as well.
	var lines []string
	redirects := 0
	for _, l := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if strings.HasPrefix(l, "-> Redirected to slot") {
			redirects++
			continue
		}
		lines = append(lines, l)
	}
	if redirects != wantMoved {
		t.Errorf("redis-cli followed %d redirects, want %d", redirects, wantMoved)
	}
	per := 1
	if c.f.mode == "throttle" {
		per = 5 // raw output: one line per array element
	}
	if len(lines) != len(ks)*calls*per {
		t.Fatalf("redis-cli printed %d lines, want %d; first: %q", len(lines), len(ks)*calls*per, lines[:min(len(lines), 10)])
	}
	admitted := make([]int32, len(ks))
	for i := range ks {
		for j := range calls {
			at := (i*calls + j) * per
			n, err := strconv.Atoi(lines[at])
			if err != nil {
				t.Fatalf("redis-cli line %d for %s: %q", at, ks[i], lines[at:at+per])
			}
			if (c.f.mode == "incr" && n <= limit) || (c.f.mode == "throttle" && n == 0) {
				admitted[i]++
			}
		}
	}
	t.Logf("redis-cli -c: %d calls through node1 in %v", len(ks)*calls, elapsed.Round(time.Millisecond))
	checkHist(t, "redis-cli -c", histogram(admitted), len(ks))
	checkMoved(t, c, "redis-cli -c (one per change of owner along the keys)", before, wantMoved)
	c.checkPlacement(allNodes())
}

// pythonWithRedis returns a Python 3 that can import redis (Debian's
// python3-redis lives under /usr/bin/python3 even when another python3
// comes first in PATH), or "".
func pythonWithRedis() string {
	var cands []string
	if p, err := exec.LookPath("python3"); err == nil {
		cands = append(cands, p)
	}
	cands = append(cands, "/usr/bin/python3")
	for _, p := range cands {
		if exec.Command(p, "-c", "import redis.cluster").Run() == nil {
			return p
		}
	}
	return ""
}

// redisPy runs testdata/redispy_cluster.py: RedisCluster seeded with
// node1, one call per key with execute_command, then the other calls in
// ClusterPipeline batches.
func redisPy(t *testing.T, c *cluster, prefix string) {
	py := pythonWithRedis()
	if py == "" {
		t.Skip("no python3 with redis.cluster (Debian python3-redis)")
	}
	c.wrote(keys(prefix, nKeys))
	before := c.moved(allNodes())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "testdata/redispy_cluster.py", "127.0.0.1", fmt.Sprint(c.nodes[0].port),
		prefix, fmt.Sprint(nKeys), fmt.Sprint(calls), c.f.mode, fmt.Sprint(burst)).Output()
	if err != nil {
		t.Fatalf("redispy_cluster.py: %v\n%s", err, stderrOf(err))
	}
	var res scriptResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	res.check(t, "redis-py "+res.Version, nKeys)
	checkMoved(t, c, "redis-py "+res.Version, before, 0)
	c.checkPlacement(allNodes())
}

// nodeDir is compat_test's npm project: package-lock.json pins ioredis,
// and iocluster.js lives there next to compat_test's scripts.
const nodeDir = "../compat_test/testdata/node"

var (
	nodeOnce   sync.Once
	nodeRunDir string // where to run iocluster.js
	nodeWhy    string // why the ioredis tests skip
)

// ioredisDir returns a directory holding iocluster.js and a node_modules
// installed from nodeDir's package-lock.json: nodeDir itself when
// compat_test's install there is current (its stamp file equals the lock
// file), else a temporary copy where this test runs npm ci, so that it
// never installs into a directory compat_test may be installing into.
func ioredisDir() (string, string) {
	nodeOnce.Do(func() {
		for _, tool := range []string{"node", "npm"} {
			if _, err := exec.LookPath(tool); err != nil {
				nodeWhy = tool + " not installed (Debian nodejs, npm)"
				return
			}
		}
		lock, err := os.ReadFile(filepath.Join(nodeDir, "package-lock.json"))
		if err != nil {
			nodeWhy = err.Error()
			return
		}
		stamp, err := os.ReadFile(filepath.Join(nodeDir, "node_modules", ".cellserver-lock.json"))
		if err == nil && bytes.Equal(stamp, lock) {
			nodeRunDir = nodeDir
			return
		}
		dir, err := os.MkdirTemp("", "cluster-node-")
		if err != nil {
			nodeWhy = err.Error()
			return
		}
		for _, f := range []string{"package.json", "package-lock.json", "iocluster.js"} {
			b, err := os.ReadFile(filepath.Join(nodeDir, f))
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, f), b, 0o644)
			}
			if err != nil {
				nodeWhy = err.Error()
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--prefer-offline",
			"--fetch-retries=1", "--fetch-timeout=30000")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			nodeWhy = "npm ci (compat_test/testdata/node's lock file) failed (no registry access?): " + err.Error() + "\n" + string(out)
			return
		}
		nodeRunDir = dir
	})
	return nodeRunDir, nodeWhy
}

// ioredisCluster runs iocluster.js: ioredis Cluster seeded with node1.
// keyed=true names each call's key (ioredis's command table does not list
// CL.THROTTLE, so otherwise it sends it to a random node); keyed=false
// uses cluster.call as is, and then MOVED replies are expected for a
// command ioredis does not know (reported, not asserted), while limits
// must still be exact.
func ioredisCluster(t *testing.T, c *cluster, prefix string, keyed bool) {
	dir, why := ioredisDir()
	if why != "" {
		t.Skip(why)
	}
	n := nKeys
	if !keyed {
		n = 1000 // each call may be redirected: keep it short
	}
	c.wrote(keys(prefix, n))
	before := c.moved(allNodes())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "iocluster.js", "127.0.0.1", fmt.Sprint(c.nodes[0].port),
		prefix, fmt.Sprint(n), fmt.Sprint(calls), c.f.mode, fmt.Sprint(burst), strconv.FormatBool(keyed))
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("iocluster.js: %v\n%s", err, stderrOf(err))
	}
	var res scriptResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	who := "ioredis " + res.Version
	res.check(t, who, n)
	if keyed || c.f.mode == "incr" {
		checkMoved(t, c, who, before, 0)
	} else {
		t.Logf("%s without key information: servers sent %d MOVED replies for %d calls", who, c.moved(allNodes())-before, n*calls)
	}
	c.checkPlacement(allNodes())
}

// nodeLoss kills node3 (SIGKILL by its PID): only its slots may fail.
// Then the topology giving its slots to node1 and node2 is pushed; a
// ClusterClient with a short ClusterStateReloadInterval must follow
// within a bounded wait, keys that did not move must stay at their limit,
// and keys that moved start fresh on their new owner.
func nodeLoss(t *testing.T, c *cluster) {
	const dead = 2
	live := []int{0, 1}
	ks := keys("loss", 3000)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.seeds(),
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		MaxRedirects: 1, DialerRetries: 1, MinRetryBackoff: -1, MaxRetryBackoff: -1,
		ClusterStateReloadInterval: 500 * time.Millisecond})
	defer cl.Close()
	call := func(k string) error {
		v, err := cl.Do(ctx, c.f.cmd(k)...).Result()
		if err != nil {
			return err
		}
		ok, err := c.f.admitted(v)
		if err == nil && !ok {
			err = fmt.Errorf("refused")
		}
		return err
	}
	// Every key once before the loss.
	for _, k := range ks {
		if err := call(k); err != nil {
			t.Fatalf("before the loss, %s: %v", k, err)
		}
	}
	c.wrote(ks)

	c.nodes[dead].p.kill()
	t.Logf("killed %s (pid %d)", c.nodes[dead].name, c.nodes[dead].p.cmd.Process.Pid)
	okBy, errBy := map[int]int{}, map[int]int{}
	var firstErr error
	for _, k := range ks {
		o := c.ownerOf(k)
		if err := call(k); err != nil {
			errBy[o]++
			if firstErr == nil {
				firstErr = err
			}
		} else {
			okBy[o]++
		}
	}
	logged, firstLog := clientLog.count()
	t.Logf("after the kill: admitted by owner %v, failed by owner %v (first error: %v; go-redis logged %d lines, first: %s)",
		okBy, errBy, firstErr, logged, firstLog)
	if okBy[dead] != 0 || errBy[0] != 0 || errBy[1] != 0 || okBy[0]+okBy[1]+errBy[dead] != len(ks) {
		t.Fatalf("only %s's keys may fail", c.nodes[dead].name)
	}

	// The dead node's range, split between the survivors.
	mid := (10923 + 16383) / 2
	newTop := []slotRange{{0, 5460, 0}, {5461, 10922, 1}, {10923, mid, 0}, {mid + 1, 16383, 1}}
	before := c.moved(live)
	pushed := time.Now()
	c.f.push(t, c, newTop, live)
	oldOwner := c.owner
	c.setTop(newTop)
	c.checkTopology(live)
	var pending []string
	for _, k := range ks {
		if oldOwner[keyslot.Of([]byte(k))] == dead {
			pending = append(pending, k)
		}
	}
	moved := len(pending)
	var last error
	deadline := pushed.Add(15 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		var still []string
		for _, k := range pending {
			if err := call(k); err != nil {
				still = append(still, k)
				last = err
			}
		}
		pending = still
	}
	if len(pending) > 0 {
		t.Fatalf("%d of %d moved keys still failing 15 s after the push; last error: %v", len(pending), moved, last)
	}
	t.Logf("go-redis (ClusterStateReloadInterval 500ms) served all %d moved keys %v after the push; servers sent %d MOVED",
		moved, time.Since(pushed).Round(time.Millisecond), c.moved(live)-before)

	// Keys that did not move keep their state: goredis's keys, all at
	// their limit, are refused on the survivors; those that moved start
	// fresh (soft state) and are admitted once.
	var stayedAdmitted, movedRefused int
	gk := keys("gr", nKeys)
	var fresh []string
	for _, k := range gk {
		err := call(k)
		if oldOwner[keyslot.Of([]byte(k))] == dead {
			fresh = append(fresh, k)
			if err != nil {
				movedRefused++
			}
		} else if err == nil {
			stayedAdmitted++
		} else if err.Error() != "refused" {
			t.Fatalf("%s: %v", k, err)
		}
	}
	t.Logf("after the push: %d keys that stayed admitted (want 0), %d keys that moved refused (want 0, they restart)",
		stayedAdmitted, movedRefused)
	if stayedAdmitted != 0 || movedRefused != 0 {
		t.Errorf("limits after the push: %d stayed keys admitted beyond their limit, %d moved keys refused", stayedAdmitted, movedRefused)
	}

	// redis-cli -c through node1 reaches a moved key now owned by node2.
	for _, k := range fresh {
		if c.ownerOf(k) == 1 {
			args := []string{"-c", "-h", "127.0.0.1", "-p", fmt.Sprint(c.nodes[0].port)}
			for _, a := range c.f.cmd(k) {
				args = append(args, fmt.Sprint(a))
			}
			out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
			// The second call on the key: INCR gives 2; CL.THROTTLE admits.
			first, _, _ := strings.Cut(string(out), "\n")
			want := map[string]string{"incr": "2", "throttle": "0"}[c.f.mode]
			if err != nil || first != want {
				t.Errorf("redis-cli -c %v after the push: %v %q", args, err, out)
			} else {
				t.Logf("redis-cli -c via node1, %s (node2 now): %q", k, strings.Fields(string(out)))
			}
			break
		}
	}

	// Placement on the survivors: the dead node's slots now hold exactly
	// the keys called since the push.
	c.lostSlots(func(s uint16) bool { return oldOwner[s] == dead })
	var since []string
	for _, k := range append(ks, gk...) {
		if oldOwner[keyslot.Of([]byte(k))] == dead {
			since = append(since, k)
		}
	}
	c.wrote(since)
	c.checkPlacement(live)
}

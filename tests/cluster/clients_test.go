package clustertests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/tests/internal/harness"
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
	harness.NeedProcesses(t, "redis-server", "redis-cli")
	runScenario(t, redisFlavor)
}

// TestCellserverCluster runs the scenario on three cellserver processes
// in cluster mode, the topology pushed with CELLCLUSTER CONFIG. It skips
// while the built cellserver has no --cluster-enabled.
func TestCellserverCluster(t *testing.T) {
	harness.NeedClusterMode(t)
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
	if f.mode == "throttle" {
		t.Run("client", func(t *testing.T) { c.t = t; typedClient(t, c, "tc") })
	}
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
	commands := c.commandCalls()
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
	// go-redis from v9.18 asks COMMAND (once per client while it
	// succeeds) to learn where a command's key is.
	if n := c.commandCalls() - commands; n > nodes {
		t.Errorf("go-redis %s: %d COMMAND calls for %d clients", redis.Version(), n, nodes)
	} else {
		t.Logf("go-redis %s: %d COMMAND calls for %d clients", redis.Version(), n, nodes)
	}
	c.checkPlacement(allNodes())
}

// typedClient: cellserver's own client package over a go-redis
// ClusterClient, unchanged: every key admitted exactly limit times with no
// MOVED, and a CL.ALL batch of hash-tagged keys decided on the slot's
// owner, all or nothing.
func typedClient(t *testing.T, c *cluster, prefix string) {
	ks := keys(prefix, nKeys)
	c.wrote(ks)
	before := c.moved(allNodes())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rdb := clusterClient(c.seeds())
	defer rdb.Close()
	cl := client.New(rdb)
	admitted := make([]int32, len(ks))
	for i, k := range ks {
		for range limit + 1 {
			r, err := cl.Throttle(ctx, k, burst, client.PerHour(1), 1)
			if err != nil {
				t.Fatalf("Throttle %s: %v", k, err)
			}
			if r.Allowed {
				admitted[i]++
			}
		}
	}
	checkHist(t, "client", histogram(admitted), len(ks))
	checkMoved(t, c, "client", before, 0)

	// Two limits on one user: the hash tag puts both keys in one slot.
	a, b := prefix+":{user7}:api", prefix+":{user7}:login"
	c.wrote([]string{a, b})
	for i := range 3 {
		ok, res, err := cl.All().Throttle(a, 9, client.PerHour(10), 1).Fixed(b, 2, time.Hour, 1).Do(ctx)
		if err != nil {
			t.Fatalf("CL.ALL call %d: %v", i, err)
		}
		if want := i < 2; ok != want || len(res) != 2 {
			t.Fatalf("CL.ALL call %d: allowed %v (%d results), want %v", i, ok, len(res), want)
		}
	}
	// The third call was refused by the fixed window: the GCRA key was
	// charged twice, not three times.
	r, err := cl.Peek(ctx, a, 9, client.PerHour(10))
	if err != nil || r.Remaining != 8 {
		t.Fatalf("after a refused CL.ALL: remaining %d (%v), want 8", r.Remaining, err)
	}
	// Keys of different slots are refused by the server, typed.
	_, _, err = cl.All().Fixed(prefix+":x1", 1, time.Hour, 1).Fixed(prefix+":x2", 1, time.Hour, 1).Do(ctx)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != "CROSSSLOT" {
		t.Fatalf("CL.ALL across slots: %v, want a CROSSSLOT *client.Error", err)
	}
	c.checkPlacement(allNodes())
}

var (
	gr917Once sync.Once
	gr917Bin  string
	gr917Err  error
)

// buildGoRedis917 builds testdata/goredis917 once (its own module, so
// the build needs its go-redis in the module cache or the module proxy).
func buildGoRedis917() error {
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
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly -buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			gr917Err = fmt.Errorf("go build testdata/goredis917 (module proxy reachable?): %v\n%s", err, out)
		}
	})
	return gr917Err
}

// goRedis917 runs testdata/goredis917 (its own module pinning go-redis
// v9.17.x, whose ClusterClient never asks COMMAND) with the same load as
// goRedisClients.
func goRedis917(t *testing.T, c *cluster, prefix string) {
	if err := buildGoRedis917(); err != nil {
		t.Skip(err)
	}
	c.wrote(keys(prefix, nKeys))
	before := c.moved(allNodes())
	commands := c.commandCalls()
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
	// v9.17 routes by argv[1] and never asks COMMAND.
	if n := c.commandCalls() - commands; n != 0 {
		t.Errorf("go-redis %s: %d COMMAND calls, want 0", res.Version, n)
	} else {
		t.Logf("go-redis %s: 0 COMMAND calls", res.Version)
	}
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

// redisPy runs testdata/redispy_cluster.py: RedisCluster seeded with
// node1, one call per key with execute_command, then the other calls in
// ClusterPipeline batches.
func redisPy(t *testing.T, c *cluster, prefix string) {
	py := harness.Python("redis.cluster")
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

// ioredisCluster runs iocluster.js: ioredis Cluster seeded with node1.
// keyed=true names each call's key (ioredis's command table does not list
// CL.THROTTLE, so otherwise it sends it to a random node); keyed=false
// uses cluster.call as is, and then MOVED replies are expected for a
// command ioredis does not know (reported, not asserted), while limits
// must still be exact.
func ioredisCluster(t *testing.T, c *cluster, prefix string, keyed bool) {
	dir, why := harness.NodeModules()
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
// Then the topology giving its slots to node1 and node2 is pushed and the
// clients must follow within a bounded wait: go-redis with a short
// ClusterStateReloadInterval, go-redis with the default interval told to
// ReloadState, redis-py and ioredis (each with its slot map from before
// the kill). Keys that did not move stay at their limit; keys that moved
// start fresh on their new owner (soft state).
func nodeLoss(t *testing.T, c *cluster) {
	const dead = 2
	live := []int{0, 1}
	ks := keys("loss", 3000)
	c.wrote(ks)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := func() *redis.ClusterOptions {
		return &redis.ClusterOptions{Addrs: c.seeds(),
			DialTimeout: 500 * time.Millisecond, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
			MaxRedirects: 1, DialerRetries: 1, MinRetryBackoff: -1, MaxRetryBackoff: -1}
	}
	o := opts()
	o.ClusterStateReloadInterval = 500 * time.Millisecond
	cl := redis.NewClusterClient(o)
	defer cl.Close()
	// call makes one call on k: whether it was admitted, or the error.
	call := func(cl *redis.ClusterClient, k string) (bool, error) {
		v, err := cl.Do(ctx, c.f.cmd(k)...).Result()
		if err != nil {
			return false, err
		}
		return c.f.admitted(v)
	}
	// Every key to its limit before the loss (pipelined by slot).
	for b := 0; b < len(ks); b += 500 {
		cmds, err := cl.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range ks[b:min(b+500, len(ks))] {
				for range limit {
					p.Do(ctx, c.f.cmd(k)...)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("before the loss: %v", err)
		}
		for _, cmd := range cmds {
			if ok, err := c.f.admitted(cmd.(*redis.Cmd).Val()); !ok || err != nil {
				t.Fatalf("before the loss, %v: not admitted (%v)", cmd.Args(), err)
			}
		}
	}
	// A second client with the default reload interval (60 s), told to
	// ReloadState after the push.
	cl2 := redis.NewClusterClient(opts())
	defer cl2.Close()
	if err := cl2.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	fols := startFollowers(t, c)
	for _, f := range fols {
		f.expect(t, "ready")
		c.wrote(keys(f.prefix, followKeys))
	}

	clientLog.reset()
	c.nodes[dead].p.Kill()
	t.Logf("killed %s (pid %d)", c.nodes[dead].name, c.nodes[dead].p.Cmd.Process.Pid)
	servedBy, errBy, admittedLive := map[int]int{}, map[int]int{}, 0
	var firstErr error
	for _, k := range ks {
		o := c.ownerOf(k)
		ok, err := call(cl, k)
		if err != nil {
			errBy[o]++
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		servedBy[o]++
		if ok {
			admittedLive++
		}
	}
	logged, firstLog := clientLog.count()
	t.Logf("go-redis after the kill: served by owner %v, failed by owner %v (first error: %v; go-redis logged %d lines, first: %s)",
		servedBy, errBy, firstErr, logged, firstLog)
	if servedBy[dead] != 0 || errBy[0] != 0 || errBy[1] != 0 || servedBy[0]+servedBy[1]+errBy[dead] != len(ks) {
		t.Fatalf("only %s's keys may fail", c.nodes[dead].name)
	}
	if admittedLive != 0 {
		t.Errorf("after the kill, %d keys at their limit on live nodes were admitted again", admittedLive)
	}
	for _, f := range fols {
		f.send(t, "killed "+c.nodes[dead].addr)
		r := f.expect(t, "killed")
		wantDead := 0
		for _, k := range keys(f.prefix, followKeys) {
			if c.ownerOf(k) == dead {
				wantDead++
			}
		}
		t.Logf("%s after the kill: %v live keys served, %v of %v dead-node keys tried failed (%v)", f.name,
			r["liveOk"], r["deadFailed"], r["deadTried"], r["firstDeadError"])
		if r["deadKeys"] != float64(wantDead) || r["liveOk"] != float64(followKeys-wantDead) ||
			r["deadFailed"] != r["deadTried"] || r["deadTried"] == float64(0) {
			t.Errorf("%s after the kill: %v; want %d live keys served and only the %d dead-node keys failing", f.name, r, followKeys-wantDead, wantDead)
		}
	}

	// The dead node's range, split between the survivors.
	mid := (10923 + 16383) / 2
	newTop := []slotRange{{0, 5460, 0}, {5461, 10922, 1}, {10923, mid, 0}, {mid + 1, 16383, 1}}
	before := c.moved(live)
	pushed := time.Now()
	c.f.push(t, c, newTop, live)
	oldOwner := c.owner
	wasDead := func(k string) bool { return oldOwner[keyslot.Of([]byte(k))] == dead }
	c.setTop(newTop)
	c.checkTopology(live)
	t.Logf("topology pushed and agreed by the survivors in %v", time.Since(pushed).Round(time.Millisecond))
	for _, f := range fols {
		f.send(t, "pushed")
	}
	var pending, movedKeys []string
	for _, k := range ks {
		if wasDead(k) {
			pending = append(pending, k)
		}
	}
	movedKeys = pending
	var last error
	refusedFresh := 0
	deadline := pushed.Add(15 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for len(pending) > 0 && time.Now().Before(deadline) {
		var still []string
		for _, k := range pending {
			ok, err := call(cl, k)
			if err != nil {
				still = append(still, k)
				last = err
			} else if !ok {
				refusedFresh++
			}
		}
		pending = still
		if len(pending) > 0 {
			<-tick.C
		}
	}
	if len(pending) > 0 {
		t.Fatalf("%d of %d moved keys still failing 15 s after the push; last error: %v", len(pending), len(movedKeys), last)
	}
	t.Logf("go-redis (ClusterStateReloadInterval 500ms) served all %d moved keys %v after the push",
		len(movedKeys), time.Since(pushed).Round(time.Millisecond))
	if refusedFresh != 0 {
		t.Errorf("%d moved keys refused on their new owner, want each to start fresh", refusedFresh)
	}
	// Keys that did not move keep their state: still refused.
	readmitted := 0
	for _, k := range ks {
		if !wasDead(k) {
			if ok, err := call(cl, k); err != nil {
				t.Fatalf("%s after the push: %v", k, err)
			} else if ok {
				readmitted++
			}
		}
	}
	t.Logf("after the push: %d of %d keys that did not move admitted beyond their limit (want 0)", readmitted, len(ks)-len(movedKeys))
	if readmitted != 0 {
		t.Errorf("%d keys that did not move were admitted beyond their limit after the push", readmitted)
	}

	reload := time.Now()
	cl2.ReloadState(ctx) // asynchronous in go-redis
	k2 := movedKeys[0]
	testwait.For(t, 10*time.Second, "go-redis to reload after ReloadState", func() (bool, string) {
		_, err := call(cl2, k2)
		return err == nil, fmt.Sprint(err)
	})
	t.Logf("go-redis (default reload interval) served a moved key %v after ReloadState", time.Since(reload).Round(time.Millisecond))
	failed2 := 0
	for _, k := range keys("loss2", 1000) {
		if _, err := call(cl2, k); err != nil {
			failed2++
			last = err
		}
	}
	if failed2 > 0 {
		t.Errorf("go-redis after ReloadState: %d of 1000 new keys failed; last: %v", failed2, last)
	}
	for _, f := range fols {
		r := f.expect(t, "followed")
		t.Logf("%s: served all %v moved keys %v ms after the push (%v errors on the way, last: %s)",
			f.name, r["served"], r["ms"], r["errors"], r["lastError"])
		if r["pending"] != float64(0) {
			t.Errorf("%s did not follow the push within 15 s: %v", f.name, r)
		}
		f.wait(t)
	}
	t.Logf("servers sent %d MOVED since the push", c.moved(live)-before)

	// redis-cli -c through node1 reaches a moved key now owned by node2.
	for _, k := range movedKeys {
		if c.ownerOf(k) == 1 {
			args := []string{"-c", "-h", "127.0.0.1", "-p", fmt.Sprint(c.nodes[0].port)}
			for _, a := range c.f.cmd(k) {
				args = append(args, fmt.Sprint(a))
			}
			out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
			// The key's second call since it moved: INCR gives 2;
			// CL.THROTTLE admits it.
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
	all := ks
	for _, f := range fols {
		all = append(all, keys(f.prefix, followKeys)...)
	}
	for _, k := range all {
		if wasDead(k) {
			since = append(since, k)
		}
	}
	c.wrote(since)
	c.wrote(keys("loss2", 1000)) // written after the push
	c.checkPlacement(live)
}

// followKeys is how many keys each follower (redis-py, ioredis) runs in
// nodeLoss.
const followKeys = 1000

// follower is a client script in follow mode: it answers JSON lines
// ("phase" ready, killed, followed) to lines the test writes on its stdin.
type follower struct {
	name, prefix string
	cmd          *exec.Cmd
	in           io.WriteCloser
	lines        chan string
	stderr       *bytes.Buffer
}

// startFollowers starts redis-py, go-redis v9.17 and ioredis in follow
// mode (those that are installed or build), redis-py and ioredis seeded
// with node1, go-redis with every node.
func startFollowers(t *testing.T, c *cluster) []*follower {
	var fs []*follower
	args := func(prefix string) []string {
		return []string{"127.0.0.1", fmt.Sprint(c.nodes[0].port), prefix, fmt.Sprint(followKeys), fmt.Sprint(calls), c.f.mode, fmt.Sprint(burst)}
	}
	if py := harness.Python("redis.cluster"); py != "" {
		fs = append(fs, startFollower(t, "redis-py", "lpy", "testdata", py, append(append([]string{"redispy_cluster.py"}, args("lpy")...), "follow")...))
	} else {
		t.Log("redis-py follower skipped: no python3 with redis.cluster")
	}
	if err := buildGoRedis917(); err == nil {
		fs = append(fs, startFollower(t, "go-redis v9.17 (ReloadState)", "l917", ".", gr917Bin, "-seeds", strings.Join(c.seeds(), ","),
			"-prefix", "l917", "-n", fmt.Sprint(followKeys), "-mode", c.f.mode, "-burst", fmt.Sprint(burst), "-follow"))
	} else {
		t.Log("go-redis v9.17 follower skipped: ", err)
	}
	if dir, why := harness.NodeModules(); why == "" {
		fs = append(fs, startFollower(t, "ioredis", "lio", dir, "node", append(append([]string{"iocluster.js"}, args("lio")...), "true", "follow")...))
	} else {
		t.Log("ioredis follower skipped: " + why)
	}
	return fs
}

func startFollower(t *testing.T, name, prefix, dir, bin string, args ...string) *follower {
	f := &follower{name: name, prefix: prefix, lines: make(chan string, 8), stderr: &bytes.Buffer{}}
	f.cmd = exec.Command(bin, args...)
	f.cmd.Dir = dir
	f.cmd.Stderr = f.stderr
	var err error
	if f.in, err = f.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	t.Cleanup(func() {
		f.in.Close()
		_ = f.cmd.Process.Kill()
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f.lines <- sc.Text()
		}
		close(f.lines)
	}()
	return f
}

func (f *follower) send(t *testing.T, line string) {
	if _, err := io.WriteString(f.in, line+"\n"); err != nil {
		t.Fatalf("%s: %v", f.name, err)
	}
}

// expect reads the follower's next line (30 s at most), which must be
// phase's JSON object.
func (f *follower) expect(t *testing.T, phase string) map[string]any {
	t.Helper()
	select {
	case line, ok := <-f.lines:
		var r map[string]any
		if !ok || json.Unmarshal([]byte(line), &r) != nil || r["phase"] != phase {
			_ = f.cmd.Process.Kill()
			_ = f.cmd.Wait()
			t.Fatalf("%s: want phase %s, got %q (exited: %v)\n%s", f.name, phase, line, !ok, f.stderr)
		}
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no %s line within 30 s\n%s", f.name, phase, f.stderr)
	}
	return nil
}

// wait waits for the follower to exit on its own (10 s at most).
func (f *follower) wait(t *testing.T) {
	t.Helper()
	f.in.Close()
	done := make(chan error, 1)
	go func() { done <- f.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("%s: %v\n%s", f.name, err, f.stderr)
		}
	case <-time.After(10 * time.Second):
		_ = f.cmd.Process.Kill()
		t.Errorf("%s did not exit", f.name)
	}
}

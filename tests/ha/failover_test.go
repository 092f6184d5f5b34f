package ha

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/tests/internal/harness"
)

// TestSentinelFailover is the evidence with cellserver data nodes:
// a primary and two replicas under three real sentinels (quorum 2,
// down-after-milliseconds 1000, failover-timeout 3000). See runScenario.
// It skips while the built cellserver has no REPLICAOF.
func TestSentinelFailover(t *testing.T) {
	harness.NeedProcesses(t, "redis-sentinel")
	harness.NeedReplication(t)
	runScenario(t, cellserverKind)
}

// TestHarnessWithRedisServer runs the same scenario with Debian's
// redis-server as the data nodes: it proves the harness (and gives the
// reference timings) independently of cellserver.
// It takes about 15 s; CELLSERVER_HA_REDIS=0 skips it.
func TestHarnessWithRedisServer(t *testing.T) {
	if os.Getenv("CELLSERVER_HA_REDIS") == "0" {
		t.Skip("CELLSERVER_HA_REDIS=0")
	}
	harness.NeedProcesses(t, "redis-sentinel", "redis-server")
	runScenario(t, redisKind)
}

// ack is a state the client saw acknowledged by WAIT 1: the key it wrote
// and the state GET read back in the same pipeline, on the same
// connection, just before WAIT.
type ack struct {
	key, state string
	at         time.Time
}

// load is a steady write load through a go-redis FailoverClient: workers
// goroutines each write distinct keys in pipelines "write; GET key;
// WAIT 1 1000".
type load struct {
	mu      sync.Mutex // guards the fields below
	acked   []ack
	oks     []okOp // every successful pipeline
	errs    int
	lastErr error

	cancel context.CancelFunc
	done   chan struct{}
}

type okOp struct{ start, end time.Time }

func startLoad(kind nodeKind, fc *redis.Client, workers int) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				key := fmt.Sprintf("ha:%d:%d", g, i)
				var get *redis.StringCmd
				var wait *redis.Cmd
				start := time.Now()
				_, err := fc.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.Do(ctx, kind.write(key)...)
					get = p.Get(ctx, key)
					wait = p.Do(ctx, "WAIT", 1, 1000)
					return nil
				})
				end := time.Now()
				l.mu.Lock()
				if err != nil {
					l.errs++
					l.lastErr = err
				} else {
					l.oks = append(l.oks, okOp{start, end})
					if n, _ := wait.Int64(); n >= 1 {
						l.acked = append(l.acked, ack{key: key, state: get.Val(), at: end})
					}
				}
				l.mu.Unlock()
				if err != nil {
					// Do not spin while no primary answers: go-redis has
					// already retried with its backoff.
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
			}
		}()
	}
	go func() {
		wg.Wait()
		close(l.done)
	}()
	return l
}

// counts returns the successful pipelines and acknowledged states so far
// that started (acknowledged: ended) after since.
func (l *load) counts(since time.Time) (oks, acked int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, o := range l.oks {
		if o.start.After(since) {
			oks++
		}
	}
	for _, a := range l.acked {
		if a.at.After(since) {
			acked++
		}
	}
	return oks, acked
}

// firstOKAfter returns the end of the first successful pipeline that
// started after since.
func (l *load) firstOKAfter(since time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, o := range l.oks {
		if o.start.After(since) && (first.IsZero() || o.end.Before(first)) {
			first = o.end
		}
	}
	return first, !first.IsZero()
}

func (l *load) stop(t *testing.T) {
	t.Helper()
	l.cancel()
	select {
	case <-l.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the load's workers did not stop within 30s")
	}
}

// runScenario, on a fresh cluster of kind data nodes:
//
//  1. kill9: under a steady write load from go-redis NewFailoverClient,
//     with each write's state acknowledged by WAIT 1, the primary is
//     killed with SIGKILL. The sentinels agree on a promoted replica; the
//     client's writes succeed again; every acknowledged state is on the
//     new primary; the other replica follows it and refuses writes with
//     READONLY; the new primary's config file lost its replicaof line
//     (CONFIG REWRITE in Sentinel's promotion transaction).
//  2. rejoin: the killed primary, restarted from its config file (as a
//     primary), is turned by Sentinel into a replica of the new primary,
//     with the new primary's data exactly, and replicaof in its config file.
//  3. redis-py and redis-cli: Sentinel-aware redis-py and plain redis-cli
//     find and use the new primary; a replica refuses their writes.
//  4. forced: SENTINEL FAILOVER with the primary alive swaps the roles.
func runScenario(t *testing.T, kind nodeKind) {
	ctx := context.Background()
	began := time.Now()
	cl := newCluster(t, kind, 2)
	t.Logf("%s: primary and 2 replicas in sync, 3 sentinels agreed, in %v", kind.name, time.Since(began).Round(time.Millisecond))
	primary := cl.nodes[0]

	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    masterName,
		SentinelAddrs: harness.Addrs(cl.sentinels),
		DialTimeout:   time.Second,
		ReadTimeout:   3 * time.Second,
		WriteTimeout:  3 * time.Second,
		PoolSize:      8,
	})
	defer fc.Close()

	var newPrimary, other *node
	ok := t.Run("kill9", func(t *testing.T) {
		l := startLoad(kind, fc, 4)
		defer l.stop(t)
		loadStart := time.Now()
		// 2 s of load, so that a primary with fsync everysec has some on
		// disk that it brings back when restarted.
		testwait.For(t, 20*time.Second, "2 s of load and 50 states acknowledged by WAIT 1 before the kill", func() (bool, string) {
			_, acked := l.counts(time.Time{})
			return acked >= 50 && time.Since(loadStart) >= 2*time.Second, fmt.Sprintf("%d acknowledged", acked)
		})

		killAt := time.Now()
		primary.p.Kill()
		exitedAt := time.Now()
		_, ackedBefore := l.counts(time.Time{})

		addr, first, all := cl.waitSwitch(primary.addr, killAt, 30*time.Second)
		switchedAt := time.Now()
		var firstOK time.Time
		testwait.For(t, 20*time.Second, "the client writes again after the failover", func() (bool, string) {
			var ok bool
			firstOK, ok = l.firstOKAfter(exitedAt)
			l.mu.Lock()
			defer l.mu.Unlock()
			return ok, fmt.Sprintf("%d errors, last %v", l.errs, l.lastErr)
		})
		testwait.For(t, 20*time.Second, "20 writes and 5 WAIT-acknowledged states after the switch", func() (bool, string) {
			oks, acked := l.counts(switchedAt)
			return oks >= 20 && acked >= 5, fmt.Sprintf("%d writes, %d acknowledged", oks, acked)
		})
		l.stop(t)
		// With down-after-milliseconds 1000 a sentinel may see the new
		// primary down before it has reconnected to it, and fail over a
		// second time (ha.md §5): check the state the sentinels settle on.
		newPrimary = cl.waitSettled(nil, 2, 1, 30*time.Second)
		if newPrimary.addr != addr {
			t.Logf("%s: the sentinels failed over a second time, from %s to %s (config-epoch %s)", kind.name, addr, newPrimary.addr, cl.configEpoch())
		}
		for _, n := range cl.nodes[1:] {
			if n != newPrimary {
				other = n
			}
		}
		t.Logf("%s: kill -9 of the primary: first sentinel switched after %v, all 3 after %v; "+
			"no writable primary for %v (kill to first successful write through NewFailoverClient); promoted %s",
			kind.name, first.Round(time.Millisecond), all.Round(time.Millisecond),
			firstOK.Sub(killAt).Round(time.Millisecond), cl.nodeAt(addr).name)

		// Every acknowledged state is on the new primary.
		c := newPrimary.client()
		defer c.Close()
		l.mu.Lock()
		acked := append([]ack(nil), l.acked...)
		errs := l.errs
		l.mu.Unlock()
		lost := 0
		for _, a := range acked {
			got, err := c.Get(ctx, a.key).Result()
			if err != nil || got != a.state {
				lost++
				if lost <= 5 {
					t.Errorf("state of %s acknowledged by WAIT 1 at %v (%v after the kill): %q; new primary has %q (%v)",
						a.key, a.at.Format("15:04:05.000"), a.at.Sub(killAt), a.state, got, err)
				}
			}
		}
		t.Logf("%s: %d states acknowledged by WAIT 1 (%d before the kill), %d lost; %d failed pipelines during the failover",
			kind.name, len(acked), ackedBefore, lost, errs)

		cl.waitMaster(newPrimary, 10*time.Second)
		cl.waitReplicaOf(other, newPrimary, 20*time.Second)
		oc := other.client()
		defer oc.Close()
		if err := oc.Do(ctx, kind.write("ha:replica-write")...).Err(); err == nil || err.Error() != "READONLY You can't write against a read only replica." {
			t.Errorf("write on replica %s: %v, want READONLY You can't write against a read only replica.", other.name, err)
		}
		if lines := configLines(t, newPrimary.conf, "replicaof"); len(lines) != 0 {
			t.Errorf("config file of the promoted %s still has %q after Sentinel's CONFIG REWRITE", newPrimary.name, lines)
		}
		if lines := configLines(t, other.conf, "replicaof"); len(lines) != 1 || lines[0] != "replicaof "+strings.ReplaceAll(newPrimary.addr, ":", " ") {
			t.Errorf("config file of %s has %q, want replicaof %s", other.name, lines, newPrimary.addr)
		}
	})
	if !ok {
		return
	}

	// The failover is measured; what follows is not. Sentinel turns a
	// returning primary into a replica only once it has reported role
	// master for 4 publish periods and at an INFO (every 10 s): shorten
	// both, or the rest takes a minute.
	harness.SentinelDebug(t, cl.sentinels, "publish-period", 250, "info-period", 1000)

	ok = t.Run("rejoin", func(t *testing.T) {
		restartAt := time.Now()
		primary.start(t)
		// Until Sentinel turns it into a replica, the restarted node is a
		// primary of its own: a write it takes now must be gone once it
		// replicates the new primary (full resync, never a merge).
		pc := primary.client()
		defer pc.Close()
		staleErr := pc.Do(ctx, kind.write("ha:stale")...).Err()
		if m := cl.waitFollowsMaster(primary, 40*time.Second); m != newPrimary {
			t.Logf("%s: the sentinels failed over again, to %s (config-epoch %s)", kind.name, m.name, cl.configEpoch())
			newPrimary = m
		}
		t.Logf("%s: the restarted former primary became a replica of %s %v after its restart",
			kind.name, newPrimary.name, time.Since(restartAt).Round(time.Millisecond))
		// Sentinel sends CONFIG REWRITE after REPLICAOF (in one MULTI),
		// while the replica's link comes up on its own: the file may lag
		// the link by the rest of that transaction.
		want := "replicaof " + strings.ReplaceAll(newPrimary.addr, ":", " ")
		testwait.For(t, 10*time.Second, "the former primary's config file names its new primary", func() (bool, string) {
			lines := configLines(t, primary.conf, "replicaof")
			return len(lines) == 1 && lines[0] == want, fmt.Sprintf("config file has %q, want %q", lines, want)
		})
		nc := newPrimary.client()
		defer nc.Close()
		var keys int
		testwait.For(t, 20*time.Second, "the former primary holds exactly the new primary's data", func() (bool, string) {
			a, err := keyValues(ctx, nc)
			if err != nil {
				return false, err.Error()
			}
			b, err := keyValues(ctx, pc)
			if err != nil {
				return false, err.Error()
			}
			keys = len(a)
			return diffKV(a, b) == "", diffKV(a, b)
		})
		t.Logf("%s: %d keys identical on the new primary and the former one (its own write after the restart: %v, then dropped)", kind.name, keys, staleErr)
		newPrimary = cl.waitSettled(nil, 2, 2, 30*time.Second)
	})
	if !ok {
		return
	}

	t.Run("redis-py", func(t *testing.T) { redisPySentinel(t, cl, newPrimary) })
	t.Run("redis-cli", func(t *testing.T) { redisCLISentinel(t, cl, newPrimary) })
	if kind.name == cellserverKind.name {
		t.Run("client", func(t *testing.T) { typedClient(t, fc, newPrimary) })
	}

	t.Run("forced", func(t *testing.T) {
		old := newPrimary
		var forcedAt time.Time
		testwait.For(t, 20*time.Second, "SENTINEL FAILOVER accepted", func() (bool, string) {
			forcedAt = time.Now()
			err := cl.sentinels[0].C.Failover(ctx, masterName).Err()
			return err == nil, fmt.Sprint(err) // INPROG or NOGOODSLAVE: try again
		})
		_, first, all := cl.waitSwitch(old.addr, forcedAt, 30*time.Second)
		promoted := cl.waitFollowsMaster(old, 40*time.Second)
		demoted := time.Since(forcedAt)
		cl.waitMaster(promoted, 10*time.Second)
		for _, n := range cl.nodes {
			if n != promoted && n != old {
				cl.waitReplicaOf(n, promoted, 20*time.Second)
			}
		}
		t.Logf("%s: SENTINEL FAILOVER with the primary alive: first sentinel switched after %v, all 3 after %v; "+
			"the old primary was a replica of %s after %v", kind.name, first.Round(time.Millisecond),
			all.Round(time.Millisecond), promoted.name, demoted.Round(time.Millisecond))
		if lines := configLines(t, old.conf, "replicaof"); len(lines) != 1 || lines[0] != "replicaof "+strings.ReplaceAll(promoted.addr, ":", " ") {
			t.Errorf("config file of the demoted %s has %q, want replicaof %s", old.name, lines, promoted.addr)
		}
		cl.waitSettled(promoted, 2, 2, 30*time.Second)
	})
	t.Logf("%s: whole scenario %v", kind.name, time.Since(began).Round(time.Millisecond))
}

// diffKV describes how b differs from a ("" when equal), briefly.
// typedClient: cellserver's client package over the go-redis
// FailoverClient that lived through the failovers reaches the primary the
// sentinels name: a limit of 2 admits two calls and refuses the third,
// and the state is on that primary.
func typedClient(t *testing.T, fc *redis.Client, primary *node) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := client.New(fc)
	var allowed []bool
	for range 3 {
		r, err := c.Throttle(ctx, "tc:sentinel", 1, client.PerHour(2), 1)
		if err != nil {
			t.Fatalf("Throttle through the failover client: %v", err)
		}
		allowed = append(allowed, r.Allowed)
	}
	if fmt.Sprint(allowed) != "[true true false]" {
		t.Fatalf("allowed %v, want [true true false]", allowed)
	}
	pc := primary.client()
	defer pc.Close()
	info, found, err := client.New(pc).Info(ctx, "tc:sentinel")
	if err != nil || !found || info.Kind != "gcra" {
		t.Fatalf("CL.INFO on the primary %s: %+v %v %v", primary.addr, info, found, err)
	}
	t.Logf("client: 3 calls through the failover client, allowed %v; the state is on %s", allowed, primary.addr)
}

func diffKV(a, b map[string]string) string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			d = append(d, "missing "+k)
		} else if w != v {
			d = append(d, fmt.Sprintf("%s: %q, want %q", k, w, v))
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			d = append(d, "extra "+k)
		}
	}
	sort.Strings(d)
	if len(d) > 5 {
		d = append(d[:5], fmt.Sprintf("... %d differences", len(d)))
	}
	return strings.Join(d, "; ")
}

// redisPyScript uses redis-py's Sentinel: discover_master and
// discover_slaves, a write through master_for, WAIT 2 so that every
// replica has it, a read through slave_for, and a write through slave_for,
// which must raise ReadOnlyError.
const redisPyScript = `
import json, sys
import redis
from redis.sentinel import Sentinel

sentinels = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in sys.argv[1].split(","))]
cmd = json.loads(sys.argv[2])
key = cmd[1]

def plain(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v

s = Sentinel(sentinels, socket_timeout=5)
out = {"version": redis.__version__}
out["master"] = "%s:%d" % s.discover_master("mymaster")
out["replicas"] = sorted("%s:%d" % r for r in s.discover_slaves("mymaster"))
m = s.master_for("mymaster", socket_timeout=5)
out["write"] = plain(m.execute_command(*cmd))
out["master_get"] = plain(m.get(key))
out["wait"] = m.execute_command("WAIT", 2, 5000)
r = s.slave_for("mymaster", socket_timeout=5)
out["replica_get"] = plain(r.get(key))
try:
    r.execute_command(*cmd)
    out["replica_write"] = "no error"
except redis.exceptions.ReadOnlyError as e:
    out["replica_write"] = "ReadOnlyError: %s" % e
print(json.dumps(out))
`

func redisPySentinel(t *testing.T, cl *cluster, primary *node) {
	py := harness.Python("redis")
	if py == "" {
		t.Skip("no python3 with the redis module (Debian python3-redis; scripts/ensure-tools.sh installs it)")
	}
	cmd, _ := json.Marshal(cl.kind.write("ha:py"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", redisPyScript, strings.Join(harness.Addrs(cl.sentinels), ","), string(cmd)).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-py: %v\n%s", err, out)
	}
	var got struct {
		Version      string   `json:"version"`
		Master       string   `json:"master"`
		Replicas     []string `json:"replicas"`
		MasterGet    string   `json:"master_get"`
		Wait         int      `json:"wait"`
		ReplicaGet   string   `json:"replica_get"`
		ReplicaWrite string   `json:"replica_write"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("redis-py output: %v\n%s", err, out)
	}
	var replicas []string
	for _, n := range cl.nodes {
		if n != primary {
			replicas = append(replicas, n.addr)
		}
	}
	sort.Strings(replicas)
	if got.Master != primary.addr || strings.Join(got.Replicas, ",") != strings.Join(replicas, ",") {
		t.Errorf("redis-py %s: discover_master %s, discover_slaves %v; want %s and %v", got.Version, got.Master, got.Replicas, primary.addr, replicas)
	}
	if got.MasterGet == "" || got.ReplicaGet != got.MasterGet || got.Wait != 2 {
		t.Errorf("redis-py: GET on master_for %q, WAIT 2 %d, GET on slave_for %q", got.MasterGet, got.Wait, got.ReplicaGet)
	}
	if got.ReplicaWrite != "ReadOnlyError: You can't write against a read only replica." {
		t.Errorf("redis-py: write through slave_for: %q, want ReadOnlyError", got.ReplicaWrite)
	}
	t.Logf("redis-py %s: master_for %s wrote and read %q; slave_for read it and refused the write (%s)", got.Version, got.Master, got.MasterGet, got.ReplicaWrite)
}

func redisCLISentinel(t *testing.T, cl *cluster, primary *node) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Skip("redis-cli not installed")
	}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	_, sport, _ := net.SplitHostPort(cl.sentinels[1].Addr)
	out, err := run("-p", sport, "SENTINEL", "get-master-addr-by-name", masterName)
	hp := strings.Fields(out)
	if err != nil || len(hp) != 2 || net.JoinHostPort(hp[0], hp[1]) != primary.addr {
		t.Fatalf("redis-cli SENTINEL get-master-addr-by-name: %q %v, want %s", out, err, primary.addr)
	}
	var write []string
	for _, a := range cl.kind.write("ha:cli") {
		write = append(write, fmt.Sprint(a))
	}
	out, err = run(append([]string{"-h", hp[0], "-p", hp[1]}, write...)...)
	if err != nil || strings.Contains(out, "ERR") || strings.Contains(out, "READONLY") {
		t.Errorf("redis-cli %v on the master: %q %v", write, out, err)
	}
	for _, n := range cl.nodes {
		if n == primary {
			continue
		}
		_, port, _ := net.SplitHostPort(n.addr)
		rout, _ := run(append([]string{"-p", port}, write...)...)
		if !strings.Contains(rout, "READONLY You can't write against a read only replica.") {
			t.Errorf("redis-cli %v on replica %s: %q, want READONLY", write, n.name, rout)
		}
	}
	t.Logf("redis-cli: sentinel said %s; %v there answered %q; both replicas answered READONLY", primary.addr, write, strings.ReplaceAll(out, "\n", " "))
}

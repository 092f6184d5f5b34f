package clustertests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/tests/internal/harness"
	"github.com/redis/go-redis/v9"
)

// The cluster tool (`cellserver cluster ...`, issue #29 item 5) run as an
// operator runs it: the built binary against nodes of the built binary,
// with a password (--pass) as production clusters have one.

const toolPass = "tool-pw"

// toolNode is a node started for the tool's tests.
type toolNode struct {
	p    *harness.Proc
	addr string
	rdb  *redis.Client
}

func (n *toolNode) do(t *testing.T, args ...any) any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := n.rdb.Do(ctx, args...).Result()
	if err != nil {
		t.Fatalf("%s %v: %v", n.addr, args, err)
	}
	return v
}

func (n *toolNode) id(t *testing.T) string { return n.do(t, "CLUSTER", "MYID").(string) }

func startToolNodes(t *testing.T, count int) []*toolNode {
	t.Helper()
	var ns []*toolNode
	for i := range count {
		n := &toolNode{}
		n.p, n.addr = harness.ListenCellserver(t, fmt.Sprintf("tool%d", i+1),
			"--cluster-enabled", "yes", "--requirepass", toolPass, "--masterauth", toolPass)
		n.rdb = redis.NewClient(&redis.Options{Addr: n.addr, Password: toolPass})
		t.Cleanup(func() { n.rdb.Close() })
		ns = append(ns, n)
	}
	return ns
}

// runTool runs `cellserver cluster args...` (at most 2 minutes) and
// returns its exit status, stdout and stderr.
func runTool(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binproc.Binary(t), append([]string{"cluster"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("cellserver cluster %v: %v", args, err)
	}
	return code, out.String(), errb.String()
}

// mustTool runs the tool and fails unless it exits 0.
func mustTool(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := runTool(t, args...)
	if code != 0 {
		t.Fatalf("cellserver cluster %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

type checkJSON struct {
	OK    bool `json:"ok"`
	Nodes []struct {
		Addr, ID, Role string
		Reachable      bool `json:"reachable"`
		SameTopology   bool `json:"same_topology"`
		Slots          int
		Error          string
	} `json:"nodes"`
	Problems []string `json:"problems"`
}

type infoJSON struct {
	Masters []struct {
		Addr, ID string
		Slots    int
		Keys     int64
		Replicas []string
	} `json:"masters"`
	Keys int64 `json:"keys"`
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not the JSON expected: %v\n%s", err, s)
	}
	return v
}

// TestClusterTool: create makes a 3-master cluster of 3 fresh nodes (ids
// from the nodes, Redis's slot split) and check finds it sound; info
// counts the keys a cluster client stored; add-node adds an empty master
// and a replica (which replicates its master); a node given another
// topology, a node down, a wrong password make check (or the tool) exit
// 1 with the reason; bad usage exits 2.
func TestClusterTool(t *testing.T) {
	harness.NeedClusterMode(t)
	ns := startToolNodes(t, 5)
	pass := []string{"--pass", toolPass}

	out := mustTool(t, append([]string{"create", ns[0].addr, ns[1].addr, ns[2].addr, "--json"}, pass...)...)
	created := decode[struct {
		Check checkJSON `json:"check"`
	}](t, out)
	if !created.Check.OK || len(created.Check.Nodes) != 3 {
		t.Fatalf("create's check: %s", out)
	}
	ids := []string{ns[0].id(t), ns[1].id(t), ns[2].id(t)}
	wantSplit := [][2]int64{{0, 5460}, {5461, 10922}, {10923, 16383}} // redis-cli --cluster create's
	for _, n := range ns[:3] {
		slots := n.do(t, "CLUSTER", "SLOTS").([]any)
		if len(slots) != 3 {
			t.Fatalf("%s CLUSTER SLOTS: %v", n.addr, slots)
		}
		for i, r := range slots {
			r := r.([]any)
			master := r[2].([]any)
			if r[0].(int64) != wantSplit[i][0] || r[1].(int64) != wantSplit[i][1] || master[2] != ids[i] || fmt.Sprintf("%s:%d", master[0], master[1]) != ns[i].addr {
				t.Fatalf("%s CLUSTER SLOTS range %d: %v, want %v on %s (%s)", n.addr, i, r, wantSplit[i], ns[i].addr, ids[i])
			}
		}
	}
	if code, out, _ := runTool(t, append([]string{"create", ns[0].addr, ns[3].addr}, pass...)...); code != 1 {
		t.Fatalf("create with a node already in a cluster: exit %d\n%s", code, out)
	}

	// Keys through a cluster client; info counts them on their owners.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{ns[0].addr}, Password: toolPass})
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const nkeys = 300
	perMaster := make([]int64, 3)
	for i := range nkeys {
		k := fmt.Sprintf("tool:user:%d", i)
		if err := cc.Do(ctx, "CL.THROTTLE", k, 4, 1, 3600).Err(); err != nil {
			t.Fatal(err)
		}
		s := int(keyslot.Of([]byte(k)))
		for m, r := range wantSplit {
			if s >= int(r[0]) && s <= int(r[1]) {
				perMaster[m]++
			}
		}
	}
	info := decode[infoJSON](t, mustTool(t, append([]string{"info", ns[1].addr, "--json"}, pass...)...))
	if info.Keys != nkeys || len(info.Masters) != 3 {
		t.Fatalf("info: %+v, want %d keys in 3 masters", info, nkeys)
	}
	for i, m := range info.Masters {
		if m.ID != ids[i] || m.Addr != ns[i].addr || m.Keys != perMaster[i] || m.Slots != int(wantSplit[i][1]-wantSplit[i][0]+1) {
			t.Errorf("info master %d: %+v, want %s %s with %d keys", i, m, ns[i].addr, ids[i], perMaster[i])
		}
	}
	human := mustTool(t, append([]string{"info", ns[1].addr}, pass...)...)
	if !strings.Contains(human, fmt.Sprintf("%s (%s...) -> %d keys | 5461 slots | 0 replicas", ns[0].addr, ids[0][:8], perMaster[0])) {
		t.Errorf("info:\n%s", human)
	}

	// add-node: an empty master, then a replica of the first master.
	mustTool(t, append([]string{"add-node", ns[3].addr, ns[0].addr}, pass...)...)
	id3 := ns[3].id(t)
	nodesTxt := ns[0].do(t, "CLUSTER", "NODES").(string)
	if !strings.Contains(nodesTxt, id3+" "+ns[3].addr+"@") || !strings.Contains(nodesTxt, " master - 0 0 0 connected\n") {
		t.Fatalf("CLUSTER NODES after add-node: the new master without slots is missing:\n%s", nodesTxt)
	}
	mustTool(t, append([]string{"add-node", ns[4].addr, ns[2].addr, "--replica-of", ids[0][:10]}, pass...)...)
	// add-node waited for the link: the replica is up at once.
	repl := harness.InfoFields(ns[4].do(t, "INFO", "replication").(string))
	if repl["role"] != "slave" || repl["master_host"]+":"+repl["master_port"] != ns[0].addr || repl["master_link_status"] != "up" {
		t.Fatalf("the replica added: INFO replication %v, want a replica of %s, link up", repl, ns[0].addr)
	}
	chk := decode[checkJSON](t, mustTool(t, append([]string{"check", ns[4].addr, "--json"}, pass...)...))
	if !chk.OK || len(chk.Nodes) != 5 {
		t.Fatalf("check after add-node: %+v", chk)
	}
	for _, n := range chk.Nodes {
		if !n.Reachable || !n.SameTopology || n.Error != "" {
			t.Fatalf("check after add-node: %+v", n)
		}
	}
	if out := mustTool(t, append([]string{"check", ns[0].addr}, pass...)...); !strings.Contains(out, "[OK] All nodes agree") {
		t.Fatalf("check:\n%s", out)
	}

	// A node given another topology: check exits 1 and names it.
	cfg := ns[0].do(t, "CELLCLUSTER", "GETCONFIG").(string)
	var shards []map[string]any
	if err := json.Unmarshal([]byte(cfg), &shards); err != nil {
		t.Fatal(err)
	}
	other, _ := json.Marshal(shards[:3]) // without the empty master
	ns[1].do(t, "CELLCLUSTER", "CONFIG", string(other))
	code, out, _ := runTool(t, append([]string{"check", ns[0].addr}, pass...)...)
	if code != 1 || !strings.Contains(out, "[ERR] master "+ns[1].addr+": holds a different topology") {
		t.Fatalf("check with %s holding another topology: exit %d\n%s", ns[1].addr, code, out)
	}
	code, out, _ = runTool(t, append([]string{"check", ns[0].addr, "--json"}, pass...)...)
	if chk := decode[checkJSON](t, out); code != 1 || chk.OK || len(chk.Problems) != 1 {
		t.Fatalf("check --json with %s holding another topology: exit %d\n%s", ns[1].addr, code, out)
	}
	ns[1].do(t, "CELLCLUSTER", "CONFIG", cfg)
	mustTool(t, append([]string{"check", ns[0].addr}, pass...)...)

	// A node down: check exits 1 and names it.
	ns[3].p.Kill()
	code, out, _ = runTool(t, append([]string{"check", ns[0].addr}, pass...)...)
	if code != 1 || !strings.Contains(out, "[ERR] master "+ns[3].addr+": unreachable") {
		t.Fatalf("check with %s down: exit %d\n%s", ns[3].addr, code, out)
	}

	// A wrong password: exit 1 with the node's answer.
	code, _, errs := runTool(t, "check", ns[0].addr, "--pass", "wrong")
	if code != 1 || !strings.Contains(errs, "AUTH") {
		t.Fatalf("check with a wrong password: exit %d\n%s", code, errs)
	}
	// Usage errors: exit 2.
	for _, args := range [][]string{{}, {"frobnicate", ns[0].addr}, {"check"}, {"check", ns[0].addr, "--no-such-option"},
		{"reshard", ns[0].addr, "--from", ids[0]}, {"add-node", ns[0].addr}} {
		if code, _, _ := runTool(t, args...); code != 2 {
			t.Errorf("cellserver cluster %v: exit %d, want 2", args, code)
		}
	}
	if code, out, _ := runTool(t, "--help"); code != 0 || !strings.Contains(out, "reshard HOST:PORT --from ID --to ID --slots N") {
		t.Errorf("cellserver cluster --help: exit %d\n%s", code, out)
	}
}

// TestClusterToolReshard: `cellserver cluster reshard` and `rebalance`
// move slots with their keys' state, end to end: keys at their limit
// before a move are at their limit after, on their new owner, which the
// old one redirects to; a new empty master gets its share.
func TestClusterToolReshard(t *testing.T) {
	harness.NeedClusterMode(t)
	ns := startToolNodes(t, 4)
	pass := []string{"--pass", toolPass}
	mustTool(t, append([]string{"create", ns[0].addr, ns[1].addr, ns[2].addr}, pass...)...)
	ids := []string{ns[0].id(t), ns[1].id(t), ns[2].id(t)}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{ns[0].addr}, Password: toolPass, MaxRedirects: 16})
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// 600 keys, each at its limit (CL.THROTTLE key 1 1 86400: 2 admitted).
	const nkeys = 600
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("reshard:%d", i)
		for range 2 {
			if r, err := cc.Do(ctx, "CL.THROTTLE", keys[i], 1, 1, 86400).Int64Slice(); err != nil || r[0] != 0 {
				t.Fatalf("CL.THROTTLE %s: %v %v", keys[i], r, err)
			}
		}
	}
	atLimit := func(when string) {
		t.Helper()
		for _, k := range keys {
			r, err := cc.Do(ctx, "CL.THROTTLE", k, 1, 1, 86400, 0).Int64Slice()
			if err != nil || r[2] != 0 {
				t.Fatalf("%s: %s (slot %d): %v %v; want 0 left (its state moved with it)", when, k, keyslot.Of([]byte(k)), r, err)
			}
		}
	}
	out := mustTool(t, append([]string{"reshard", ns[0].addr, "--from", ids[0], "--to", ids[2], "--slots", "2000", "--yes"}, pass...)...)
	t.Logf("reshard:\n%s", out)
	atLimit("after reshard")
	// Slots 0..1999 are node 2's now, everywhere.
	for _, n := range ns[:3] {
		if err := n.rdb.Do(ctx, "CL.THROTTLE", "{06S}", 1, 1, 86400, 0).Err(); n != ns[2] && (err == nil || !strings.HasPrefix(err.Error(), "MOVED 0 "+ns[2].addr)) {
			t.Fatalf("%s: a key of slot 0 after the reshard: %v, want MOVED to %s", n.addr, err, ns[2].addr)
		}
	}
	mustTool(t, append([]string{"add-node", ns[3].addr, ns[0].addr}, pass...)...)
	out = mustTool(t, append([]string{"rebalance", ns[0].addr, "--yes"}, pass...)...)
	t.Logf("rebalance:\n%s", out)
	atLimit("after rebalance")
	info := decode[infoJSON](t, mustTool(t, append([]string{"info", ns[0].addr, "--json"}, pass...)...))
	if info.Keys != nkeys || len(info.Masters) != 4 {
		t.Fatalf("info after rebalance: %+v, want %d keys on 4 masters", info, nkeys)
	}
	for _, m := range info.Masters {
		if m.Slots < 4000 || m.Slots > 4200 {
			t.Errorf("after rebalance %s holds %d slots, want about 4096", m.Addr, m.Slots)
		}
	}
	if out := mustTool(t, append([]string{"check", ns[0].addr}, pass...)...); !strings.Contains(out, "[OK] All nodes agree") {
		t.Fatalf("check after rebalance:\n%s", out)
	}
}

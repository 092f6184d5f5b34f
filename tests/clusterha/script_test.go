package clusterha

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/topotest"
	"github.com/cellserver/cellserver/tests/internal/harness"
)

// scriptPath is scripts/cluster-reconfig.sh of this repository.
func scriptPath(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("..", "..", "scripts", "cluster-reconfig.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// needRedisCLI skips the test without what cluster-reconfig.sh runs.
func needRedisCLI(t *testing.T) {
	t.Helper()
	harness.NeedTools(t, "bash", "redis-cli", "awk", "timeout")
}

// fakeNode is a RESP server standing in for a cellserver node or a
// sentinel, as far as the script talks to them: CLUSTER NODES returns
// nodes, SENTINEL MASTERS returns masters, CELLCLUSTER CONFIG is recorded
// and answered with reject (an error text) or OK.
type fakeNode struct {
	ln      net.Listener
	addr    string
	mu      sync.Mutex
	nodes   string     // CLUSTER NODES reply
	masters [][]string // SENTINEL MASTERS: field, value, field, value...
	reject  string     // non-empty: the error CELLCLUSTER CONFIG replies
	pushed  []string   // every CELLCLUSTER CONFIG argument received
}

func newFakeNode(t *testing.T) *fakeNode {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{ln: ln, addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return f
}

func (f *fakeNode) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	for {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		args, err := readCommand(r)
		if err != nil {
			return
		}
		cmd := strings.ToUpper(strings.Join(args[:min(2, len(args))], " "))
		f.mu.Lock()
		var out string
		switch {
		case cmd == "CLUSTER NODES":
			out = fmt.Sprintf("$%d\r\n%s\r\n", len(f.nodes), f.nodes)
		case cmd == "SENTINEL MASTERS":
			out = fmt.Sprintf("*%d\r\n", len(f.masters))
			for _, m := range f.masters {
				out += fmt.Sprintf("*%d\r\n", len(m))
				for _, s := range m {
					out += fmt.Sprintf("$%d\r\n%s\r\n", len(s), s)
				}
			}
		case cmd == "CELLCLUSTER CONFIG" && len(args) == 3:
			f.pushed = append(f.pushed, args[2])
			out = "+OK\r\n"
			if f.reject != "" {
				out = "-" + f.reject + "\r\n"
			}
		default:
			out = fmt.Sprintf("-ERR unknown command '%s'\r\n", args[0])
		}
		f.mu.Unlock()
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}

// readCommand reads one RESP array of bulk strings (what redis-cli sends).
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("not an array: %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		l, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(h, "$")))
		if err != nil {
			return nil, fmt.Errorf("bad bulk header %q", h)
		}
		b := make([]byte, l+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:l])
	}
	return args, nil
}

func (f *fakeNode) set(nodes string, masters [][]string, reject string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes, f.masters, f.reject = nodes, masters, reject
}

func (f *fakeNode) takePushed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pushed
	f.pushed = nil
	return p
}

// Topology is the CELLCLUSTER CONFIG JSON.
type topoNode struct {
	ID   string `json:"id"`
	IP   string `json:"ip"`
	Port int    `json:"port"`
}
type topoShard struct {
	SlotRanges []struct {
		Start int `json:"start"`
		End   int `json:"end"`
	} `json:"slot_ranges"`
	Master   topoNode   `json:"master"`
	Replicas []topoNode `json:"replicas"`
}

// clusterNodesText renders CLUSTER NODES for shards of nodes (first one
// the master) owning ranges ("0-8191 ..."), as a cellserver node would.
func clusterNodesText(shards [][]string, ranges []string, ids map[string]string) string {
	var b strings.Builder
	for s, nodes := range shards {
		for i, a := range nodes {
			_, port, _ := net.SplitHostPort(a)
			p, _ := strconv.Atoi(port)
			if i == 0 {
				fmt.Fprintf(&b, "%s %s@%d master - 0 0 %d connected %s\n", ids[a], a, p+10000, s+1, ranges[s])
			} else {
				fmt.Fprintf(&b, "%s %s@%d slave %s 0 0 %d connected\n", ids[a], a, p+10000, ids[nodes[0]], s+1)
			}
		}
	}
	return b.String()
}

func sentinelMasters(names map[string]string) [][]string {
	var out [][]string
	for name, a := range names {
		h, p, _ := net.SplitHostPort(a)
		out = append(out, []string{"name", name, "ip", h, "port", p, "runid", "", "flags", "master"})
	}
	return out
}

// runScript runs the script with env and args; it returns the exit code
// and the combined output.
func runScript(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{scriptPath(t)}, args...)...)
	cmd.Env = append(append(os.Environ(), "TMPDIR="+t.TempDir(), "CELLSERVER_RECONFIG_TIMEOUT=5"), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running the script: %v", err)
		}
		code = ee.ExitCode()
	}
	return code, string(out)
}

// TestReconfigScript checks scripts/cluster-reconfig.sh against fake nodes
// and a fake sentinel: what topology it pushes, to whom, and its exit
// codes, for the runs Sentinel makes after a failover.
func TestReconfigScript(t *testing.T) {
	needRedisCLI(t)
	// Shard 0: a (dead primary), b; shard 1: c, d. a is a closed port.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := dead.Addr().String()
	dead.Close()
	fb, fc, fd, sent := newFakeNode(t), newFakeNode(t), newFakeNode(t), newFakeNode(t)
	b, c, d := fb.addr, fc.addr, fd.addr
	// Ids are 40 lower-case hex digits, the only ids a node accepts.
	ids := map[string]string{a: strings.Repeat("a", 40), b: topotest.ID("node-b"), c: strings.Repeat("c", 40), d: topotest.ID("d")}
	ranges := []string{"0-8191", "8192-16000 16001 16002-16383"}
	before := clusterNodesText([][]string{{a, b}, {c, d}}, ranges, ids)
	env := []string{"CELLSERVER_SENTINEL=" + sent.addr}
	hp := func(addr string) []string { h, p, _ := net.SplitHostPort(addr); return []string{h, p} }
	failoverArgs := func(name, role, from, to string) []string {
		return append(append([]string{name, role, "start"}, hp(from)...), hp(to)...)
	}
	node := func(addr string) topoNode {
		h, p, _ := net.SplitHostPort(addr)
		port, _ := strconv.Atoi(p)
		return topoNode{ID: ids[addr], IP: h, Port: port}
	}
	// check decodes what every fake node received: one identical push each,
	// with the shards' masters as want says (and the others as replicas).
	check := func(t *testing.T, out string, want [2]string) {
		t.Helper()
		var first string
		for _, f := range []*fakeNode{fb, fc, fd} {
			p := f.takePushed()
			if len(p) != 1 {
				t.Fatalf("%s received %d pushes, want 1\n%s", f.addr, len(p), out)
			}
			if first == "" {
				first = p[0]
			} else if p[0] != first {
				t.Fatalf("nodes received different topologies:\n%s\n%s", first, p[0])
			}
		}
		var topo []topoShard
		if err := json.Unmarshal([]byte(first), &topo); err != nil {
			t.Fatalf("pushed topology is not JSON: %v\n%s", err, first)
		}
		if len(topo) != 2 {
			t.Fatalf("pushed %d shards, want 2: %s", len(topo), first)
		}
		members := [2][]string{{a, b}, {c, d}}
		for s, sh := range topo {
			if sh.Master != node(want[s]) {
				t.Errorf("shard %d master %+v, want %s", s, sh.Master, want[s])
			}
			var reps []topoNode
			for _, m := range members[s] {
				if m != want[s] {
					reps = append(reps, node(m))
				}
			}
			if !reflect.DeepEqual(sh.Replicas, reps) {
				t.Errorf("shard %d replicas %+v, want %+v", s, sh.Replicas, reps)
			}
		}
		r0, _ := json.Marshal(topo[0].SlotRanges)
		r1, _ := json.Marshal(topo[1].SlotRanges)
		if string(r0) != `[{"start":0,"end":8191}]` || string(r1) != `[{"start":8192,"end":16000},{"start":16001,"end":16001},{"start":16002,"end":16383}]` {
			t.Errorf("slot ranges %s %s", r0, r1)
		}
	}

	t.Run("leader", func(t *testing.T) {
		// The leader runs before its own +switch-master: its sentinel still
		// names a as shard-0's master; the argv names b.
		for _, f := range []*fakeNode{fb, fc, fd} {
			f.set(before, nil, "")
		}
		sent.set("", sentinelMasters(map[string]string{"shard-0": a, "shard-1": c}), "")
		code, out := runScript(t, env, failoverArgs("shard-0", "leader", a, b)...)
		if code != 0 {
			t.Fatalf("exit %d, want 0\n%s", code, out)
		}
		check(t, out, [2]string{b, c})
		if !strings.Contains(out, "skipped "+a+": not answering") {
			t.Errorf("no line about the dead node:\n%s", out)
		}
	})
	t.Run("observer-again", func(t *testing.T) {
		// An observer's run after the nodes took it: same topology again.
		after := clusterNodesText([][]string{{b, a}, {c, d}}, ranges, ids)
		for _, f := range []*fakeNode{fb, fc, fd} {
			f.set(after, nil, "")
		}
		sent.set("", sentinelMasters(map[string]string{"shard-0": b, "shard-1": c}), "")
		code, out := runScript(t, env, failoverArgs("shard-0", "observer", a, b)...)
		if code != 0 {
			t.Fatalf("exit %d, want 0\n%s", code, out)
		}
		check(t, out, [2]string{b, c})
	})
	t.Run("both-shards", func(t *testing.T) {
		// shard-1 fails over while the nodes still hold the topology from
		// before shard-0's switch (a lost push): the run for shard-1 must
		// not undo shard-0's switch, which its sentinel knows.
		for _, f := range []*fakeNode{fb, fc, fd} {
			f.set(before, nil, "")
		}
		sent.set("", sentinelMasters(map[string]string{"shard-0": b, "shard-1": c}), "")
		code, out := runScript(t, env, failoverArgs("shard-1", "leader", c, d)...)
		if code != 0 {
			t.Fatalf("exit %d, want 0\n%s", code, out)
		}
		check(t, out, [2]string{b, d})
	})
	t.Run("sync", func(t *testing.T) {
		for _, f := range []*fakeNode{fb, fc, fd} {
			f.set(before, nil, "")
		}
		sent.set("", sentinelMasters(map[string]string{"shard-0": b, "shard-1": d}), "")
		code, out := runScript(t, env, "--sync", hp(c)[0], hp(c)[1])
		if code != 0 {
			t.Fatalf("exit %d, want 0\n%s", code, out)
		}
		check(t, out, [2]string{b, d})
	})
	t.Run("no-sentinel", func(t *testing.T) {
		// Sentinel unreachable: the argv still decides the failed-over
		// shard; the other keeps the master the nodes know.
		for _, f := range []*fakeNode{fb, fc, fd} {
			f.set(before, nil, "")
		}
		code, out := runScript(t, []string{"CELLSERVER_SENTINEL=" + a}, failoverArgs("shard-0", "observer", a, b)...)
		if code != 0 {
			t.Fatalf("exit %d, want 0\n%s", code, out)
		}
		check(t, out, [2]string{b, c})
	})
	t.Run("rejected", func(t *testing.T) {
		for _, f := range []*fakeNode{fb, fc, fd} {
			f.set(before, nil, "ERR Invalid cluster configuration: slot 5 is owned twice")
		}
		sent.set("", sentinelMasters(map[string]string{"shard-0": a, "shard-1": c}), "")
		code, out := runScript(t, env, failoverArgs("shard-0", "leader", a, b)...)
		for _, f := range []*fakeNode{fb, fc, fd} {
			f.takePushed()
		}
		if code != 2 {
			t.Fatalf("exit %d, want 2 (no retry)\n%s", code, out)
		}
	})
	t.Run("nobody-answers", func(t *testing.T) {
		code, out := runScript(t, env, failoverArgs("shard-0", "leader", a, a)...)
		if code != 1 {
			t.Fatalf("exit %d, want 1 (Sentinel retries)\n%s", code, out)
		}
	})
	t.Run("bad-args", func(t *testing.T) {
		code, out := runScript(t, env, "shard-0", "leader", "start")
		if code != 2 || !strings.Contains(out, "usage:") {
			t.Fatalf("exit %d, want 2 with usage\n%s", code, out)
		}
	})
	t.Run("dry-run", func(t *testing.T) {
		for _, f := range []*fakeNode{fb, fc, fd} {
			f.set(before, nil, "")
		}
		sent.set("", sentinelMasters(map[string]string{"shard-0": a, "shard-1": c}), "")
		code, out := runScript(t, append(env, "CELLSERVER_RECONFIG_DRYRUN=1"), failoverArgs("shard-0", "leader", a, b)...)
		if code != 0 || !strings.Contains(out, `"master":{"id":"`+ids[b]+`"`) {
			t.Fatalf("exit %d\n%s", code, out)
		}
		for _, f := range []*fakeNode{fb, fc, fd} {
			if p := f.takePushed(); len(p) != 0 {
				t.Fatalf("dry run pushed to %s", f.addr)
			}
		}
	})
}

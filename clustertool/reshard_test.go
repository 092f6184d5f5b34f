package clustertool

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/redcon"
)

// fakeNode answers what the tool sends: CELLCLUSTER MYID, GETCONFIG,
// CONFIG (recorded) and SLOT-MIGRATION-STATUS (from status, called with
// the poll's number), so that the tool's migration driving can be
// checked without the server's migration.
type fakeNode struct {
	id, addr string
	mu       sync.Mutex
	config   string
	pushed   []string
	polls    int
	status   func(n int, peer string) [][]any
}

func startFake(t *testing.T, id string) *fakeNode {
	t.Helper()
	f := &fakeNode{id: id}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	srv := redcon.NewServer(f.addr, func(conn redcon.Conn, cmd redcon.Command) {
		f.mu.Lock()
		defer f.mu.Unlock()
		args := make([]string, len(cmd.Args))
		for i, a := range cmd.Args {
			args[i] = strings.ToUpper(string(a))
		}
		switch {
		case args[0] == "CELLCLUSTER" && args[1] == "MYID":
			conn.WriteBulkString(f.id)
		case args[0] == "CELLCLUSTER" && args[1] == "GETCONFIG":
			if f.config == "" {
				conn.WriteNull()
			} else {
				conn.WriteBulkString(f.config)
			}
		case args[0] == "CELLCLUSTER" && args[1] == "CONFIG":
			f.config = string(cmd.Args[2])
			f.pushed = append(f.pushed, f.config)
			conn.WriteString("OK")
		case args[0] == "CELLCLUSTER" && args[1] == "SLOT-MIGRATION-STATUS":
			f.polls++
			var entries [][]any
			if f.status != nil {
				entries = f.status(f.polls, string(cmd.Args[2]))
			}
			conn.WriteArray(len(entries))
			for _, e := range entries {
				conn.WriteArray(len(e))
				for _, v := range e {
					switch v := v.(type) {
					case int:
						conn.WriteInt(v)
					default:
						conn.WriteBulkString(fmt.Sprint(v))
					}
				}
			}
		default:
			conn.WriteError("ERR unknown command")
		}
	}, nil, nil)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return f
}

func (f *fakeNode) node() Node {
	h, p, _ := net.SplitHostPort(f.addr)
	port, _ := strconv.Atoi(p)
	return Node{ID: f.id, IP: h, Port: port}
}

func (f *fakeNode) takePushed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.pushed
	f.pushed = nil
	return p
}

func hexID(c byte) string { return strings.Repeat(string(c), 40) }

// fakeCluster: masters a (0-8191) and b (8192-16383), and c without slots.
func fakeCluster(t *testing.T) (a, b, c *fakeNode, top Topology) {
	a, b, c = startFake(t, hexID('a')), startFake(t, hexID('b')), startFake(t, hexID('c'))
	top = Topology{
		{SlotRanges: []SlotRange{{0, 8191}}, Master: a.node()},
		{SlotRanges: []SlotRange{{8192, 16383}}, Master: b.node()},
		{SlotRanges: []SlotRange{}, Master: c.node()},
	}
	for _, f := range []*fakeNode{a, b, c} {
		f.config = top.JSON()
	}
	return a, b, c, top
}

func testTool(out io.Writer) *Tool {
	return &Tool{Out: out, Yes: true, Poll: time.Millisecond, MigrationTimeout: 5 * time.Second}
}

// TestReshardDrivesMigration: the opening topology (the migration on the
// source shard, naming the target) goes to every node, the tool polls the
// source until FINISHED, then the closing topology (slots on the target,
// no migration) goes to every node.
func TestReshardDrivesMigration(t *testing.T) {
	a, b, c, top := fakeCluster(t)
	a.status = func(n int, peer string) [][]any {
		state := []string{"CONNECTING", "SYNC", "SYNC", "FINISHED"}[min(n-1, 3)]
		return [][]any{{"out", peer, state, 10 * n, "", "0-99"}}
	}
	var out strings.Builder
	if err := testTool(&out).Reshard(a.addr, hexID('a'), hexID('c')[:8], 100); err != nil {
		t.Fatalf("Reshard: %v\n%s", err, out.String())
	}
	open := top.Clone()
	open[0].Migrations = []Migration{{SlotRanges: []SlotRange{{0, 99}}, NodeID: hexID('c'), IP: "127.0.0.1", Port: c.node().Port}}
	closing := top.Clone()
	closing[0].SlotRanges = []SlotRange{{100, 8191}}
	closing[2].SlotRanges = []SlotRange{{0, 99}}
	for _, f := range []*fakeNode{a, b, c} {
		p := f.takePushed()
		if len(p) != 2 || p[0] != open.JSON() || p[1] != closing.JSON() {
			t.Fatalf("%s received %d topologies:\n%s\nwant the opening then the closing one:\n%s\n%s", f.id[:1], len(p), strings.Join(p, "\n"), open.JSON(), closing.JSON())
		}
	}
	if a.polls != 4 || !strings.Contains(out.String(), "100 slots moved") || !strings.Contains(out.String(), "40 keys") {
		t.Fatalf("%d polls; output:\n%s", a.polls, out.String())
	}
}

// TestReshardCancels: a FATAL migration, or one not FINISHED within the
// timeout (ERROR retried meanwhile), is cancelled: the topology without
// the migration is pushed again, the slots stay on the source, and the
// error says why.
func TestReshardCancels(t *testing.T) {
	for _, c := range []struct {
		name, state, want string
	}{
		{"fatal", "FATAL", "failed (FATAL): out of memory on the target; cancelled: the slots stay on"},
		{"timeout", "ERROR", "not finished after 200ms (last: ERROR (out of memory on the target)); cancelled"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, cn, top := fakeCluster(t)
			a.status = func(n int, peer string) [][]any {
				return [][]any{{"out", peer, c.state, 3, "out of memory on the target", "0-9"}}
			}
			var out strings.Builder
			tool := testTool(&out)
			tool.MigrationTimeout = 200 * time.Millisecond
			err := tool.Reshard(a.addr, hexID('a'), hexID('c'), 10)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Reshard = %v, want an error containing %q\n%s", err, c.want, out.String())
			}
			for _, f := range []*fakeNode{a, b, cn} {
				p := f.takePushed()
				if len(p) != 2 || !strings.Contains(p[0], `"migrations"`) || p[1] != top.JSON() {
					t.Fatalf("%s received %q, want the opening topology then the original", f.id[:1], p)
				}
			}
		})
	}
}

// TestRebalanceFillsEmptyMaster: 8192/8192/0 becomes 5462/5461/5461, each
// move a migration driven to FINISHED.
func TestRebalanceFillsEmptyMaster(t *testing.T) {
	a, b, c, _ := fakeCluster(t)
	fin := func(n int, peer string) [][]any {
		return [][]any{{"out", peer, "FINISHED", 0, "", ""}}
	}
	a.status, b.status, c.status = fin, fin, fin
	var out strings.Builder
	if err := testTool(&out).Rebalance(a.addr, nil, 2); err != nil {
		t.Fatalf("Rebalance: %v\n%s\na %s b %s c %s", err, out.String(), a.addr, b.addr, c.addr)
	}
	final, err := ParseTopology([]byte(c.config))
	if err != nil {
		t.Fatal(err)
	}
	if _, problems := final.Owners(); len(problems) > 0 {
		t.Fatalf("final topology: %v", problems)
	}
	if got := []int{final.SlotCount(0), final.SlotCount(1), final.SlotCount(2)}; got[0] != 5462 || got[1] != 5461 || got[2] != 5461 {
		t.Fatalf("slots after rebalance: %v\n%s", got, out.String())
	}
	// Balanced: nothing moves.
	out.Reset()
	if err := testTool(&out).Rebalance(a.addr, nil, 2); err != nil || !strings.Contains(out.String(), "No rebalancing needed") {
		t.Fatalf("second Rebalance: %v\n%s", err, out.String())
	}
	// Weight 0 empties a master.
	if err := testTool(&out).Rebalance(a.addr, map[string]float64{hexID('c'): 0}, 2); err != nil {
		t.Fatal(err)
	}
	final, _ = ParseTopology([]byte(a.config))
	if final.SlotCount(2) != 0 || final.SlotCount(0)+final.SlotCount(1) != Slots {
		t.Fatalf("after --weight c=0: %d %d %d", final.SlotCount(0), final.SlotCount(1), final.SlotCount(2))
	}
}

func TestSplitSlots(t *testing.T) {
	for masters, want := range map[int][][2]int{
		1: {{0, 16383}},
		3: {{0, 5460}, {5461, 10922}, {10923, 16383}}, // redis-cli --cluster create's
		4: {{0, 4095}, {4096, 8191}, {8192, 12287}, {12288, 16383}},
	} {
		if got := splitSlots(masters); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("splitSlots(%d) = %v, want %v", masters, got, want)
		}
	}
}

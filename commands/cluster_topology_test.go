package commands_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/topotest"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/server"
	"github.com/tidwall/redcon"
)

// Issue #26, item 3: CLUSTER SLOTS, SHARDS and NODES on a large topology.

// longIP is the longest address a topology accepts (45 bytes).
const longIP = "0000:0000:0000:0000:0000:ffff:255.255.255.255"

// id is topotest.ID: a valid node id named name.
var id = topotest.ID

// threeShards is Redis's default split, shard 0 with one replica; the
// nodes are id("m1"), id("r1"), id("m2"), id("m3").
var threeShards = fmt.Sprintf(`[{"slot_ranges":[{"start":0,"end":5460}],"master":{"id":%q,"ip":"127.0.0.1","port":7001},"replicas":[{"id":%q,"ip":"127.0.0.1","port":7004}]},`+
	`{"slot_ranges":[{"start":5461,"end":10922}],"master":{"id":%q,"ip":"127.0.0.1","port":7002},"replicas":[]},`+
	`{"slot_ranges":[{"start":10923,"end":16383}],"master":{"id":%q,"ip":"::1","port":7003}}]`, id("m1"), id("r1"), id("m2"), id("m3"))

// newClusterDirect is a direct harness in cluster mode, node id nodeID.
func newClusterDirect(t *testing.T, nodeID string) (*direct, *cluster.State) {
	t.Helper()
	st, err := cluster.New(cluster.Config{NodeID: nodeID})
	if err != nil {
		t.Fatal(err)
	}
	return newDirect(t, commands.Config{Cluster: st}), st
}

// TestClusterTopologyOverLimitsRefused: a topology with more replicas per
// shard or more nodes than the limits (the issue's: 2 shards of 1000
// replicas over 16384 one-slot ranges), or a node id that is not 40 hex
// digits, is refused with its reason before anything is built, and the topology
// installed before stays, replies included.
func TestClusterTopologyOverLimitsRefused(t *testing.T) {
	d, st := newClusterDirect(t, id("m1"))
	d.want("+OK", "CELLCLUSTER", "CONFIG", threeShards)
	slots := d.do("CLUSTER", "SLOTS")
	top := st.View().T
	built := st.RepliesBuilt()
	for _, c := range []struct{ json, want string }{
		{topotest.Wide(2, 1000, "127.0.0.1"), "shard 0 has 1000 replicas, more than the limit of 10"},
		{topotest.Wide(2, 11, "127.0.0.1"), "shard 0 has 11 replicas, more than the limit of 10"},
		{topotest.Wide(91, 10, "127.0.0.1"), "1001 nodes (masters and replicas), more than the limit of 1000"},
		{topotest.Wide(1001, 0, "127.0.0.1"), "1001 nodes (masters and replicas), more than the limit of 1000"},
		{strings.Replace(topotest.Wide(2, 0, "127.0.0.1"), topotest.WideID(10000), strings.Repeat("a", 257), 1), "shard 0 master: id of 257 bytes: node id must be 40 lower-case hex digits (as Redis's), not 257 bytes"},
		{strings.Replace(topotest.Wide(2, 0, "127.0.0.1"), topotest.WideID(10001), topotest.WideID(10001)+"0", 1), `shard 1 master: id "` + topotest.WideID(10001) + `0": node id must be 40 lower-case hex digits (as Redis's), not 41 bytes`},
	} {
		want := "-ERR Invalid cluster configuration: " + c.want + "\r\n"
		if got := d.do("CELLCLUSTER", "CONFIG", c.json); got != want {
			t.Errorf("CELLCLUSTER CONFIG of a %d-byte topology: %.200q, want %q", len(c.json), got, want)
		}
	}
	if st.View().T != top {
		t.Fatal("a refused topology replaced the installed one")
	}
	if got := d.do("CLUSTER", "SLOTS"); got != slots {
		t.Fatalf("CLUSTER SLOTS after the refusals:\n%.300q\nwant the installed topology's:\n%.300q", got, slots)
	}
	if n := st.RepliesBuilt() - built; n != 0 {
		t.Fatalf("%d replies built for refused topologies, want 0", n)
	}
	// At the limits: accepted.
	d.want("+OK", "CELLCLUSTER", "CONFIG", topotest.Wide(90, 10, "127.0.0.1"))
	d.want("+OK", "CELLCLUSTER", "CONFIG", topotest.Wide(1000, 0, "127.0.0.1"))
}

// TestClusterRepliesBuiltOnce: CLUSTER SLOTS, SHARDS and NODES are built
// once per installed topology and protocol, whatever the number of calls
// and clients; a new topology or node id gets new replies (never the old
// one's), each built once again.
func TestClusterRepliesBuiltOnce(t *testing.T) {
	d, st := newClusterDirect(t, id("m1"))
	d.want("+OK", "CELLCLUSTER", "CONFIG", threeShards)
	conns := []*resp.Conn{d.conn}
	for range 3 {
		c := new(resp.Conn)
		d.srv.Open(c)
		t.Cleanup(func() { d.srv.Close(c) })
		conns = append(conns, c)
	}
	// calls runs CLUSTER sub 10 times on each connection, checks that every
	// reply is the same, and returns it with the replies built meanwhile.
	calls := func(sub string) (string, int64) {
		t.Helper()
		before := st.RepliesBuilt()
		var first string
		for i := range 10 {
			for _, c := range conns {
				c.Out = c.Out[:0]
				d.srv.ServeRESP(c, [][]byte{[]byte("CLUSTER"), []byte(sub)})
				if i == 0 && first == "" {
					first = string(c.Out)
				} else if string(c.Out) != first {
					t.Fatalf("CLUSTER %s call %d: %.200q, want the first reply %.200q", sub, i, c.Out, first)
				}
			}
		}
		return first, st.RepliesBuilt() - before
	}
	for _, sub := range []string{"SLOTS", "SHARDS", "NODES"} {
		if _, n := calls(sub); n != 1 {
			t.Errorf("40 CLUSTER %s calls built %d replies, want 1", sub, n)
		}
	}
	for _, c := range conns {
		c.Out = c.Out[:0]
		d.srv.ServeRESP(c, [][]byte{[]byte("HELLO"), []byte("3")})
	}
	slots3, n := calls("SLOTS")
	if n != 1 {
		t.Errorf("40 CLUSTER SLOTS calls in RESP3 built %d replies, want 1", n)
	}
	if !strings.Contains(slots3, "%0\r\n") {
		t.Errorf("RESP3 CLUSTER SLOTS %.200q has no RESP3 map", slots3)
	}

	// A new topology: its replies, built once.
	one := `[{"slot_ranges":[{"start":0,"end":16383}],"master":{"id":"` + id("m1") + `","ip":"10.0.0.1","port":6380},"replicas":[]}]`
	d.want("+OK", "CELLCLUSTER", "CONFIG", one)
	got, n := calls("SLOTS")
	if want := "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$8\r\n10.0.0.1\r\n:6380\r\n$40\r\n" + id("m1") + "\r\n%0\r\n"; got != want || n != 1 {
		t.Errorf("CLUSTER SLOTS after a new topology: %q (%d built), want %q (1 built)", got, n, want)
	}
	got, n = calls("NODES")
	if want := id("m1") + " 10.0.0.1:6380@16380 myself,master - 0 0 1 connected 0-16383\n"; !strings.HasSuffix(got, want+"\r\n") || n != 1 {
		t.Errorf("CLUSTER NODES after a new topology: %q (%d built), want it to end %q (1 built)", got, n, want)
	}
	// A new node id: CLUSTER NODES no longer marks m1 as myself.
	d.want("+OK", "CELLCLUSTER", "MYID", id("other"))
	got, n = calls("NODES")
	if !strings.Contains(got, id("m1")+" 10.0.0.1:6380@16380 master -") || strings.Contains(got, "myself,master - 0 0 1") || n != 1 {
		t.Errorf("CLUSTER NODES after CELLCLUSTER MYID %s: %q (%d built)", id("other"), got, n)
	}
}

// Reference encodings: CLUSTER SLOTS, SHARDS and NODES as the code built
// them for each call before replies were kept per topology (every shard's
// ranges found with ShardRanges, one walk of the slots each).

func refMapLen(b []byte, resp3 bool, n int) []byte {
	if resp3 {
		return append(strconv.AppendInt(append(b, '%'), int64(n), 10), '\r', '\n')
	}
	return redcon.AppendArray(b, 2*n)
}

func refVerbatim(b []byte, resp3 bool, s string) []byte {
	if !resp3 {
		return redcon.AppendBulkString(b, s)
	}
	b = append(strconv.AppendInt(append(b, '='), int64(len(s)+4), 10), '\r', '\n')
	return append(append(append(b, "txt:"...), s...), '\r', '\n')
}

func refSlots(v *cluster.View, resp3 bool) []byte {
	var b []byte
	ranges := v.T.Ranges()
	b = redcon.AppendArray(b, len(ranges))
	for _, r := range ranges {
		b = redcon.AppendArray(b, 3+len(r.Shard.Replicas))
		b = redcon.AppendInt(b, int64(r.Start))
		b = redcon.AppendInt(b, int64(r.End))
		for _, n := range append([]cluster.Node{r.Shard.Master}, r.Shard.Replicas...) {
			b = redcon.AppendArray(b, 4)
			b = redcon.AppendBulkString(b, n.IP)
			b = redcon.AppendInt(b, int64(n.Port))
			b = redcon.AppendBulkString(b, n.ID)
			b = refMapLen(b, resp3, 0)
		}
	}
	return b
}

func refShards(v *cluster.View, resp3 bool) []byte {
	var b []byte
	node := func(n cluster.Node, role string) {
		b = refMapLen(b, resp3, 7)
		b = redcon.AppendBulkString(b, "id")
		b = redcon.AppendBulkString(b, n.ID)
		b = redcon.AppendBulkString(b, "port")
		b = redcon.AppendInt(b, int64(n.Port))
		b = redcon.AppendBulkString(b, "ip")
		b = redcon.AppendBulkString(b, n.IP)
		b = redcon.AppendBulkString(b, "endpoint")
		b = redcon.AppendBulkString(b, n.IP)
		b = redcon.AppendBulkString(b, "role")
		b = redcon.AppendBulkString(b, role)
		b = redcon.AppendBulkString(b, "replication-offset")
		b = redcon.AppendInt(b, 0)
		b = redcon.AppendBulkString(b, "health")
		b = redcon.AppendBulkString(b, "online")
	}
	shards := v.T.OrderedShards()
	if v.Me == nil {
		b = redcon.AppendArray(b, len(shards)+1)
		b = refMapLen(b, resp3, 2)
		b = redcon.AppendBulkString(b, "slots")
		b = redcon.AppendArray(b, 0)
		b = redcon.AppendBulkString(b, "nodes")
		b = redcon.AppendArray(b, 1)
		node(v.Addr, "master")
	} else {
		b = redcon.AppendArray(b, len(shards))
	}
	for _, sh := range shards {
		b = refMapLen(b, resp3, 2)
		b = redcon.AppendBulkString(b, "slots")
		rs := v.T.ShardRanges(sh)
		b = redcon.AppendArray(b, 2*len(rs))
		for _, r := range rs {
			b = redcon.AppendInt(b, int64(r[0]))
			b = redcon.AppendInt(b, int64(r[1]))
		}
		b = redcon.AppendBulkString(b, "nodes")
		b = redcon.AppendArray(b, 1+len(sh.Replicas))
		node(sh.Master, "master")
		for _, r := range sh.Replicas {
			node(r, "replica")
		}
	}
	return b
}

func refNodes(v *cluster.View, resp3 bool) []byte {
	var b strings.Builder
	line := func(n cluster.Node, flags, master string, epoch int, ranges [][2]int) {
		cport := 0
		if n.Port != 0 {
			cport = n.Port + 10000
		}
		fmt.Fprintf(&b, "%s %s:%d@%d %s %s 0 0 %d connected", n.ID, n.IP, n.Port, cport, flags, master, epoch)
		for _, r := range ranges {
			if r[1] != r[0] {
				fmt.Fprintf(&b, " %d-%d", r[0], r[1])
			} else {
				fmt.Fprintf(&b, " %d", r[0])
			}
		}
		b.WriteByte('\n')
	}
	if v.Me == nil {
		line(cluster.Node{ID: v.ID, IP: v.Addr.IP, Port: v.Addr.Port}, "myself,master", "-", 0, nil)
	}
	if v.T != nil {
		for i, sh := range v.T.OrderedShards() {
			flags := "master"
			if sh.Master.ID == v.ID {
				flags = "myself,master"
			}
			rs := v.T.ShardRanges(sh)
			epoch := i + 1
			if len(rs) == 0 {
				epoch = 0 // a master without slots, as Redis shows one
			}
			line(sh.Master, flags, "-", epoch, rs)
			for _, r := range sh.Replicas {
				flags := "slave"
				if r.ID == v.ID {
					flags = "myself,slave"
				}
				line(r, flags, sh.Master.ID, epoch, nil)
			}
		}
	}
	return refVerbatim(nil, resp3, b.String())
}

// randomTopology returns a valid topology: 1 to 12 shards of 0 to
// MaxReplicas replicas (mostly few), the slots cut into random runs dealt
// to random shards (adjacent runs of one shard included, which CLUSTER
// SLOTS merges), shards without slots among them (slot_ranges empty or
// absent) in one topology of two, random 40-hex ids, IPv4 and IPv6
// addresses; and the ids of its nodes.
func randomTopology(rng *rand.Rand) (string, []string) {
	nShards := 1 + rng.IntN(12)
	var runs [][2]int
	for s := 0; s < keyslot.Slots; {
		n := 1 + rng.IntN([]int{3, 40, 2000, keyslot.Slots}[rng.IntN(4)])
		e := min(s+n-1, keyslot.Slots-1)
		runs = append(runs, [2]int{s, e})
		s = e + 1
	}
	owned := make([][][2]int, nShards)
	for i, r := range runs {
		sh := rng.IntN(nShards)
		if i < nShards && len(runs) >= nShards {
			sh = i // every shard gets a run
		}
		owned[sh] = append(owned[sh], r)
	}
	var ids []string
	port := 1000
	node := func(b *strings.Builder) {
		id := fmt.Sprintf("%016x%016x%08d", rng.Uint64(), rng.Uint64(), port)
		ip := []string{"127.0.0.1", "10.1.2.3", "::1", "2001:db8::7", longIP}[rng.IntN(5)]
		fmt.Fprintf(b, `{"id":%q,"ip":%q,"port":%d}`, id, ip, port)
		ids = append(ids, id)
		port++
	}
	withEmpty := rng.IntN(2) == 0
	if withEmpty {
		for range 1 + rng.IntN(2) {
			i := rng.IntN(len(owned) + 1)
			owned = append(owned[:i], append([][][2]int{nil}, owned[i:]...)...)
		}
	}
	var b strings.Builder
	b.WriteByte('[')
	first := true
	for _, rs := range owned {
		if len(rs) == 0 && !withEmpty {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		if len(rs) == 0 && rng.IntN(2) == 0 {
			b.WriteString(`{"master":`) // slot_ranges absent
		} else {
			b.WriteString(`{"slot_ranges":[`)
			rng.Shuffle(len(rs), func(i, j int) { rs[i], rs[j] = rs[j], rs[i] })
			for i, r := range rs {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"start":%d,"end":%d}`, r[0], r[1])
			}
			b.WriteString(`],"master":`)
		}
		node(&b)
		b.WriteString(`,"replicas":[`)
		nr := []int{0, 1, 2, rng.IntN(cluster.MaxReplicas + 1)}[rng.IntN(4)]
		for i := range nr {
			if i > 0 {
				b.WriteByte(',')
			}
			node(&b)
		}
		b.WriteString(`]}`)
	}
	b.WriteByte(']')
	return b.String(), ids
}

// TestClusterRepliesMatchUncached: for random topologies, each seen by a
// master, a replica or a node it does not list, CLUSTER SLOTS, SHARDS and
// NODES in RESP2 and RESP3, on the call that builds them and on the next
// (kept), are byte for byte what the reference encoders above build.
func TestClusterRepliesMatchUncached(t *testing.T) {
	const topologies = 300
	rng := rand.New(rand.NewPCG(26, 3))
	d, st := newClusterDirect(t, id("unlisted"))
	refs := map[string]func(*cluster.View, bool) []byte{"SLOTS": refSlots, "SHARDS": refShards, "NODES": refNodes}
	checked, withEmpty := 0, 0
	for i := range topologies {
		js, ids := randomTopology(rng)
		me := id("unlisted")
		if rng.IntN(4) > 0 {
			me = ids[rng.IntN(len(ids))]
		}
		d.want("+OK", "CELLCLUSTER", "MYID", me)
		d.want("+OK", "CELLCLUSTER", "CONFIG", js)
		v := st.View()
		if len(v.T.RangesByShard()) < len(v.T.Shards) {
			withEmpty++
		}
		for _, proto := range []string{"2", "3"} {
			d.do("HELLO", proto)
			for _, sub := range []string{"SLOTS", "SHARDS", "NODES"} {
				want := string(refs[sub](v, proto == "3"))
				for call := range 2 {
					if got := d.do("CLUSTER", sub); got != want {
						t.Fatalf("topology %d (me %q), RESP%s, CLUSTER %s call %d:\n%.400q\nwant:\n%.400q\ntopology: %s",
							i, me, proto, sub, call, got, want, js)
					}
					checked++
				}
			}
		}
	}
	if want := topologies * 2 * 3 * 2; checked != want {
		t.Fatalf("checked %d replies, want %d", checked, want)
	}
	if withEmpty < topologies/4 {
		t.Fatalf("%d topologies had a shard without slots, want at least %d", withEmpty, topologies/4)
	}
	t.Logf("%d replies of %d random topologies (%d with shards without slots) equal to the reference", checked, topologies, withEmpty)
}

// TestClusterReplySizeBound: the largest replies any accepted topology
// gives. CLUSTER SLOTS is largest with every slot its own range and every
// shard at MaxReplicas replicas (90 shards of 11 nodes) and 45-byte
// addresses: it stays under the default client
// output buffer limit, so it is built once and sent whole. CLUSTER SHARDS
// and NODES list each node and range once: under 1 MB.
func TestClusterReplySizeBound(t *testing.T) {
	d, st := newClusterDirect(t, id("unlisted"))
	sizes := map[string]int{}
	for _, top := range []string{
		topotest.Wide(cluster.MaxNodes/(1+cluster.MaxReplicas), cluster.MaxReplicas, longIP),
		topotest.Wide(cluster.MaxNodes, 0, longIP),
	} {
		d.want("+OK", "CELLCLUSTER", "CONFIG", top)
		for _, proto := range []string{"2", "3"} {
			d.do("HELLO", proto)
			for _, sub := range []string{"SLOTS", "SHARDS", "NODES"} {
				n := len(d.do("CLUSTER", sub))
				sizes[sub] = max(sizes[sub], n)
			}
		}
	}
	t.Logf("largest replies: CLUSTER SLOTS %d bytes, SHARDS %d, NODES %d (%d replies built)",
		sizes["SLOTS"], sizes["SHARDS"], sizes["NODES"], st.RepliesBuilt())
	if sizes["SLOTS"] > resp.DefaultMaxOutputBuffer {
		t.Errorf("CLUSTER SLOTS of the largest topology: %d bytes, over the default output buffer limit %d", sizes["SLOTS"], resp.DefaultMaxOutputBuffer)
	}
	for _, sub := range []string{"SHARDS", "NODES"} {
		if sizes[sub] > 1_000_000 {
			t.Errorf("CLUSTER %s of the largest topology: %d bytes, want under 1 MB", sub, sizes[sub])
		}
	}
}

// TestClusterSlotsOverOutputLimit: a client whose CLUSTER SLOTS reply is
// larger than its output buffer limit is disconnected without the reply
// (the kept reply is not copied to it); the server keeps serving.
func TestClusterSlotsOverOutputLimit(t *testing.T) {
	srv, addr := servertest.Start(t, server.Config{ClusterEnabled: true, MaxOutputBuffer: 256 << 10})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	top := topotest.Wide(2, cluster.MaxReplicas, "127.0.0.1")
	fmt.Fprintf(c, "*3\r\n$11\r\nCELLCLUSTER\r\n$6\r\nCONFIG\r\n$%d\r\n%s\r\n", len(top), top)
	ok := make([]byte, 5)
	if _, err := io.ReadFull(c, ok); err != nil || string(ok) != "+OK\r\n" {
		t.Fatalf("CELLCLUSTER CONFIG: %q %v", ok, err)
	}
	fmt.Fprint(c, "CLUSTER SLOTS\r\n")
	if b, _ := io.ReadAll(c); len(b) != 0 {
		t.Fatalf("got %d bytes, want the connection closed without the reply", len(b))
	}
	c2, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprint(c2, "CLUSTER MYSHARDID\r\nPING\r\n")
	b := make([]byte, len("$40\r\n")+40+2+len("+PONG\r\n"))
	if _, err := io.ReadFull(c2, b); err != nil || !strings.HasSuffix(string(b), "+PONG\r\n") {
		t.Fatalf("other client: %q %v", b, err)
	}
	if n := srv.Cluster().RepliesBuilt(); n != 1 {
		t.Fatalf("%d replies built, want 1 (CLUSTER SLOTS, RESP2)", n)
	}
}

// TestClusterSlotsLargeOverWire: a CLUSTER SLOTS reply larger than 64 KiB,
// which the connection writes from the kept reply without copying it, is
// read byte for byte as the reference builds it, in its place among
// pipelined replies, in RESP2 and RESP3, by several clients.
func TestClusterSlotsLargeOverWire(t *testing.T) {
	srv, addr := servertest.Start(t, server.Config{ClusterEnabled: true})
	top := topotest.Wide(2, cluster.MaxReplicas, "127.0.0.1")
	for i := range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(20 * time.Second))
		if i == 0 {
			fmt.Fprintf(c, "*3\r\n$11\r\nCELLCLUSTER\r\n$6\r\nCONFIG\r\n$%d\r\n%s\r\n", len(top), top)
			ok := make([]byte, 5)
			if _, err := io.ReadFull(c, ok); err != nil || string(ok) != "+OK\r\n" {
				t.Fatalf("CELLCLUSTER CONFIG: %q %v", ok, err)
			}
		}
		resp3 := i == 2
		if resp3 {
			fmt.Fprint(c, "HELLO 3\r\n")
			// The HELLO reply is a map; skip it by reading up to the
			// PING sent after it.
			fmt.Fprint(c, "PING\r\n")
			var got []byte
			b := make([]byte, 1)
			for !strings.HasSuffix(string(got), "+PONG\r\n") {
				if _, err := c.Read(b); err != nil {
					t.Fatal(err)
				}
				got = append(got, b[0])
			}
		}
		slots := string(refSlots(srv.Cluster().View(), resp3))
		if len(slots) <= 64<<10 {
			t.Fatalf("reply of %d bytes: not over 64 KiB", len(slots))
		}
		fmt.Fprint(c, "PING\r\nCLUSTER SLOTS\r\nPING\r\nCLUSTER SLOTS\r\nPING\r\n")
		want := "+PONG\r\n" + slots + "+PONG\r\n" + slots + "+PONG\r\n"
		got := make([]byte, len(want))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Fatalf("client %d: %d bytes differ from the reference's", i, len(want))
		}
	}
	if n := srv.Cluster().RepliesBuilt(); n != 2 {
		t.Fatalf("%d replies built, want 2 (CLUSTER SLOTS in RESP2 and RESP3)", n)
	}
}

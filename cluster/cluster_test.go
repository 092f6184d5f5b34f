package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/internal/topotest"
	"github.com/cellserver/cellserver/keyslot"
	"github.com/cellserver/cellserver/keyspace"
)

// id is topotest.ID: a valid node id named name.
var id = topotest.ID

// three returns a 3-shard topology's JSON, Redis's default split, shard 0
// with one replica; the nodes are id("m1"), id("r1"), id("m2"), id("m3").
func three() string {
	return fmt.Sprintf(`[{"slot_ranges":[{"start":0,"end":5460}],"master":{"id":%q,"ip":"127.0.0.1","port":7001},"replicas":[{"id":%q,"ip":"127.0.0.1","port":7004}]},
 {"slot_ranges":[{"start":5461,"end":10922}],"master":{"id":%q,"ip":"127.0.0.1","port":7002},"replicas":[]},
 {"slot_ranges":[{"start":10923,"end":16383}],"master":{"id":%q,"ip":"::1","port":7003}}]`, id("m1"), id("r1"), id("m2"), id("m3"))
}

func one(id string, port int) string {
	return fmt.Sprintf(`[{"slot_ranges":[{"start":0,"end":16383}],"master":{"id":%q,"ip":"127.0.0.1","port":%d},"replicas":[]}]`, id, port)
}

// TestParseLimits: a topology at MaxReplicas replicas per shard and
// MaxNodes nodes is accepted; one more of either is refused with its
// reason.
func TestParseLimits(t *testing.T) {
	shards := cluster.MaxNodes / (1 + cluster.MaxReplicas) // 90 shards of 11: 990 nodes
	for _, c := range []struct {
		json, want string
	}{
		{topotest.Wide(2, cluster.MaxReplicas, "127.0.0.1"), ""},
		{topotest.Wide(shards, cluster.MaxReplicas, "0000:0000:0000:0000:0000:ffff:255.255.255.255"), ""},
		{topotest.Wide(cluster.MaxNodes, 0, "127.0.0.1"), ""},
		{topotest.Wide(2, cluster.MaxReplicas+1, "127.0.0.1"), fmt.Sprintf("shard 0 has %d replicas, more than the limit of %d", cluster.MaxReplicas+1, cluster.MaxReplicas)},
		{topotest.Wide(2, 1000, "127.0.0.1"), "shard 0 has 1000 replicas, more than the limit of 10"},
		{topotest.Wide(cluster.MaxNodes+1, 0, "127.0.0.1"), "1001 nodes (masters and replicas), more than the limit of 1000"},
		{topotest.Wide(shards+1, cluster.MaxReplicas, "127.0.0.1"), "1001 nodes (masters and replicas), more than the limit of 1000"},
		{strings.Replace(topotest.Wide(2, 1, "127.0.0.1"), topotest.WideID(10000), strings.Repeat("a", 257), 1), "shard 0 master: id of 257 bytes: node id must be 40 lower-case hex digits (as Redis's), not 257 bytes"},
	} {
		_, err := cluster.Parse([]byte(c.json))
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Parse(%.80s...): %v, want it accepted", c.json, err)
		case c.want != "" && (err == nil || !errors.Is(err, cluster.ErrInvalid) || !strings.HasSuffix(err.Error(), ": "+c.want)):
			t.Errorf("Parse(%.80s...) = %v, want an ErrInvalid ending %q", c.json, err, c.want)
		}
	}
}

// TestValidID: a node id is exactly 40 lower-case hex digits, as Redis's;
// everything else is refused with its reason, by ValidID, by Parse (in any
// node of the topology) and by SetMyID and New (--cluster-node-id).
func TestValidID(t *testing.T) {
	hex40 := "0123456789abcdef0123456789abcdef01234567"
	for _, c := range []struct{ id, want string }{
		{hex40, ""},
		{strings.Repeat("0", 40), ""},
		{cluster.NewID(), ""},
		{"", "empty node id"},
		{hex40 + "8", "node id must be 40 lower-case hex digits (as Redis's), not 41 bytes"},
		{hex40[:39], "node id must be 40 lower-case hex digits (as Redis's), not 39 bytes"},
		{"m1", "node id must be 40 lower-case hex digits (as Redis's), not 2 bytes"},
		{strings.ToUpper(hex40), "node id must be lower-case hex (as Redis's): upper-case is refused"},
		{"g" + hex40[1:], "node id must be 40 lower-case hex digits (as Redis's)"},
		{"z" + hex40[1:], "node id must be 40 lower-case hex digits (as Redis's)"}, // Redis takes a-z; not here
		{" " + hex40[1:], "node id must be 40 lower-case hex digits (as Redis's)"},
		{hex40[:39] + "\n", "node id must be 40 lower-case hex digits (as Redis's)"},
		{hex40[:38] + "é", "node id must be 40 lower-case hex digits (as Redis's)"}, // 40 bytes, 39 runes
	} {
		if got := cluster.ValidID(c.id); got != c.want {
			t.Errorf("ValidID(%q) = %q, want %q", c.id, got, c.want)
		}
		s, err := cluster.New(cluster.Config{NodeID: c.id})
		switch {
		case c.id == "":
			if err != nil || len(s.MyID()) != 40 {
				t.Errorf("New without an id: %v", err)
			}
			continue
		case c.want == "" && (err != nil || s.MyID() != c.id):
			t.Errorf("New(NodeID %q): %v", c.id, err)
		case c.want != "" && (err == nil || !strings.HasSuffix(err.Error(), c.want)):
			t.Errorf("New(NodeID %q) = %v, want an error ending %q", c.id, err, c.want)
		}
		s, _ = cluster.New(cluster.Config{})
		before := s.MyID()
		err = s.SetMyID(c.id)
		switch {
		case c.want == "" && (err != nil || s.MyID() != c.id):
			t.Errorf("SetMyID(%q): %v", c.id, err)
		case c.want != "" && (!errors.Is(err, cluster.ErrInvalidID) || !strings.HasSuffix(err.Error(), c.want) || s.MyID() != before):
			t.Errorf("SetMyID(%q) = %v (id now %q), want an ErrInvalidID ending %q and the id kept", c.id, err, s.MyID(), c.want)
		}
		for _, role := range []string{"master", "replica"} {
			js := fmt.Sprintf(`[{"slot_ranges":[{"start":0,"end":16383}],"master":{"id":%q,"ip":"127.0.0.1","port":1},"replicas":[{"id":%q,"ip":"127.0.0.1","port":2}]}]`, c.id, id("r"))
			if role == "replica" {
				js = fmt.Sprintf(`[{"slot_ranges":[{"start":0,"end":16383}],"master":{"id":%q,"ip":"127.0.0.1","port":1},"replicas":[{"id":%q,"ip":"127.0.0.1","port":2}]}]`, id("m"), c.id)
			}
			_, err := cluster.Parse([]byte(js))
			switch {
			case c.want == "" && err != nil:
				t.Errorf("Parse with %s id %q: %v", role, c.id, err)
			case c.want != "" && (!errors.Is(err, cluster.ErrInvalid) || !strings.HasSuffix(err.Error(), c.want) || !strings.Contains(err.Error(), "shard 0 "+role)):
				t.Errorf("Parse with %s id %q = %v, want an ErrInvalid naming shard 0 %s and ending %q", role, c.id, err, role, c.want)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	m := func(ranges string, nodes string) string {
		return `[{"slot_ranges":[` + ranges + `],` + nodes + `}]`
	}
	full := `{"start":0,"end":16383}`
	a := fmt.Sprintf(`"master":{"id":%q,"ip":"127.0.0.1","port":1}`, id("a"))
	b := id("b")
	for _, c := range []struct{ json, want string }{
		{``, "not a JSON array of shards"},
		{`x`, "not a JSON array of shards"},
		{`{}`, "not a JSON array of shards"},
		{`[]`, "no shards"},
		{`null`, "no shards"},
		{one(id("a"), 1) + ` []`, "trailing data"},
		{m(full, a+`,"extra":1`), `unknown field "extra"`},
		{m(full, `"master":{"id":"`+id("a")+`","ip":"127.0.0.1","port":1,"x":2}`), `unknown field "x"`},
		{m(`{"start":0,"end":16382}`, a), "slot 16383 is not owned by any shard"},
		{m(`{"start":1,"end":16383}`, a), "slot 0 is not owned by any shard"},
		{m(full+`,{"start":7,"end":7}`, a), "slot 7 is owned by shards 0 and 0"},
		{`[` + strings.TrimSuffix(strings.TrimPrefix(one(id("a"), 1), "["), "]") + `,{"slot_ranges":[{"start":5,"end":9}],"master":{"id":"` + b + `","ip":"127.0.0.1","port":2}}]`, "slot 5 is owned by shards 0 and 1"},
		{m(`{"start":0,"end":16384}`, a), "invalid slot range 0-16384"},
		{m(`{"start":-1,"end":16383}`, a), "invalid slot range -1-16383"},
		{m(`{"start":9,"end":8}`, a), "invalid slot range 9-8"},
		// A shard without slots is valid, but the slots must still all be owned.
		{m(``, a), "slot 0 is not owned by any shard"},
		{`[{"master":{"id":"` + id("a") + `","ip":"127.0.0.1","port":1}}]`, "slot 0 is not owned by any shard"},
		{m(full, `"master":{"ip":"127.0.0.1","port":1}`), "shard 0 master: missing id"},
		{m(full, `"master":{"id":"a b","ip":"127.0.0.1","port":1}`), `shard 0 master: id "a b": node id must be 40 lower-case hex digits`},
		{m(full, `"master":{"id":"`+id("a")+`0","ip":"127.0.0.1","port":1}`), `shard 0 master: id "` + id("a") + `0": node id must be 40 lower-case hex digits (as Redis's), not 41 bytes`},
		{m(full, a+`,"replicas":[{"id":"`+strings.ToUpper(id("m"))+`","ip":"127.0.0.1","port":2}]`), `shard 0 replica: id "` + strings.ToUpper(id("m")) + `": node id must be lower-case hex`},
		{m(full, `"master":{"id":"`+id("a")+`","ip":"localhost","port":1}`), `invalid ip "localhost"`},
		{m(full, `"master":{"id":"`+id("a")+`","ip":"","port":1}`), `invalid ip ""`},
		{m(full, `"master":{"id":"`+id("a")+`","ip":"fe80::1%eth0","port":1}`), `invalid ip "fe80::1%eth0"`},
		{m(full, `"master":{"id":"`+id("a")+`","ip":"127.0.0.1","port":0}`), "invalid port 0"},
		{m(full, `"master":{"id":"`+id("a")+`","ip":"127.0.0.1","port":65536}`), "invalid port 65536"},
		{m(full, `"master":{"id":"`+id("a")+`","ip":"127.0.0.1","port":"1"}`), "not a JSON array of shards"},
		{m(full, a+`,"replicas":[{"id":"`+id("a")+`","ip":"127.0.0.1","port":2}]`), `duplicate node id "` + id("a") + `"`},
		{m(full, a+`,"replicas":[{"id":"`+b+`","ip":"127.0.0.1","port":1}]`), `share the address 127.0.0.1:1`},
		{m(full, a+`,"replicas":[{"id":"`+b+`","ip":"127.0.0.1","port":0}]`), "shard 0 replica " + b + ": invalid port 0"},
	} {
		_, err := cluster.Parse([]byte(c.json))
		if err == nil || !errors.Is(err, cluster.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%s) = %v, want an ErrInvalid containing %q", c.json, err, c.want)
		}
	}
}

func TestParseRoutes(t *testing.T) {
	top, err := cluster.Parse([]byte(three()))
	if err != nil {
		t.Fatal(err)
	}
	for slot, want := range map[uint16]string{0: "m1", 5460: "m1", 5461: "m2", 10922: "m2", 10923: "m3", 16383: "m3"} {
		if got := top.Owner(slot).Master.ID; got != id(want) {
			t.Errorf("Owner(%d) = %s, want %s", slot, got, want)
		}
	}
	if rs := top.Ranges(); len(rs) != 3 || rs[2].Start != 10923 || rs[2].End != 16383 {
		t.Errorf("Ranges = %+v", rs)
	}
	// Ranges given in pieces and out of order are merged in slot order.
	split, err := cluster.Parse([]byte(`[{"slot_ranges":[{"start":100,"end":16383},{"start":0,"end":99}],"master":{"id":"` + id("a") + `","ip":"127.0.0.1","port":1}}]`))
	if err != nil {
		t.Fatal(err)
	}
	if rs := split.Ranges(); len(rs) != 1 || rs[0].Start != 0 || rs[0].End != 16383 {
		t.Errorf("merged Ranges = %+v", rs)
	}
	var nilTop *cluster.Topology
	if nilTop.Owner(5) != nil || nilTop.Ranges() != nil {
		t.Error("a nil topology serves slots")
	}
}

func TestRoute(t *testing.T) {
	top, _ := cluster.Parse([]byte(three()))
	for _, c := range []struct {
		id              string
		slot            uint16
		readonly, write bool
		ok              bool
		owner           string
	}{
		{"m1", 0, false, true, true, "m1"},
		{"m1", 6000, false, false, false, "m2"},
		{"r1", 0, false, false, false, "m1"}, // replica without READONLY: MOVED to its master
		{"r1", 0, true, false, true, "m1"},   // READONLY read on its own shard
		{"r1", 0, true, true, false, "m1"},   // but never a write
		{"r1", 6000, true, false, false, "m2"},
		{"stranger", 0, true, false, false, "m1"},
	} {
		s, err := cluster.New(cluster.Config{NodeID: id(c.id)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Install(top); err != nil {
			t.Fatal(err)
		}
		owner, ok := s.View().Route(c.slot, c.readonly, c.write)
		if ok != c.ok || owner.Master.ID != id(c.owner) {
			t.Errorf("%+v: Route = %s, %v", c, topotest.Name(owner.Master.ID), ok)
		}
	}
	s, _ := cluster.New(cluster.Config{})
	if owner, ok := s.View().Route(0, false, false); owner != nil || ok {
		t.Error("no topology must serve nothing (CLUSTERDOWN)")
	}
	if id := s.MyID(); len(id) != 40 {
		t.Errorf("default id %q is not 40 hex", id)
	}
}

func TestNodesInfo(t *testing.T) {
	top, _ := cluster.Parse([]byte(three()))
	s, _ := cluster.New(cluster.Config{NodeID: id("r1")})
	s.Install(top)
	want := id("m1") + " 127.0.0.1:7001@17001 master - 0 0 1 connected 0-5460\n" +
		id("r1") + " 127.0.0.1:7004@17004 myself,slave " + id("m1") + " 0 0 1 connected\n" +
		id("m2") + " 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922\n" +
		id("m3") + " ::1:7003@17003 master - 0 0 3 connected 10923-16383\n"
	if got := s.View().Nodes(); got != want {
		t.Errorf("Nodes:\n%s\nwant:\n%s", got, want)
	}
	info := s.View().Info()
	for _, l := range []string{"cluster_state:ok\r\n", "cluster_known_nodes:4\r\n", "cluster_size:3\r\n", "cluster_my_epoch:1\r\n"} {
		if !strings.Contains(info, l) {
			t.Errorf("Info lacks %q:\n%s", l, info)
		}
	}
}

// TestReplyBuiltOnce: View.Reply builds a reply once per view, kind and
// protocol, however many clients ask at once, and keeps it; a topology
// installed (or a new node id) gives a view that builds its own, and the
// old view's reply is left as it was.
func TestReplyBuiltOnce(t *testing.T) {
	s, _ := cluster.New(cluster.Config{NodeID: id("m1")})
	top, err := cluster.Parse([]byte(three()))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Install(top); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	build := func(v *cluster.View, tag string) func() []byte {
		return func() []byte {
			calls.Add(1)
			return []byte(fmt.Sprintf("%s %d shards", tag, len(v.T.Shards)))
		}
	}
	v := s.View()
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if got := string(v.Reply(cluster.ReplySlots, false, build(v, "slots2"))); got != "slots2 3 shards" {
					t.Errorf("Reply = %q", got)
				}
			}
		}()
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("80 Reply calls on one view built %d times, want 1", n)
	}
	v.Reply(cluster.ReplySlots, true, build(v, "slots3"))
	v.Reply(cluster.ReplyShards, false, build(v, "shards2"))
	v.Reply(cluster.ReplySlots, true, build(v, "slots3"))
	if n, m := calls.Load(), s.RepliesBuilt(); n != 3 || m != 3 {
		t.Fatalf("built %d times (RepliesBuilt %d), want 3: one per kind and protocol", n, m)
	}

	top1, _ := cluster.Parse([]byte(one(id("m1"), 7001)))
	if err := s.Install(top1); err != nil {
		t.Fatal(err)
	}
	nv := s.View()
	if got := string(nv.Reply(cluster.ReplySlots, false, build(nv, "slots2"))); got != "slots2 1 shards" {
		t.Fatalf("after Install: %q, want the new topology's reply", got)
	}
	if got := string(v.Reply(cluster.ReplySlots, false, build(v, "slots2"))); got != "slots2 3 shards" {
		t.Fatalf("old view after Install: %q", got)
	}
	if err := s.SetMyID(id("other")); err != nil {
		t.Fatal(err)
	}
	s.View().Reply(cluster.ReplySlots, false, build(s.View(), "slots2"))
	if n, m := calls.Load(), s.RepliesBuilt(); n != 5 || m != 5 {
		t.Fatalf("built %d times (RepliesBuilt %d), want 5", n, m)
	}

	// A build that panics keeps nothing: the next call builds again.
	pv := s.View()
	func() {
		defer func() { recover() }()
		pv.Reply(cluster.ReplyNodes, false, func() []byte { panic("build") })
	}()
	if got := string(pv.Reply(cluster.ReplyNodes, false, func() []byte { return []byte("nodes") })); got != "nodes" {
		t.Fatalf("after a panicking build: %q", got)
	}
}

// TestSwapRace installs topologies while readers route: every view a
// reader sees is one whole topology (all slots to one node, and Me agrees
// with it). Run with -race.
func TestSwapRace(t *testing.T) {
	s, _ := cluster.New(cluster.Config{NodeID: id("n0")})
	tops := make([]*cluster.Topology, 4)
	for i := range tops {
		var err error
		if tops[i], err = cluster.Parse([]byte(one(id(fmt.Sprintf("n%d", i)), 7000+i))); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	var reads, bad atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				v := s.View()
				if v.T == nil {
					continue
				}
				a, b := v.T.Owner(0), v.T.Owner(keyslot.Slots-1)
				_, ok := v.Route(123, false, true)
				if a != b || ok != (a.Master.ID == id("n0")) || (v.Me != nil) != ok {
					bad.Add(1)
				}
				reads.Add(1)
			}
		}()
	}
	installs := 0
	for ctx.Err() == nil {
		if err := s.Install(tops[installs%len(tops)]); err != nil {
			t.Fatal(err)
		}
		installs++
	}
	wg.Wait()
	t.Logf("%d installs, %d reads", installs, reads.Load())
	if bad.Load() != 0 {
		t.Fatalf("%d torn views", bad.Load())
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "nodes.json")
	s, err := cluster.New(cluster.Config{ConfigFile: file})
	if err != nil {
		t.Fatal(err)
	}
	myid := s.MyID()
	if s.View().T != nil {
		t.Fatal("a topology without a file")
	}
	top, _ := cluster.Parse([]byte(one(myid, 7001)))
	if err := s.Install(top); err != nil {
		t.Fatal(err)
	}
	// A restart finds its id and the topology again.
	s2, err := cluster.New(cluster.Config{ConfigFile: file})
	if err != nil {
		t.Fatal(err)
	}
	if s2.MyID() != myid || s2.View().Me == nil || !s2.View().Master {
		t.Fatalf("after restart: id %s (want %s), me %v", s2.MyID(), myid, s2.View().Me)
	}
	if err := s2.SetMyID(id("other")); err != nil {
		t.Fatal(err)
	}
	if s3, _ := cluster.New(cluster.Config{ConfigFile: file}); s3.MyID() != id("other") {
		t.Fatalf("MYID not kept: %s", s3.MyID())
	}
	if s4, _ := cluster.New(cluster.Config{ConfigFile: file, NodeID: id("forced")}); s4.MyID() != id("forced") {
		t.Fatalf("--cluster-node-id not preferred: %s", s4.MyID())
	}
	if err := s2.SetMyID("a b"); !errors.Is(err, cluster.ErrInvalidID) {
		t.Fatalf("SetMyID(a b) = %v", err)
	}
	// No temporary file is left behind.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("files: %v", ents)
	}
	// A damaged file refuses to start.
	os.WriteFile(file, []byte("[{"), 0o644)
	if _, err := cluster.New(cluster.Config{ConfigFile: file}); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("damaged file: %v", err)
	}
	// An unwritable file refuses the install and keeps the old topology.
	ro := filepath.Join(dir, "missing", "nodes.json")
	s5, err := cluster.New(cluster.Config{ConfigFile: ro, NodeID: id("x")})
	if err == nil {
		if err := s5.Install(top); err == nil {
			t.Fatal("install into a missing directory succeeded")
		}
	}
}

// countJournal counts the deletions the keyspace reports.
type countJournal struct{ deletes atomic.Int64 }

func (j *countJournal) Put(int, []byte, *keyspace.Value) {}
func (j *countJournal) Delete(int, []byte)               { j.deletes.Add(1) }
func (j *countJournal) DeleteDB(int)                     {}
func (j *countJournal) DeleteAll()                       {}

func TestBackgroundDelete(t *testing.T) {
	j := &countJournal{}
	ks, _ := keyspace.New(keyspace.Config{Journal: j, Shards: 8, SlotIndex: true})
	store := cluster.KeyspaceStore{Keyspace: ks}
	s, _ := cluster.New(cluster.Config{NodeID: id("m1"), Store: store})
	top, _ := cluster.Parse([]byte(three()))
	s.Install(top)
	kept, moved := 0, 0
	for i := range 3000 {
		key := []byte(fmt.Sprintf("key:%d", i))
		ks.Restore(0, key, keyspace.Value{Kind: keyspace.KindString, Obj: []byte("v")})
		if keyslot.Of(key) <= 5460 {
			if keyslot.Of(key) <= 2000 {
				kept++
			} else {
				moved++
			}
		}
	}
	// m1 keeps 0-2000 and gives 2001-5460 to m2.
	next, err := cluster.Parse([]byte(strings.Replace(strings.Replace(three(),
		`{"start":0,"end":5460}`, `{"start":0,"end":2000}`, 1),
		`{"start":5461,"end":10922}`, `{"start":2001,"end":10922}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Install(next); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitDeletes(ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.DeletedKeys(); got != int64(moved) || j.deletes.Load() != int64(moved) {
		t.Fatalf("deleted %d (journal %d), want %d", got, j.deletes.Load(), moved)
	}
	if n := ks.DB(0).Size(false); n != 3000-moved {
		t.Fatalf("%d keys left, want %d", n, 3000-moved)
	}
	if n := store.CountKeysInSlot(0, keyslot.Of([]byte("key:0"))); n == 0 && keyslot.Of([]byte("key:0")) <= 2000 {
		t.Fatal("a kept slot lost its key")
	}
	t.Logf("kept %d, deleted %d", kept, moved)
}

// TestEmptyShard: a shard without slots (slot_ranges empty or absent) is
// valid: a master that joined empty, with or without replicas. It owns no
// slot, so its node redirects every key; CLUSTER NODES lists it as a
// master without slots, config epoch 0 (after the shards that have some),
// as Redis shows a master that joined empty, and CLUSTER
// INFO's cluster_size, as Redis's, counts only masters serving a slot.
func TestEmptyShard(t *testing.T) {
	js := fmt.Sprintf(`[{"slot_ranges":[{"start":0,"end":8191}],"master":{"id":%q,"ip":"127.0.0.1","port":7001}},
 {"slot_ranges":[],"master":{"id":%q,"ip":"127.0.0.1","port":7004},"replicas":[{"id":%q,"ip":"127.0.0.1","port":7005}]},
 {"slot_ranges":[{"start":8192,"end":16383}],"master":{"id":%q,"ip":"127.0.0.1","port":7002}},
 {"master":{"id":%q,"ip":"127.0.0.1","port":7003}}]`, id("m1"), id("e1"), id("e1r"), id("m2"), id("e2"))
	top, err := cluster.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if rs := top.Ranges(); len(rs) != 2 || rs[0].Shard.Master.ID != id("m1") || rs[1].Shard.Master.ID != id("m2") {
		t.Fatalf("Ranges = %+v, want the two shards with slots", rs)
	}
	if got := len(top.RangesByShard()); got != 2 {
		t.Fatalf("RangesByShard has %d shards, want 2", got)
	}
	for slot := 0; slot < keyslot.Slots; slot++ {
		if o := top.Owner(uint16(slot)).Master.ID; o != id("m1") && o != id("m2") {
			t.Fatalf("slot %d owned by %s", slot, topotest.Name(o))
		}
	}
	for _, me := range []string{"e1", "e1r", "e2"} {
		s, _ := cluster.New(cluster.Config{NodeID: id(me)})
		if err := s.Install(top); err != nil {
			t.Fatal(err)
		}
		v := s.View()
		if v.Me == nil || v.Master != (me != "e1r") {
			t.Fatalf("%s: Me %v, master %v", me, v.Me, v.Master)
		}
		for _, slot := range []uint16{0, 8192} {
			if owner, ok := v.Route(slot, true, false); ok || v.Owns(slot) || owner == v.Me {
				t.Errorf("%s serves slot %d", me, slot)
			}
		}
	}
	s, _ := cluster.New(cluster.Config{NodeID: id("e1r")})
	s.Install(top)
	want := id("m1") + " 127.0.0.1:7001@17001 master - 0 0 1 connected 0-8191\n" +
		id("m2") + " 127.0.0.1:7002@17002 master - 0 0 2 connected 8192-16383\n" +
		id("e1") + " 127.0.0.1:7004@17004 master - 0 0 0 connected\n" +
		id("e1r") + " 127.0.0.1:7005@17005 myself,slave " + id("e1") + " 0 0 0 connected\n" +
		id("e2") + " 127.0.0.1:7003@17003 master - 0 0 0 connected\n"
	if got := s.View().Nodes(); got != want {
		t.Errorf("Nodes:\n%s\nwant:\n%s", got, want)
	}
	info := s.View().Info()
	for _, l := range []string{"cluster_state:ok\r\n", "cluster_slots_assigned:16384\r\n", "cluster_known_nodes:5\r\n", "cluster_size:2\r\n", "cluster_current_epoch:2\r\n", "cluster_my_epoch:0\r\n"} {
		if !strings.Contains(info, l) {
			t.Errorf("Info lacks %q:\n%s", l, info)
		}
	}
	// The raw JSON is kept as given (the config file), empty shards too.
	if string(top.Raw()) != js {
		t.Errorf("Raw = %s", top.Raw())
	}
}

// TestParseMigrations: the migrations a topology declares are checked
// against it: the target is another shard's master at its address, the
// slots are the source's, each moves once, one migration per pair.
func TestParseMigrations(t *testing.T) {
	a, b, c := id("a"), id("b"), id("c")
	shard := func(nid string, port, start, end int, migs string) string {
		return fmt.Sprintf(`{"slot_ranges":[{"start":%d,"end":%d}],"master":{"id":"%s","ip":"127.0.0.1","port":%d},"replicas":[]%s}`, start, end, nid, port, migs)
	}
	mig := func(nid string, port int, ranges string) string {
		return fmt.Sprintf(`{"slot_ranges":[%s],"node_id":"%s","ip":"127.0.0.1","port":%d}`, ranges, nid, port)
	}
	cfg := func(migs string) string {
		if migs != "" {
			migs = `,"migrations":[` + migs + `]`
		}
		return "[" + shard(a, 7001, 0, 8191, migs) + "," + shard(b, 7002, 8192, 16383, "") + "]"
	}
	ok := mig(b, 7002, `{"start":0,"end":100}`)
	if _, err := cluster.Parse([]byte(cfg(ok))); err != nil {
		t.Fatalf("a valid migration: %v", err)
	}
	for _, tc := range []struct{ migs, want string }{
		{mig(c, 7002, `{"start":0,"end":100}`), fmt.Sprintf(`migration to %q, which is not the master of a shard`, c)},
		{mig(a, 7001, `{"start":0,"end":100}`), "migration to its own master"},
		{mig(b, 7003, `{"start":0,"end":100}`), "but the topology has it at 127.0.0.1:7002"},
		{mig(b, 7002, `{"start":8000,"end":8200}`), "slot 8192 is not the shard's"},
		{mig(b, 7002, ``), "has no slot ranges"},
		{mig(b, 7002, `{"start":5,"end":1}`), "invalid slot range 5-1"},
		{ok + "," + mig(b, 7002, `{"start":200,"end":300}`), fmt.Sprintf(`two migrations to %q`, b)},
		{mig(b, 7002, `{"start":0,"end":10},{"start":5,"end":20}`), "slot 5 is in two migrations"},
	} {
		_, err := cluster.Parse([]byte(cfg(tc.migs)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("migrations %s: %v, want %q", tc.migs, err, tc.want)
		}
	}
}

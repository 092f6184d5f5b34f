package stream

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand"
	"testing"
)

// groupStream returns a stream with no entries, for the groups' tests
// (they do not need entries).
func groupStream() *Stream { return &Stream{inc: 42, recording: true} }

// groupsBytes is the groups' whole encoding, to compare two streams.
func groupsBytes(s *Stream) []byte { return s.cg.appendBinary(nil) }

// recount computes the groups' memory from scratch.
func recount(s *Stream) int {
	n := 0
	s.RangeGroups(func(g *Group) bool {
		n += groupMem + len(g.Name) + g.PendingCount()*pendingMem
		g.RangeConsumers(func(c *Consumer) bool {
			n += consumerMem + len(c.Name)
			return true
		})
		return true
	})
	return n
}

// checkInvariants: every pending entry is in its consumer's PEL and the
// consumers' PELs hold nothing else; memory matches.
func checkInvariants(t *testing.T, s *Stream) {
	t.Helper()
	s.RangeGroups(func(g *Group) bool {
		total := 0
		g.RangeConsumers(func(c *Consumer) bool {
			if c.Group() != g {
				t.Fatalf("consumer %q: wrong group", c.Name)
			}
			c.RangePending(ID{}, MaxID, func(p *Pending) bool {
				if p.Consumer != c || g.Pending(p.ID) != p {
					t.Fatalf("group %q: %v in %q's PEL, not shared", g.Name, p.ID, c.Name)
				}
				total++
				return true
			})
			return true
		})
		if total != g.PendingCount() {
			t.Fatalf("group %q: consumers hold %d, group %d", g.Name, total, g.PendingCount())
		}
		return true
	})
	if got, want := s.cg.memSize(), recount(s); got != want {
		t.Fatalf("memSize %d, recount %d", got, want)
	}
}

func TestGroupsPEL(t *testing.T) {
	s := groupStream()
	g := s.CreateGroup("g", ID{5, 0}, 3)
	if g == nil || s.CreateGroup("g", ID{}, 0) != nil || s.Group("g") != g || s.GroupCount() != 1 {
		t.Fatal("CreateGroup")
	}
	a := s.CreateConsumer(g, "alice", 100)
	b := s.CreateConsumer(g, "bob", 100)
	if a == nil || b == nil || s.CreateConsumer(g, "alice", 1) != nil || g.ConsumerCount() != 2 {
		t.Fatal("CreateConsumer")
	}
	for i := uint64(1); i <= 5; i++ {
		s.SetPending(g, ID{i, 0}, a, 1000, 1)
	}
	// Reassign 2-0 and 4-0 to bob.
	s.SetPending(g, ID{2, 0}, b, 2000, 2)
	s.SetPending(g, ID{4, 0}, b, 2000, 2)
	checkInvariants(t, s)
	if a.PendingCount() != 3 || b.PendingCount() != 2 || g.PendingCount() != 5 {
		t.Fatalf("counts a %d b %d g %d", a.PendingCount(), b.PendingCount(), g.PendingCount())
	}
	if p := g.Pending(ID{2, 0}); p.Consumer != b || p.DeliveryCount != 2 || p.DeliveryTime != 2000 {
		t.Fatalf("reassigned: %+v", p)
	}
	var ids []ID
	g.RangePending(ID{2, 0}, ID{4, 0}, func(p *Pending) bool { ids = append(ids, p.ID); return true })
	if fmt.Sprint(ids) != "[2-0 3-0 4-0]" {
		t.Fatalf("range %v", ids)
	}
	if g.FirstPending().ID != (ID{1, 0}) || g.LastPending().ID != (ID{5, 0}) {
		t.Fatal("first/last")
	}
	if !s.Ack(g, ID{3, 0}) || s.Ack(g, ID{3, 0}) || a.PendingCount() != 2 {
		t.Fatal("Ack")
	}
	if n := s.DeleteConsumer(b); n != 2 || g.PendingCount() != 2 || g.Consumer("bob") != nil {
		t.Fatalf("DeleteConsumer %d, pending %d", n, g.PendingCount())
	}
	checkInvariants(t, s)
	s.DestroyGroup(g)
	if s.Group("g") != nil || s.GroupCount() != 0 || s.cg.memSize() != 0 {
		t.Fatalf("DestroyGroup: mem %d", s.cg.memSize())
	}
}

// randomOps runs n random group operations on s (the same rng gives the
// same ops).
func randomOps(s *Stream, rng *rand.Rand, n int) {
	names := []string{"", "a", "b", "g1", "g2"}
	for i := 0; i < n; i++ {
		gname := names[rng.Intn(len(names))]
		g := s.Group(gname)
		if g == nil {
			s.CreateGroup(gname, ID{uint64(rng.Intn(50)), 0}, int64(rng.Intn(5))-1)
			continue
		}
		cname := names[rng.Intn(len(names))]
		c := g.Consumer(cname)
		id := ID{uint64(rng.Intn(40)), uint64(rng.Intn(3))}
		switch rng.Intn(9) {
		case 0:
			if rng.Intn(4) == 0 {
				s.DestroyGroup(g)
			}
		case 1:
			s.SetGroupLast(g, id, int64(rng.Intn(100)))
		case 2:
			if c == nil {
				s.CreateConsumer(g, cname, int64(rng.Intn(1e6)))
			} else if rng.Intn(3) == 0 {
				s.DeleteConsumer(c)
			}
		case 3:
			if c != nil {
				s.TouchConsumer(c, int64(rng.Intn(1e6)))
			}
		case 4, 5, 6:
			if c != nil {
				s.SetPending(g, id, c, int64(rng.Intn(1e6)), uint64(rng.Intn(10)))
			}
		default:
			s.Ack(g, id)
		}
	}
}

func TestGroupsDeltaEncodingClone(t *testing.T) {
	for seed := int64(0); seed < 50; seed++ {
		primary, replica := groupStream(), groupStream()
		rng := rand.New(rand.NewSource(seed))
		for round := 0; round < 5; round++ {
			randomOps(primary, rng, 60)
			checkInvariants(t, primary)
			d, ok := primary.Delta()
			if !ok {
				t.Fatal("Delta not ok")
			}
			if len(d) > 0 {
				if applied, err := replica.ApplyDelta(d); !applied || err != nil {
					t.Fatalf("seed %d: ApplyDelta %v %v", seed, applied, err)
				}
				// Applying it again is a no-op.
				if applied, err := replica.ApplyDelta(d); applied || err != nil {
					t.Fatalf("seed %d: second ApplyDelta %v %v", seed, applied, err)
				}
			}
			primary.ResetDelta()
			replica.ResetDelta()
			checkInvariants(t, replica)
			if !bytes.Equal(groupsBytes(primary), groupsBytes(replica)) || primary.ver != replica.ver {
				t.Fatalf("seed %d round %d: replica differs", seed, round)
			}
		}
		enc := groupsBytes(primary)
		dec := groupStream()
		r := reader{b: enc}
		decodeGroups(&r, dec)
		if r.err != nil || len(r.b) != 0 || !bytes.Equal(groupsBytes(dec), enc) {
			t.Fatalf("seed %d: decode: %v", seed, r.err)
		}
		checkInvariants(t, dec)
		cl := groupStream()
		cl.cg = primary.cg.clone(cl)
		checkInvariants(t, cl)
		if !bytes.Equal(groupsBytes(cl), enc) {
			t.Fatalf("seed %d: clone differs", seed)
		}
		// The clone is deep: changing it leaves the original alone.
		cl.RangeGroups(func(g *Group) bool {
			g.RangeConsumers(func(c *Consumer) bool { cl.DeleteConsumer(c); return false })
			return true
		})
		if !bytes.Equal(groupsBytes(primary), enc) {
			t.Fatalf("seed %d: clone shares state", seed)
		}
	}
}

func TestGroupsApplyRefusesBadOps(t *testing.T) {
	s := groupStream()
	g := s.CreateGroup("g", ID{}, 0)
	s.CreateConsumer(g, "c", 1)
	s.ResetDelta()
	for _, op := range [][]byte{
		append([]byte{opCreateGroup}, appendID(appendString(nil, "g"), ID{})...), // exists
		append([]byte{opDestroyGroup}, appendString(nil, "nope")...),
		append([]byte{opAck}, appendID(appendString(nil, "g"), ID{1, 1})...), // not pending
		append([]byte{opSetPending}, appendString(appendID(appendString(nil, "g"), ID{1, 1}), "x")...),
		append([]byte{opCreateConsumer}, appendInt64(appendString(appendString(nil, "g"), "c"), 0)...),
		{opTouchConsumer},
		{firstGroupOp + 60},
	} {
		delta := binary.LittleEndian.AppendUint64(nil, s.inc)
		delta = binary.LittleEndian.AppendUint64(delta, s.ver)
		delta = binary.LittleEndian.AppendUint32(delta, 1)
		delta = append(delta, op...)
		if _, err := s.ApplyDelta(delta); err == nil {
			t.Fatalf("op %x: applied", op)
		}
		// A refused op changes nothing the test relies on; start over.
		s = groupStream()
		g = s.CreateGroup("g", ID{}, 0)
		s.CreateConsumer(g, "c", 1)
		s.ResetDelta()
	}
}

// TestGroupsLargePEL: 100k pending entries, each operation O(log n): the
// whole run stays far below what a linear PEL would take (10^10 steps).
func TestGroupsLargePEL(t *testing.T) {
	s := groupStream()
	g := s.CreateGroup("g", ID{}, 0)
	cs := []*Consumer{s.CreateConsumer(g, "a", 0), s.CreateConsumer(g, "b", 0)}
	const n = 100_000
	for i := uint64(0); i < n; i++ {
		s.SetPending(g, ID{i, 0}, cs[i%2], 1, 1)
	}
	for i := uint64(0); i < n; i += 2 {
		s.SetPending(g, ID{i, 0}, cs[1], 2, 2) // reassign
	}
	for i := uint64(0); i < n; i += 3 {
		s.Ack(g, ID{i, 0})
	}
	if cs[0].PendingCount()+cs[1].PendingCount() != g.PendingCount() || cs[0].PendingCount() != 0 {
		t.Fatalf("a %d b %d g %d", cs[0].PendingCount(), cs[1].PendingCount(), g.PendingCount())
	}
	s.ResetDelta()
	if s.DeleteConsumer(cs[1]) != g.PendingCount()+cs[1].PendingCount() && g.PendingCount() != 0 {
		t.Fatal("DeleteConsumer")
	}
}

func TestLagAndDistance(t *testing.T) {
	s := groupStream()
	g := s.CreateGroup("g", ID{}, 0)
	if lag, ok := s.Lag(g); !ok || lag != 0 {
		t.Fatalf("new stream lag %d %v", lag, ok)
	}
	// An emptied stream: 3 entries added, all gone, last 3-0.
	s.entriesAdded, s.lastID = 3, ID{3, 0}
	if d := s.EstimateDistance(ID{2, 0}); d != 3 {
		t.Fatalf("distance %d", d)
	}
	if d := s.EstimateDistance(ID{4, 0}); d != Invalid {
		t.Fatalf("future distance %d", d)
	}
	s.Deliver(g, ID{3, 0}) // entries read 0 -> 1 (counter known, no tombstones)
	if g.EntriesRead != 1 || g.LastID != (ID{3, 0}) {
		t.Fatalf("deliver: %+v", g)
	}
	if lag, ok := s.Lag(g); !ok || lag != 2 {
		t.Fatalf("lag %d %v", lag, ok)
	}
	s.Deliver(g, ID{2, 0}) // behind: nothing
	if g.LastID != (ID{3, 0}) {
		t.Fatal("deliver went back")
	}
}

// TestGroupsWithEntries: a stream with entries and groups reaches a
// replica through its whole encoding, then deltas mixing entries' and
// groups' operations (XREADGROUP's deliveries as Deliver and SetPending),
// and both encode the same; a clone does too, and Decode keeps the
// groups' memory.
func TestGroupsWithEntries(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	s := New()
	next := uint64(1)
	add := func(n int) {
		for i := 0; i < n; i++ {
			s.Append(ID{next, 0}, [][]byte{[]byte("f"), []byte(fmt.Sprint(next))})
			next++
		}
	}
	add(50)
	g := s.CreateGroup("g", ID{}, 0)
	s.CreateConsumer(g, "a", 1)
	replica, err := Decode(s.AppendBinary(nil))
	if err != nil {
		t.Fatal(err)
	}
	journaled(s)
	for round := 0; round < 20; round++ {
		add(rng.Intn(30))
		c := g.Consumer("a")
		if rng.Intn(3) == 0 {
			if c2 := g.Consumer("b"); c2 == nil {
				c = s.CreateConsumer(g, "b", int64(round))
			} else {
				c = c2
			}
		}
		start, _ := g.LastID.Incr()
		var ids []ID
		s.Range(start, MaxID, false, func(e Entry) bool {
			ids = append(ids, e.ID)
			return len(ids) < 10
		})
		for _, id := range ids {
			s.Deliver(g, id)
			s.SetPending(g, id, c, int64(round), 1)
		}
		if p := g.FirstPending(); p != nil && rng.Intn(2) == 0 {
			s.Ack(g, p.ID)
		}
		if rng.Intn(4) == 0 {
			s.Delete(ID{uint64(rng.Intn(int(next))) + 1, 0})
		}
		d, ok := s.Delta()
		if !ok {
			t.Fatal("no delta")
		}
		if _, err := replica.ApplyDelta(d); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		s.ResetDelta()
		replica.ResetDelta()
		if string(s.AppendBinary(nil)) != string(replica.AppendBinary(nil)) {
			t.Fatalf("round %d: replica differs", round)
		}
		if lag, ok := s.Lag(g); ok != true && s.MaxDeletedID().IsZero() {
			t.Fatalf("round %d: lag unknown without deletions (%d)", round, lag)
		}
	}
	checkInvariants(t, replica)
	if replica.MemSize() != s.MemSize() {
		t.Fatalf("MemSize %d, replica %d", s.MemSize(), replica.MemSize())
	}
	cl := s.Clone()
	checkInvariants(t, cl)
	if string(groupsBytes(cl)) != string(groupsBytes(s)) || cl.cg.memSize() != s.cg.memSize() {
		t.Fatal("clone's groups differ")
	}
}

// BenchmarkPELOps: one delivery (SetPending), one claim by another
// consumer and one acknowledgement against a PEL of 100k entries; the cost
// per operation grows with log n, not n.
func BenchmarkPELOps(b *testing.B) {
	s := groupStream()
	g := s.CreateGroup("g", ID{}, 0)
	c1, c2 := s.CreateConsumer(g, "a", 0), s.CreateConsumer(g, "b", 0)
	const n = 100_000
	for i := uint64(0); i < n; i++ {
		s.SetPending(g, ID{i, 0}, c1, 1, 1)
	}
	s.ResetDelta()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		id := ID{n + uint64(i), 0}
		s.SetPending(g, id, c1, 2, 1)
		s.SetPending(g, id, c2, 3, 2)
		s.Ack(g, id)
		if i%1024 == 0 {
			s.ResetDelta()
		}
	}
}

package stream

import (
	"github.com/tidwall/btree"
)

// Consumer groups as Redis 7.0.15 keeps them (t_stream.c, stream.h): a
// stream's groups by name (in byte order, as Redis's rax), each with its
// last delivered ID, its entries-read counter, its pending entries list
// (PEL, by ID) and its consumers by name, each with its own PEL holding
// the same *Pending values as the group's (Redis's shared streamNACK).
//
// Every tree is an ordered B-tree (github.com/tidwall/btree, without its
// locks: the caller holds the key's shard lock), so a lookup, an insert
// or a removal in a PEL of any size is O(log n).

// treeOpts: no locks (the shard lock guards the stream), the library's
// default degree.
var treeOpts = btree.Options{NoLocks: true}

// groups is a stream's consumer groups by name.
type groups struct {
	t *btree.BTreeG[*Group] // nil until the first group
	// mem is the groups' estimated memory (memSize), kept as they change.
	mem int
}

// pelTree is a pending entries list by ID.
type pelTree struct{ t *btree.BTreeG[*Pending] }

// consumerTree is a group's consumers by name.
type consumerTree struct{ t *btree.BTreeG[*Consumer] }

func newPEL() *pelTree {
	return &pelTree{btree.NewBTreeGOptions(func(a, b *Pending) bool { return a.ID.Less(b.ID) }, treeOpts)}
}

func newConsumerTree() *consumerTree {
	return &consumerTree{btree.NewBTreeGOptions(func(a, b *Consumer) bool { return a.Name < b.Name }, treeOpts)}
}

func newGroupTree() *btree.BTreeG[*Group] {
	return btree.NewBTreeGOptions(func(a, b *Group) bool { return a.Name < b.Name }, treeOpts)
}

// Estimated memory of each item, as this package holds it: what
// maxmemory counts.
const (
	// Measured (heap growth per object, names of 8 bytes counted apart):
	// a group 322 bytes with its two ordered trees, a consumer 194, a
	// pending entry 84.
	groupMem    = 312 // the Group, its two trees, its key in the groups' tree
	consumerMem = 184 // the Consumer, its tree, its key
	pendingMem  = 84  // the Pending and its items in both trees
)

// Delta operation codes of the groups (>= firstGroupOp).
const (
	opCreateGroup    = firstGroupOp + iota // name, last ID, entries read
	opDestroyGroup                         // name
	opSetGroupLast                         // name, ID, entries read
	opCreateConsumer                       // group, name, seen time
	opDeleteConsumer                       // group, name
	opSetPending                           // group, ID, consumer, delivery time, delivery count
	opAck                                  // group, ID
	opTouchConsumer                        // group, name, seen time
)

// ---- reading ----

// Group returns the group named name, or nil.
func (s *Stream) Group(name string) *Group {
	if s.cg.t == nil {
		return nil
	}
	g, _ := s.cg.t.Get(&Group{Name: name})
	return g
}

// GroupCount returns the number of consumer groups.
func (s *Stream) GroupCount() int {
	if s.cg.t == nil {
		return 0
	}
	return s.cg.t.Len()
}

// RangeGroups calls fn for each group in name order until fn returns
// false. The groups must not change meanwhile.
func (s *Stream) RangeGroups(fn func(g *Group) bool) {
	if s.cg.t != nil {
		s.cg.t.Scan(fn)
	}
}

// Consumer returns the group's consumer named name, or nil.
func (g *Group) Consumer(name string) *Consumer {
	c, _ := g.consumers.t.Get(&Consumer{Name: name})
	return c
}

// ConsumerCount returns the number of the group's consumers.
func (g *Group) ConsumerCount() int { return g.consumers.t.Len() }

// RangeConsumers calls fn for each consumer in name order until fn
// returns false. The group must not change meanwhile.
func (g *Group) RangeConsumers(fn func(c *Consumer) bool) { g.consumers.t.Scan(fn) }

// PendingCount returns the length of the group's PEL.
func (g *Group) PendingCount() int { return g.pel.t.Len() }

// Pending returns the group's pending entry id, or nil.
func (g *Group) Pending(id ID) *Pending { return g.pel.get(id) }

// FirstPending and LastPending return the PEL's smallest and greatest
// entries (nil when it is empty).
func (g *Group) FirstPending() *Pending { p, _ := g.pel.t.Min(); return p }

// LastPending: see FirstPending.
func (g *Group) LastPending() *Pending { p, _ := g.pel.t.Max(); return p }

// RangePending calls fn for each of the group's pending entries with
// start <= ID <= end, in ID order, until fn returns false. The group must
// not change meanwhile.
func (g *Group) RangePending(start, end ID, fn func(p *Pending) bool) { g.pel.rng(start, end, fn) }

// Group returns the consumer's group.
func (c *Consumer) Group() *Group { return c.group }

// PendingCount returns the length of the consumer's PEL.
func (c *Consumer) PendingCount() int { return c.pel.t.Len() }

// RangePending calls fn for each of the consumer's pending entries with
// start <= ID <= end, in ID order, until fn returns false.
func (c *Consumer) RangePending(start, end ID, fn func(p *Pending) bool) { c.pel.rng(start, end, fn) }

func (p *pelTree) get(id ID) *Pending {
	v, _ := p.t.Get(&Pending{ID: id})
	return v
}

func (p *pelTree) rng(start, end ID, fn func(p *Pending) bool) {
	if end.Less(start) {
		return
	}
	p.t.Ascend(&Pending{ID: start}, func(v *Pending) bool {
		if end.Less(v.ID) {
			return false
		}
		return fn(v)
	})
}

// ---- changing (each records one delta operation) ----

// CreateGroup creates the group name with its last delivered ID and
// entries-read counter (Invalid when unknown); it returns nil when the
// group exists (streamCreateCG).
func (s *Stream) CreateGroup(name string, last ID, entriesRead int64) *Group {
	if s.Group(name) != nil {
		return nil
	}
	if s.op(opCreateGroup) {
		s.delta = appendString(s.delta, name)
		s.delta = appendID(s.delta, last)
		s.delta = appendInt64(s.delta, entriesRead)
	}
	return s.addGroup(name, last, entriesRead)
}

func (s *Stream) addGroup(name string, last ID, entriesRead int64) *Group {
	if s.cg.t == nil {
		s.cg.t = newGroupTree()
	}
	g := &Group{Name: name, LastID: last, EntriesRead: entriesRead, s: s, pel: newPEL(), consumers: newConsumerTree()}
	s.cg.t.Set(g)
	s.cg.mem += groupMem + len(name)
	return g
}

// DestroyGroup removes g with its consumers and pending entries.
func (s *Stream) DestroyGroup(g *Group) {
	if s.op(opDestroyGroup) {
		s.delta = appendString(s.delta, g.Name)
	}
	s.cg.t.Delete(g)
	s.cg.mem -= groupMem + len(g.Name) + g.pel.t.Len()*pendingMem
	g.consumers.t.Scan(func(c *Consumer) bool {
		s.cg.mem -= consumerMem + len(c.Name)
		return true
	})
	g.s = nil
}

// SetGroupLast sets g's last delivered ID and entries-read counter
// (XGROUP SETID, XREADGROUP, XCLAIM's LASTID).
func (s *Stream) SetGroupLast(g *Group, id ID, entriesRead int64) {
	if s.op(opSetGroupLast) {
		s.delta = appendString(s.delta, g.Name)
		s.delta = appendID(s.delta, id)
		s.delta = appendInt64(s.delta, entriesRead)
	}
	g.LastID, g.EntriesRead = id, entriesRead
}

// CreateConsumer creates g's consumer name, seen at now; it returns nil
// when it exists (streamCreateConsumer).
func (s *Stream) CreateConsumer(g *Group, name string, now int64) *Consumer {
	if g.Consumer(name) != nil {
		return nil
	}
	if s.op(opCreateConsumer) {
		s.delta = appendString(s.delta, g.Name)
		s.delta = appendString(s.delta, name)
		s.delta = appendInt64(s.delta, now)
	}
	return s.addConsumer(g, name, now)
}

func (s *Stream) addConsumer(g *Group, name string, now int64) *Consumer {
	c := &Consumer{Name: name, SeenTime: now, group: g, pel: newPEL()}
	g.consumers.t.Set(c)
	s.cg.mem += consumerMem + len(name)
	return c
}

// DeleteConsumer removes c and its pending entries from its group
// (streamDelConsumer) and returns how many pending entries it had.
func (s *Stream) DeleteConsumer(c *Consumer) int {
	g := c.group
	if s.op(opDeleteConsumer) {
		s.delta = appendString(s.delta, g.Name)
		s.delta = appendString(s.delta, c.Name)
	}
	n := c.pel.t.Len()
	c.pel.t.Scan(func(p *Pending) bool {
		g.pel.t.Delete(p)
		return true
	})
	c.pel.t.Clear()
	g.consumers.t.Delete(c)
	s.cg.mem -= consumerMem + len(c.Name) + n*pendingMem
	c.group = nil
	return n
}

// TouchConsumer sets c's seen time (Redis's streamLookupConsumer with
// refresh).
func (s *Stream) TouchConsumer(c *Consumer, now int64) {
	if s.op(opTouchConsumer) {
		s.delta = appendString(s.delta, c.group.Name)
		s.delta = appendString(s.delta, c.Name)
		s.delta = appendInt64(s.delta, now)
	}
	c.SeenTime = now
}

// SetPending makes id a pending entry of g owned by c (a consumer of g),
// delivered at deliveryTime for the deliveryCount-th time: it creates the
// entry, or updates it and moves it to c's PEL when another consumer owned
// it (XREADGROUP, XCLAIM, XAUTOCLAIM).
func (s *Stream) SetPending(g *Group, id ID, c *Consumer, deliveryTime int64, deliveryCount uint64) *Pending {
	if s.op(opSetPending) {
		s.delta = appendString(s.delta, g.Name)
		s.delta = appendID(s.delta, id)
		s.delta = appendString(s.delta, c.Name)
		s.delta = appendInt64(s.delta, deliveryTime)
		s.delta = appendUvarint(s.delta, deliveryCount)
	}
	p := g.pel.get(id)
	if p == nil {
		p = &Pending{ID: id, Consumer: c}
		g.pel.t.Set(p)
		c.pel.t.Set(p)
		s.cg.mem += pendingMem
	} else if p.Consumer != c {
		p.Consumer.pel.t.Delete(p)
		p.Consumer = c
		c.pel.t.Set(p)
	}
	p.DeliveryTime, p.DeliveryCount = deliveryTime, deliveryCount
	return p
}

// Ack removes id from g's PEL and its consumer's and reports whether it
// was pending (XACK; XCLAIM and XAUTOCLAIM for deleted entries).
func (s *Stream) Ack(g *Group, id ID) bool {
	p := g.pel.get(id)
	if p == nil {
		return false
	}
	if s.op(opAck) {
		s.delta = appendString(s.delta, g.Name)
		s.delta = appendID(s.delta, id)
	}
	g.pel.t.Delete(p)
	p.Consumer.pel.t.Delete(p)
	s.cg.mem -= pendingMem
	return true
}

// applyGroupOp applies one delta operation of the groups (op >=
// firstGroupOp), reading its payload from r, through the same methods
// that recorded it (so that it is recorded again in s's delta). A payload
// that does not fit s's state (an unknown group, an existing one ...)
// fails r.
func (s *Stream) applyGroupOp(op byte, r *reader) {
	name := string(r.bytes())
	switch op {
	case opCreateGroup:
		last, read := r.id(), r.int64()
		if r.err != nil || s.Group(name) != nil {
			r.fail()
			return
		}
		s.CreateGroup(name, last, read)
		return
	}
	g := s.Group(name)
	if r.err != nil || g == nil {
		r.fail()
		return
	}
	switch op {
	case opDestroyGroup:
		s.DestroyGroup(g)
	case opSetGroupLast:
		id, read := r.id(), r.int64()
		if r.err == nil {
			s.SetGroupLast(g, id, read)
		}
	case opCreateConsumer:
		cname, now := string(r.bytes()), r.int64()
		if r.err != nil || g.Consumer(cname) != nil {
			r.fail()
			return
		}
		s.CreateConsumer(g, cname, now)
	case opDeleteConsumer, opTouchConsumer:
		c := g.Consumer(string(r.bytes()))
		var now int64
		if op == opTouchConsumer {
			now = r.int64()
		}
		if r.err != nil || c == nil {
			r.fail()
			return
		}
		if op == opDeleteConsumer {
			s.DeleteConsumer(c)
		} else {
			s.TouchConsumer(c, now)
		}
	case opSetPending:
		id := r.id()
		c := g.Consumer(string(r.bytes()))
		t, n := r.int64(), r.uvarint()
		if r.err != nil || c == nil {
			r.fail()
			return
		}
		s.SetPending(g, id, c, t, n)
	case opAck:
		id := r.id()
		if r.err != nil || !s.Ack(g, id) {
			r.fail()
		}
	default:
		r.fail()
	}
}

// firstGroupOp is the first delta operation code of the groups; the
// entries' codes are below it.
const firstGroupOp = 64

// ---- whole value ----

// appendBinary appends the groups' part of the whole encoding:
//
//	uvarint groups, then per group in name order:
//	  name, last ID, entries read (varint),
//	  uvarint consumers, then per consumer in name order: name, seen time,
//	  uvarint pending, then per entry in ID order: ID, consumer's index
//	  (uvarint, in the order above), delivery time, delivery count.
func (g *groups) appendBinary(dst []byte) []byte {
	if g.t == nil {
		return appendUvarint(dst, 0)
	}
	dst = appendUvarint(dst, uint64(g.t.Len()))
	idx := map[*Consumer]uint64{}
	g.t.Scan(func(cg *Group) bool {
		dst = appendString(dst, cg.Name)
		dst = appendID(dst, cg.LastID)
		dst = appendInt64(dst, cg.EntriesRead)
		dst = appendUvarint(dst, uint64(cg.consumers.t.Len()))
		clear(idx)
		cg.consumers.t.Scan(func(c *Consumer) bool {
			idx[c] = uint64(len(idx))
			dst = appendString(dst, c.Name)
			dst = appendInt64(dst, c.SeenTime)
			return true
		})
		dst = appendUvarint(dst, uint64(cg.pel.t.Len()))
		cg.pel.t.Scan(func(p *Pending) bool {
			dst = appendID(dst, p.ID)
			dst = appendUvarint(dst, idx[p.Consumer])
			dst = appendInt64(dst, p.DeliveryTime)
			dst = appendUvarint(dst, p.DeliveryCount)
			return true
		})
		return true
	})
	return dst
}

// decodeGroups reads the groups' part of the whole encoding into s,
// refusing names out of order or repeated, IDs out of order and consumer
// indexes out of range.
func decodeGroups(r *reader, s *Stream) {
	s.cg = groups{}
	n := r.count(4) // a group takes at least 4 bytes
	var prevGroup string
	for i := 0; i < n && r.err == nil; i++ {
		name := string(r.bytes())
		last, read := r.id(), r.int64()
		if r.err != nil || (i > 0 && name <= prevGroup) {
			r.fail()
			return
		}
		prevGroup = name
		g := s.addGroup(name, last, read)
		nc := r.count(2)
		cs := make([]*Consumer, 0, nc)
		for j := 0; j < nc && r.err == nil; j++ {
			cname, seen := string(r.bytes()), r.int64()
			if r.err != nil || (j > 0 && cname <= cs[j-1].Name) {
				r.fail()
				return
			}
			c := &Consumer{Name: cname, SeenTime: seen, group: g, pel: newPEL()}
			g.consumers.t.Load(c)
			s.cg.mem += consumerMem + len(cname)
			cs = append(cs, c)
		}
		np := r.count(5)
		var prev ID
		for j := 0; j < np && r.err == nil; j++ {
			id, ci, t, cnt := r.id(), r.uvarint(), r.int64(), r.uvarint()
			if r.err != nil || ci >= uint64(len(cs)) || (j > 0 && !prev.Less(id)) {
				r.fail()
				return
			}
			prev = id
			p := &Pending{ID: id, Consumer: cs[ci], DeliveryTime: t, DeliveryCount: cnt}
			g.pel.t.Load(p)
			cs[ci].pel.t.Load(p)
			s.cg.mem += pendingMem
		}
	}
}

// memSize is the groups' estimated memory.
func (g *groups) memSize() int { return g.mem }

// clone returns a deep copy of g belonging to s.
func (g *groups) clone(s *Stream) groups {
	out := groups{mem: g.mem}
	if g.t == nil {
		return out
	}
	out.t = newGroupTree()
	g.t.Scan(func(src *Group) bool {
		dst := &Group{Name: src.Name, LastID: src.LastID, EntriesRead: src.EntriesRead, s: s,
			pel: newPEL(), consumers: newConsumerTree()}
		byName := make(map[*Consumer]*Consumer, src.consumers.t.Len())
		src.consumers.t.Scan(func(c *Consumer) bool {
			nc := &Consumer{Name: c.Name, SeenTime: c.SeenTime, group: dst, pel: newPEL()}
			dst.consumers.t.Load(nc)
			byName[c] = nc
			return true
		})
		src.pel.t.Scan(func(p *Pending) bool {
			c := byName[p.Consumer]
			np := &Pending{ID: p.ID, Consumer: c, DeliveryTime: p.DeliveryTime, DeliveryCount: p.DeliveryCount}
			dst.pel.t.Load(np)
			c.pel.t.Load(np)
			return true
		})
		out.t.Load(dst)
		return true
	})
	return out
}

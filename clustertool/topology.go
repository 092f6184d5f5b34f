package clustertool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Slots is the number of hash slots.
const Slots = 16384

// The topology as CELLCLUSTER CONFIG takes it (Dragonfly's DFLYCLUSTER
// CONFIG JSON), spelled out here rather than taken from package cluster:
// the tool speaks the wire format, which must not follow a change of the
// server's types silently.

// Node is a node of the topology.
type Node struct {
	ID   string `json:"id"`
	IP   string `json:"ip"`
	Port int    `json:"port"`
}

// Addr is "ip:port".
func (n Node) Addr() string { return joinHostPort(n.IP, n.Port) }

// SlotRange is an inclusive range of slots.
type SlotRange struct {
	Start int `json:"start"`
	End   int `json:"end"`
}

// Migration is a declared slot migration on its source shard: the slots
// go to the node named.
type Migration struct {
	SlotRanges []SlotRange `json:"slot_ranges"`
	NodeID     string      `json:"node_id"`
	IP         string      `json:"ip"`
	Port       int         `json:"port"`
}

// Shard is a master, its replicas, its slots and its outgoing migrations.
type Shard struct {
	SlotRanges []SlotRange `json:"slot_ranges"`
	Master     Node        `json:"master"`
	Replicas   []Node      `json:"replicas"`
	Migrations []Migration `json:"migrations,omitempty"`
}

// Topology is the list of shards.
type Topology []Shard

// ParseTopology decodes a topology's JSON.
func ParseTopology(b []byte) (Topology, error) {
	var t Topology
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	return t, nil
}

// JSON encodes t: empty lists as [], never null.
func (t Topology) JSON() string {
	out := make(Topology, len(t))
	for i, s := range t {
		if s.SlotRanges == nil {
			s.SlotRanges = []SlotRange{}
		}
		if s.Replicas == nil {
			s.Replicas = []Node{}
		}
		out[i] = s
	}
	b, err := json.Marshal(out)
	if err != nil {
		panic(err) // strings and integers always marshal
	}
	return string(b)
}

// Canonical returns t's JSON in one spelling, to compare two topologies
// whatever their whitespace and empty lists.
func (t Topology) Canonical() string { return t.JSON() }

// Clone returns a deep copy of t.
func (t Topology) Clone() Topology {
	c, err := ParseTopology([]byte(t.JSON()))
	if err != nil {
		panic(err)
	}
	return c
}

// Nodes returns every node, masters first in shard order, then replicas.
func (t Topology) Nodes() []Node {
	var out []Node
	for _, s := range t {
		out = append(out, s.Master)
	}
	for _, s := range t {
		out = append(out, s.Replicas...)
	}
	return out
}

// Master returns the index of the shard whose master is id (or the only
// master whose id starts with id, at least 8 digits), or -1.
func (t Topology) Master(id string) int {
	found := -1
	for i, s := range t {
		if s.Master.ID == id {
			return i
		}
		if len(id) >= 8 && strings.HasPrefix(s.Master.ID, id) {
			if found >= 0 {
				return -1 // ambiguous
			}
			found = i
		}
	}
	return found
}

// Find reports whether id is a node of t.
func (t Topology) Find(id string) bool {
	for _, n := range t.Nodes() {
		if n.ID == id {
			return true
		}
	}
	return false
}

// Owners returns each slot's shard index (-1: none), and the problems
// found: slots owned twice or by none, ranges out of bounds.
func (t Topology) Owners() (owner [Slots]int, problems []string) {
	for i := range owner {
		owner[i] = -1
	}
	for si, s := range t {
		for _, r := range s.SlotRanges {
			if r.Start < 0 || r.End >= Slots || r.Start > r.End {
				problems = append(problems, fmt.Sprintf("shard of %s: invalid slot range %d-%d", s.Master.Addr(), r.Start, r.End))
				continue
			}
			for slot := r.Start; slot <= r.End; slot++ {
				if o := owner[slot]; o >= 0 {
					problems = append(problems, fmt.Sprintf("slot %d is owned by %s and %s", slot, t[o].Master.Addr(), s.Master.Addr()))
					continue
				}
				owner[slot] = si
			}
		}
	}
	var missing []int
	for slot, o := range owner {
		if o < 0 {
			missing = append(missing, slot)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("%d slots are owned by no shard: %s", len(missing), FormatRanges(Ranges(missing))))
	}
	return owner, problems
}

// SlotList returns shard i's slots in order.
func (t Topology) SlotList(i int) []int {
	var out []int
	for _, r := range t[i].SlotRanges {
		for s := r.Start; s <= r.End; s++ {
			out = append(out, s)
		}
	}
	sort.Ints(out)
	return out
}

// SlotCount returns how many slots shard i owns.
func (t Topology) SlotCount(i int) int {
	n := 0
	for _, r := range t[i].SlotRanges {
		n += r.End - r.Start + 1
	}
	return n
}

// Ranges compresses sorted slots into ranges.
func Ranges(slots []int) []SlotRange {
	var out []SlotRange
	for _, s := range slots {
		if n := len(out); n > 0 && out[n-1].End+1 == s {
			out[n-1].End = s
			continue
		}
		out = append(out, SlotRange{s, s})
	}
	return out
}

// FormatRanges writes ranges as SLOT-MIGRATION-STATUS does:
// "100-200,300-300".
func FormatRanges(rs []SlotRange) string {
	var b bytes.Buffer
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r.Start) + "-" + strconv.Itoa(r.End))
	}
	return b.String()
}

// move returns t with slots (sorted) moved from shard from to shard to,
// every shard's ranges recomputed, no migrations.
func (t Topology) move(from, to int, slots []int) Topology {
	nt := t.Clone()
	moving := map[int]bool{}
	for _, s := range slots {
		moving[s] = true
	}
	var keep []int
	for _, s := range nt.SlotList(from) {
		if !moving[s] {
			keep = append(keep, s)
		}
	}
	gain := append(nt.SlotList(to), slots...)
	sort.Ints(gain)
	nt[from].SlotRanges = Ranges(keep)
	nt[to].SlotRanges = Ranges(gain)
	for i := range nt {
		nt[i].Migrations = nil
	}
	return nt
}

// splitSlots divides the slots over masters as redis-cli --cluster create
// does: each gets 16384/masters slots (rounded per master so that the
// total is exact), in order.
func splitSlots(masters int) [][2]int {
	out := make([][2]int, masters)
	per := float64(Slots) / float64(masters)
	cursor := 0.0
	first := 0
	for i := range masters {
		last := int(cursor + per - 1 + 0.5)
		if last > Slots-1 || i == masters-1 {
			last = Slots - 1
		}
		if last < first {
			last = first
		}
		out[i] = [2]int{first, last}
		first = last + 1
		cursor += per
	}
	return out
}

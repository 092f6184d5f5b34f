package stream

import "encoding/binary"

// RaxNodes returns the number of nodes of the radix tree (rax) in which
// Redis 7.0.15 would keep this stream's nodes (XINFO STREAM's
// radix-tree-nodes): its keys are the nodes' first IDs, 16 bytes big-endian.
// Redis's rax keeps such a key set in canonical form (inserting splits
// compressed nodes, removing merges them again), so the count follows from
// the keys alone: an empty tree is its root; else each group of keys
// sharing a prefix past a branch costs a compressed node for the shared
// bytes (when there are any), then a branching node where they part (or,
// for a single key, a leaf). It takes O(nodes * 16).
func (s *Stream) RaxNodes() int64 {
	if len(s.nodes) == 0 {
		return 1
	}
	keys := make([][16]byte, len(s.nodes))
	for i, n := range s.nodes {
		binary.BigEndian.PutUint64(keys[i][:8], n.master.Ms)
		binary.BigEndian.PutUint64(keys[i][8:], n.master.Seq)
	}
	return raxCount(keys, 0)
}

// raxCount counts the rax nodes under the sorted keys, which share their
// first depth bytes.
func raxCount(keys [][16]byte, depth int) int64 {
	if len(keys) == 1 {
		if depth < 16 {
			return 2 // the compressed rest and the leaf
		}
		return 1
	}
	first, last := &keys[0], &keys[len(keys)-1]
	p := depth
	for first[p] == last[p] {
		p++
	}
	n := int64(1) // the branching node at p
	if p > depth {
		n++ // the compressed node of the shared bytes
	}
	for i := 0; i < len(keys); {
		j := i + 1
		for j < len(keys) && keys[j][p] == keys[i][p] {
			j++
		}
		n += raxCount(keys[i:j], p+1)
		i = j
	}
	return n
}

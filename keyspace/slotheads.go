package keyspace

import "math/bits"

// slotHeads maps a hash slot to the head (index+1, never 0) of its list
// in one shard: open addressing with linear probing over uint64 buckets
// holding slot<<32 | head (0: empty), and backward-shift deletion, so
// there are no tombstones. It does what a map[uint16]uint32 would at
// about half the cost per operation (no hashing of the key beyond a
// multiply, one cache line per probe run) and as little memory (8 bytes
// a bucket, at most 7/8 full).
type slotHeads struct {
	b     []uint64
	n     int
	shift uint8 // 32 - log2(len(b))
}

func (h *slotHeads) home(slot uint16) int {
	return int((uint32(slot) + 1) * 0x9E3779B1 >> h.shift)
}

// find returns slot's bucket and whether it holds slot (else the empty
// bucket that ended the probe). len(h.b) must not be 0.
func (h *slotHeads) find(slot uint16) (int, bool) {
	mask := len(h.b) - 1
	for i := h.home(slot); ; i = (i + 1) & mask {
		switch v := h.b[i]; {
		case v == 0:
			return i, false
		case uint16(v>>32) == slot:
			return i, true
		}
	}
}

// get returns slot's head, 0 if slot is absent.
func (h *slotHeads) get(slot uint16) uint32 {
	if h.n == 0 {
		return 0
	}
	if i, ok := h.find(slot); ok {
		return uint32(h.b[i])
	}
	return 0
}

// set makes head (not 0) slot's head.
func (h *slotHeads) set(slot uint16, head uint32) {
	if (h.n+1)*8 > len(h.b)*7 {
		h.grow()
	}
	i, ok := h.find(slot)
	if !ok {
		h.n++
	}
	h.b[i] = uint64(slot)<<32 | uint64(head)
}

func (h *slotHeads) grow() {
	old := h.b
	n := max(8, 2*len(old))
	h.b = make([]uint64, n)
	h.shift = uint8(32 - bits.TrailingZeros(uint(n)))
	for _, v := range old {
		if v != 0 {
			i, _ := h.find(uint16(v >> 32))
			h.b[i] = v
		}
	}
}

// del removes slot, which must be present.
func (h *slotHeads) del(slot uint16) {
	i, ok := h.find(slot)
	if !ok {
		return
	}
	mask := len(h.b) - 1
	// Backward shift: move up every later bucket of the run whose home
	// does not lie cyclically in (i, j].
	for j := (i + 1) & mask; h.b[j] != 0; j = (j + 1) & mask {
		k := h.home(uint16(h.b[j] >> 32))
		if (j > i && (k <= i || k > j)) || (j < i && k <= i && k > j) {
			h.b[i] = h.b[j]
			i = j
		}
	}
	h.b[i] = 0
	h.n--
}

// each calls fn for every slot present.
func (h *slotHeads) each(fn func(slot uint16)) {
	for _, v := range h.b {
		if v != 0 {
			fn(uint16(v >> 32))
		}
	}
}

// reset empties h, releasing its buckets.
func (h *slotHeads) reset() { *h = slotHeads{} }

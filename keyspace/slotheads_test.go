package keyspace

import (
	"math/rand/v2"
	"testing"

	"github.com/cellserver/cellserver/keyslot"
)

// TestSlotHeads compares slotHeads with a map under random sets and
// deletes, on few slots (long probe runs, wrapping) and on all of them.
func TestSlotHeads(t *testing.T) {
	const cases = 200
	ops := 0
	for c := range cases {
		r := rand.New(rand.NewPCG(uint64(c), 3))
		span := []int{4, 20, 300, keyslot.Slots}[c%4]
		var h slotHeads
		m := map[uint16]uint32{}
		for range 2000 {
			slot := uint16(r.IntN(span))
			ops++
			if r.IntN(3) == 0 {
				if _, ok := m[slot]; ok {
					h.del(slot)
					delete(m, slot)
				}
			} else {
				v := r.Uint32N(1<<24) + 1
				h.set(slot, v)
				m[slot] = v
			}
			if h.n != len(m) {
				t.Fatalf("case %d: n %d, map %d", c, h.n, len(m))
			}
		}
		for s := range span {
			if got := h.get(uint16(s)); got != m[uint16(s)] {
				t.Fatalf("case %d: slot %d: %d, map %d", c, s, got, m[uint16(s)])
			}
		}
		n := 0
		h.each(func(s uint16) {
			n++
			if _, ok := m[s]; !ok {
				t.Fatalf("case %d: each gave absent slot %d", c, s)
			}
		})
		if n != len(m) {
			t.Fatalf("case %d: each gave %d slots, map has %d", c, n, len(m))
		}
	}
	t.Logf("%d cases, %d operations", cases, ops)
}

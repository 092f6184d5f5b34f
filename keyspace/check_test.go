package keyspace

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/keyslot"
)

// TestCheckInvariants: a keyspace built and thinned through the API passes
// CheckInvariants, with and without the slot index; each corruption of a
// table or of the figures beside it is reported, naming what disagrees.
func TestCheckInvariants(t *testing.T) {
	corruptions := []struct {
		name  string
		index bool // needs the slot index
		want  string
		do    func(ks *Keyspace, s *Shard)
	}{
		{"live count", false, "the table records", func(_ *Keyspace, s *Shard) { s.t.live++ }},
		{"filled count", false, "the table records", func(_ *Keyspace, s *Shard) { s.t.filled-- }},
		{"shard memory", false, "the shard records", func(_ *Keyspace, s *Shard) { s.bytes += 8 }},
		{"keyspace memory", false, "the shards' sum", func(ks *Keyspace, _ *Shard) { ks.used.Add(-8) }},
		{"lost slot", false, "not found by its key", func(_ *Keyspace, s *Shard) {
			for i, v := range s.t.slots {
				if v != 0 && v&idxMask != tombstone {
					s.t.slots[i] = tombstone
					return
				}
			}
		}},
		{"entry freed under its slot", false, "not in use", func(_ *Keyspace, s *Shard) {
			for j := uint32(0); j < s.t.next; j++ {
				if e := s.t.at(j); e.meta != 0 {
					e.meta = 0
					return
				}
			}
		}},
		{"slot count", true, "keys linked", func(ks *Keyspace, _ *Shard) {
			ks.dbs[0].slotCounts[keyslot.Of([]byte("k0"))].Add(1)
		}},
		{"slot list", true, "linked in the slot index", func(_ *Keyspace, s *Shard) {
			s.t.sx.heads.each(func(slot uint16) { s.t.sx.heads.set(slot, 0) })
		}},
	}
	checked := 0
	for _, index := range []bool{false, true} {
		build := func(t *testing.T) *Keyspace {
			ks, err := New(Config{Shards: 4, Databases: 2, SlotIndex: index})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 300 {
				set(ks, i%2, fmt.Sprintf("k%d", i), Value{Kind: KindString, Obj: []byte(strings.Repeat("v", i))})
			}
			for i := 0; i < 300; i += 3 {
				k := []byte(fmt.Sprintf("k%d", i))
				sh := ks.DB(i % 2).Shard(k)
				sh.Lock()
				sh.Delete(k, 0)
				sh.Unlock()
			}
			if err := ks.CheckInvariants(); err != nil {
				t.Fatalf("slot index %v, before any corruption: %v", index, err)
			}
			return ks
		}
		for _, c := range corruptions {
			if c.index && !index {
				continue
			}
			t.Run(fmt.Sprintf("%s/index=%v", c.name, index), func(t *testing.T) {
				ks := build(t)
				c.do(ks, ks.DB(0).Shard([]byte("k0")))
				err := ks.CheckInvariants()
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("CheckInvariants = %v, want an error with %q", err, c.want)
				}
				checked++
			})
		}
	}
	t.Logf("%d corruptions reported", checked)
}

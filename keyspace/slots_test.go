package keyspace

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cellserver/cellserver/keyslot"
)

// scanSlots counts db's keys per slot with a full scan, and checks every
// shard's lists against its entries: each live entry on its slot's list
// exactly once, links consistent both ways, lengths right.
func scanSlots(t *testing.T, ks *Keyspace, db int) map[uint16][][]byte {
	t.Helper()
	got := map[uint16][][]byte{}
	d := ks.DB(db)
	for i := range d.shards {
		s := &d.shards[i]
		s.mu.Lock()
		want := map[uint16]map[uint32]bool{}
		for j := uint32(0); j < s.t.next; j++ {
			if e := s.t.at(j); e.meta != 0 {
				k := s.t.key(e)
				sl := keyslot.Of(k)
				got[sl] = append(got[sl], bytes.Clone(k))
				if want[sl] == nil {
					want[sl] = map[uint32]bool{}
				}
				want[sl][j+1] = true
			}
		}
		if x := s.t.sx; x != nil {
			if x.heads.n != len(want) {
				t.Fatalf("db %d shard %d: %d slot lists, %d slots hold keys", db, i, x.heads.n, len(want))
			}
			x.heads.each(func(sl uint16) {
				if want[sl] == nil {
					t.Fatalf("db %d shard %d: slot %d has a list but no keys", db, i, sl)
				}
			})
			for sl := range want {
				head := x.heads.get(sl)
				seen := map[uint32]bool{}
				prev := uint32(0)
				for j := head; j != 0; j = x.link(j - 1).next {
					if !want[sl][j] || seen[j] {
						t.Fatalf("db %d shard %d slot %d: entry %d listed wrongly (live in slot: %v, seen: %v)", db, i, sl, j-1, want[sl][j], seen[j])
					}
					if x.link(j-1).prev != prev {
						t.Fatalf("db %d shard %d slot %d: entry %d prev %d, want %d", db, i, sl, j-1, x.link(j-1).prev, prev)
					}
					seen[j] = true
					prev = j
				}
				if len(seen) != len(want[sl]) {
					t.Fatalf("db %d shard %d slot %d: walked %d, entries %d", db, i, sl, len(seen), len(want[sl]))
				}
			}
		}
		s.mu.Unlock()
	}
	return got
}

// checkSlots compares CountKeysInSlot and KeysInSlot with a full scan, for
// every slot (without the index: the slots holding keys and a sample of
// the others).
func checkSlots(t *testing.T, ks *Keyspace, db int) {
	t.Helper()
	if e, s, tot := ks.Audit(); e != s || s != tot {
		t.Fatalf("memory accounting: entries %d, shards %d, total %d", e, s, tot)
	}
	want := scanSlots(t, ks, db)
	d := ks.DB(db)
	for sl := range uint16(keyslot.Slots) {
		if d.slotCounts == nil && len(want[sl]) == 0 && sl%97 != 0 {
			continue // without the index every call is a full scan
		}
		n := ks.CountKeysInSlot(db, sl)
		if n != len(want[sl]) {
			t.Fatalf("db %d: CountKeysInSlot(%d) = %d, a scan finds %d", db, sl, n, len(want[sl]))
		}
		if n == 0 {
			continue
		}
		keys := ks.KeysInSlot(db, sl, n+1)
		w := slices.Clone(want[sl])
		slices.SortFunc(keys, bytes.Compare)
		slices.SortFunc(w, bytes.Compare)
		if !slices.EqualFunc(keys, w, bytes.Equal) {
			t.Fatalf("db %d: KeysInSlot(%d) = %q, a scan finds %q", db, sl, keys, w)
		}
		if m := max(1, n/2); len(ks.KeysInSlot(db, sl, m)) != m {
			t.Fatalf("db %d: KeysInSlot(%d, %d) did not return %d keys", db, sl, m, m)
		}
	}
}

// propKey draws a key: most share a few hash tags (so slots hold many
// keys per shard), some are plain, some long enough for the key pages
// (compaction) and a few longer than bigKey.
func propKey(r *rand.Rand) []byte {
	switch x := r.IntN(100); {
	case x < 50:
		return fmt.Appendf(nil, "{t%d}:%d", r.IntN(6), r.IntN(40))
	case x < 70:
		return fmt.Appendf(nil, "k%d", r.IntN(200))
	case x < 98:
		i := r.IntN(500)
		return fmt.Appendf(nil, "{t%d}:%s%d", i%6, strings.Repeat("p", 100+i%130*7), i)
	default:
		return fmt.Appendf(nil, "big%d:%s", r.IntN(4), strings.Repeat("b", bigKey+10))
	}
}

type countJournal struct{ deletes int }

func (j *countJournal) Put(int, []byte, *Value) {}
func (j *countJournal) Delete(int, []byte)      { j.deletes++ }
func (j *countJournal) DeleteDB(int)            {}
func (j *countJournal) DeleteAll()              {}

// TestSlotIndexProperty runs random operations (with the index, and in
// every fifth case without it: writes, deletes, lazy and
// active expiry, eviction by memory and by a full table, Restore,
// DeleteSlot(s), Flush, FlushAll) and checks the slot index against a
// full scan every 25 steps and at the end.
func TestSlotIndexProperty(t *testing.T) {
	cases, steps := 30, 1500
	if testing.Short() {
		cases = 10
	}
	var compactions, evictions, deletedBySlot, flushes int
	for c := range cases {
		r := rand.New(rand.NewPCG(uint64(c), 15))
		j := &countJournal{}
		// Every fifth case without the index: the scanning fallback.
		cfg := Config{Databases: 2, Shards: 1 << r.IntN(2), SlotIndex: c%5 != 4, Journal: j}
		if c%3 == 1 {
			cfg.MaxMemory = 40 << 10
		}
		ks, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if c%3 == 2 {
			for i := range ks.DB(0).shards {
				ks.DB(0).shards[i].t.limit = 30
			}
		}
		now := int64(1000)
		for step := range steps {
			db := r.IntN(5) / 4 // mostly db 0, so that tables grow
			d := ks.DB(db)
			key := propKey(r)
			switch op := r.IntN(100); {
			case op < 45:
				s := d.Shard(key)
				s.Lock()
				v := Value{Kind: KindGCRA, N: uint64(step)}
				if r.IntN(3) == 0 {
					v.Exp = now + int64(r.IntN(50))
				}
				if r.IntN(4) == 0 {
					v.Kind, v.Obj = KindString, bytes.Repeat([]byte("v"), r.IntN(300))
				}
				s.Set(key, v)
				s.Unlock()
			case op < 55:
				s := d.Shard(key)
				s.Lock()
				s.Delete(key, now)
				s.Unlock()
			case op < 65:
				s := d.Shard(key)
				s.Lock()
				s.Lookup(key, now)
				s.Unlock()
			case op < 70:
				ks.Sweep(now, SweepConfig{PerShard: 5, Rounds: 2})
			case op < 75:
				ks.Restore(db, key, Value{Kind: KindFixed, N: 1})
			case op < 78:
				slot := keyslot.Of(key)
				want := ks.CountKeysInSlot(db, slot)
				before := j.deletes
				if n := ks.DeleteSlot(db, slot); n != want {
					t.Fatalf("case %d step %d: DeleteSlot removed %d, count was %d", c, step, n, want)
				}
				if j.deletes-before != want {
					t.Fatalf("case %d step %d: DeleteSlot journaled %d deletes, want %d", c, step, j.deletes-before, want)
				}
				deletedBySlot += want
			case op < 79 && r.IntN(3) == 0:
				var set [keyslot.Slots]bool
				want, before := 0, j.deletes
				for range 1 + r.IntN(3) {
					sl := keyslot.Of(propKey(r))
					if !set[sl] {
						set[sl] = true
						want += ks.CountKeysInSlot(db, sl)
					}
				}
				if r.IntN(4) == 0 {
					for sl := range set {
						if sl%2 == 0 && !set[sl] {
							set[sl] = true
							want += ks.CountKeysInSlot(db, uint16(sl))
						}
					}
				}
				if n := ks.DeleteSlots(db, &set); n != want || j.deletes-before != want {
					t.Fatalf("case %d step %d: DeleteSlots removed %d (journaled %d), counts were %d", c, step, n, j.deletes-before, want)
				}
				deletedBySlot += want
			case op < 79 && r.IntN(4) == 0:
				// A burst of long keys fills several key pages, which
				// deletions of their slots then leave mostly dead.
				for i := range 150 {
					ks.Restore(db, fmt.Appendf(nil, "{t%d}:%s%d", i%6, strings.Repeat("q", 400+i), step), Value{Kind: KindGCRA})
				}
			case op < 79 && r.IntN(8) == 0:
				d.Flush(false)
				flushes++
			case op < 80 && r.IntN(8) == 0:
				ks.FlushAll(false)
				flushes++
			default:
				now += int64(r.IntN(20))
			}
			if step%25 == 0 || step == steps-1 {
				checkSlots(t, ks, db)
			}
		}
		checkSlots(t, ks, 0)
		checkSlots(t, ks, 1)
		for _, d := range ks.dbs {
			for i := range d.shards {
				compactions += d.shards[i].t.compactions
			}
		}
		evictions += int(ks.Memory().Evicted)
	}
	t.Logf("%d cases of %d random operations: %d keys deleted by DeleteSlot, %d flushes, %d evictions, %d page compactions",
		cases, steps, deletedBySlot, flushes, evictions, compactions)
	if compactions == 0 || evictions == 0 {
		t.Errorf("the random operations did not reach page compaction (%d) or eviction (%d)", compactions, evictions)
	}
}

// TestSlotIndexFlush: after FLUSHDB the slot counts are 0 (the count a
// stale index would keep).
func TestSlotIndexFlush(t *testing.T) {
	ks, err := New(Config{Databases: 2, Shards: 4, SlotIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		ks.Restore(0, fmt.Appendf(nil, "{a}%d", i), Value{Kind: KindGCRA})
		ks.Restore(1, fmt.Appendf(nil, "{a}%d", i), Value{Kind: KindGCRA})
	}
	slot := keyslot.Of([]byte("a"))
	if n := ks.CountKeysInSlot(0, slot); n != 100 {
		t.Fatalf("count %d, want 100", n)
	}
	ks.DB(0).Flush(false)
	if n := ks.CountKeysInSlot(0, slot); n != 0 {
		t.Fatalf("after FLUSHDB: count %d, want 0", n)
	}
	if n := ks.CountKeysInSlot(1, slot); n != 100 {
		t.Fatalf("db 1 after FLUSHDB of db 0: count %d, want 100", n)
	}
	ks.FlushAll(false)
	if n := ks.CountKeysInSlot(1, slot); n != 0 {
		t.Fatalf("after FLUSHALL: count %d, want 0", n)
	}
	if k := ks.KeysInSlot(1, slot, 10); len(k) != 0 {
		t.Fatalf("after FLUSHALL: keys %q", k)
	}
}

// TestDeleteSlotBatches: a slot with more keys in one shard than
// DeleteSlots removes under one lock hold.
func TestDeleteSlotBatches(t *testing.T) {
	for _, index := range []bool{false, true} {
		j := &countJournal{}
		ks, err := New(Config{Databases: 1, Shards: 1, SlotIndex: index, Journal: j})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3*deleteBatch + 7 {
			ks.Restore(0, fmt.Appendf(nil, "{a}%d", i), Value{Kind: KindGCRA})
			ks.Restore(0, fmt.Appendf(nil, "{b}%d", i), Value{Kind: KindGCRA})
		}
		if n := ks.DeleteSlot(0, keyslot.Of([]byte("a"))); n != 3*deleteBatch+7 || j.deletes != n {
			t.Fatalf("index %v: DeleteSlot removed %d, journaled %d, want %d", index, n, j.deletes, 3*deleteBatch+7)
		}
		if n := ks.DB(0).Size(false); n != 3*deleteBatch+7 {
			t.Fatalf("index %v: %d keys left, want %d", index, n, 3*deleteBatch+7)
		}
		checkSlots(t, ks, 0)
	}
}

// TestSlotAPIWithoutIndex: the same answers by scanning when the index is
// off.
func TestSlotAPIWithoutIndex(t *testing.T) {
	ks, err := New(Config{Databases: 1, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		ks.Restore(0, fmt.Appendf(nil, "{a}%d", i), Value{Kind: KindGCRA})
		ks.Restore(0, fmt.Appendf(nil, "b%d", i), Value{Kind: KindGCRA})
	}
	slot := keyslot.Of([]byte("a"))
	if n := ks.CountKeysInSlot(0, slot); n != 50 {
		t.Fatalf("count %d, want 50", n)
	}
	if k := ks.KeysInSlot(0, slot, 7); len(k) != 7 {
		t.Fatalf("KeysInSlot max 7: %d keys", len(k))
	}
	checkSlots(t, ks, 0)
	if n := ks.DeleteSlot(0, slot); n != 50 || ks.DB(0).Size(false) != 50 {
		t.Fatalf("DeleteSlot removed %d, %d keys left; want 50, 50", n, ks.DB(0).Size(false))
	}
	if ks.CountKeysInSlot(0, keyslot.Slots) != 0 || ks.KeysInSlot(0, keyslot.Slots, 1) != nil || ks.DeleteSlot(0, keyslot.Slots) != 0 {
		t.Fatal("slot 16384 is not empty")
	}
}

// TestSlotIndexConcurrent: writers, deleters and DeleteSlot, KeysInSlot
// and CountKeysInSlot at once (for -race); the index is exact afterwards.
func TestSlotIndexConcurrent(t *testing.T) {
	ks, err := New(Config{Databases: 1, Shards: 8, SlotIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	d := ks.DB(0)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for range 3000 {
				key := propKey(r)
				s := d.Shard(key)
				s.Lock()
				if r.IntN(4) == 0 {
					s.Delete(key, 0)
				} else {
					s.Set(key, Value{Kind: KindGCRA})
				}
				s.Unlock()
			}
		})
	}
	wg.Go(func() {
		r := rand.New(rand.NewPCG(9, 9))
		for range 300 {
			slot := keyslot.Of(propKey(r))
			ks.DeleteSlot(0, slot)
			ks.KeysInSlot(0, slot, 10)
			ks.CountKeysInSlot(0, slot)
		}
	})
	wg.Wait()
	checkSlots(t, ks, 0)
}

// fakeRoom is a Room whose fullness the test sets; it counts the waits and
// the journal's deletions seen at each.
type fakeRoom struct {
	full    bool
	j       *countJournal
	waitsAt []int // j.deletes at each WaitRoom
}

func (r *fakeRoom) Full() bool { return r.full }
func (r *fakeRoom) WaitRoom()  { r.waitsAt = append(r.waitsAt, r.j.deletes) }

// TestRoomBoundsBackgroundWork: with the journal's backlog full, an
// active-expiry pass removes nothing (and journals nothing), and
// DeleteSlots gives the backlog a chance to drain after every batch, so
// that at most deleteBatch deletions are queued between two waits.
func TestRoomBoundsBackgroundWork(t *testing.T) {
	j := &countJournal{}
	room := &fakeRoom{full: true, j: j}
	ks, err := New(Config{Databases: 1, Shards: 1, SlotIndex: true, Journal: j, Room: room})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3*deleteBatch + 7 {
		ks.Restore(0, fmt.Appendf(nil, "{a}%d", i), Value{Kind: KindGCRA, Exp: 50})
	}
	if n := ks.Sweep(100, SweepConfig{PerShard: 10, Rounds: 4}); n != 0 || j.deletes != 0 {
		t.Fatalf("full backlog: Sweep removed %d, journaled %d; want 0", n, j.deletes)
	}
	room.full = false
	if n := ks.Sweep(100, SweepConfig{PerShard: 10, Rounds: 1}); n != 10 || j.deletes != 10 {
		t.Fatalf("room again: Sweep removed %d, journaled %d; want 10", n, j.deletes)
	}
	n := ks.DeleteSlot(0, keyslot.Of([]byte("a")))
	if n != 3*deleteBatch+7-10 {
		t.Fatalf("DeleteSlot removed %d", n)
	}
	// 765 keys left: batches of 256, 256 and 253, a wait after each.
	if len(room.waitsAt) != 3 {
		t.Fatalf("WaitRoom called %d times (at %v), want 3", len(room.waitsAt), room.waitsAt)
	}
	prev := 10
	for _, at := range room.waitsAt {
		if at-prev > deleteBatch {
			t.Fatalf("%d deletions queued between two waits (at %v), more than %d", at-prev, room.waitsAt, deleteBatch)
		}
		prev = at
	}
}

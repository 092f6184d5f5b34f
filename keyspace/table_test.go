package keyspace

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// mirror is a Journal that applies every change to a plain map, so the
// test can check that the journal saw exactly the keyspace's changes.
type mirror struct{ m map[string]Value }

func (j *mirror) Put(_ int, key []byte, v *Value) {
	c := *v
	c.ref = 0
	j.m[string(key)] = c
}
func (j *mirror) Delete(_ int, key []byte) { delete(j.m, string(key)) }
func (j *mirror) DeleteDB(int)             { clear(j.m) }
func (j *mirror) DeleteAll()               { clear(j.m) }

func TestEntryIs56Bytes(t *testing.T) {
	if n := unsafe.Sizeof(entry{}); n != 56 {
		t.Fatalf("entry is %d bytes, want 56 (the memory target per key depends on it)", n)
	}
}

// TestTableMatchesModel drives one shard with random operations (sets,
// lookups, peeks, in-place changes, deletes, expiry, sweeps, flushes) over
// short keys, keys longer than bigKey and string objects, and checks every
// answer against a map, plus the table's own invariants (slots, free list,
// pages, accounting) and the journal's copy.
func TestTableMatchesModel(t *testing.T) {
	seeds := 20
	if testing.Short() {
		seeds = 4
	}
	ops, compactions := 0, 0
	for seed := range seeds {
		n, c := runModel(t, uint64(seed), 20000)
		ops, compactions = ops+n, compactions+c
	}
	if compactions == 0 {
		t.Fatal("no page compaction happened: the test misses that path")
	}
	t.Logf("%d random operations on %d seeds matched the model (%d page compactions)", ops, seeds, compactions)
}

func runModel(t *testing.T, seed uint64, steps int) (ops, compactions int) {
	rng := rand.New(rand.NewPCG(seed, 99))
	j := &mirror{m: map[string]Value{}}
	ks, err := New(Config{Shards: 1, Databases: 1, Journal: j})
	if err != nil {
		t.Fatal(err)
	}
	sh := ks.DB(0).ShardAt(0)
	model := map[string]Value{} // every entry the table holds, expired ones included
	keys := make([]string, 3000)
	for i := range keys {
		switch i % 10 {
		case 0:
			keys[i] = fmt.Sprintf("big:%d:%s", i, strings.Repeat("x", bigKey+i))
		case 1:
			keys[i] = fmt.Sprintf("k%d\x00\xff", i)
		default:
			keys[i] = fmt.Sprintf("user:%d:%s", i, strings.Repeat("y", i%90))
		}
	}
	now := int64(1_000_000)
	live := func(v Value) bool { return v.Exp == 0 || now <= v.Exp }
	sh.Lock()
	defer sh.Unlock()
	for step := range steps {
		k := keys[rng.IntN(len(keys))]
		kb := []byte(k)
		now += rng.Int64N(50)
		switch op := rng.IntN(100); {
		case op < 35: // Set
			v := Value{Kind: KindGCRA, N: rng.Uint64(), M: rng.Int64()}
			if rng.IntN(3) == 0 {
				v.Kind, v.Obj = KindString, bytes.Repeat([]byte{'v'}, rng.IntN(100))
			}
			if rng.IntN(2) == 0 {
				v.Exp = now + rng.Int64N(400)
			}
			sh.Set(kb, v)
			model[k] = v
		case op < 55: // Lookup
			got := sh.Lookup(kb, now)
			want, ok := model[k]
			if ok && !live(want) {
				delete(model, k)
				ok = false
			}
			checkValue(t, seed, step, k, got, want, ok)
		case op < 65: // Peek
			want, ok := model[k]
			checkValue(t, seed, step, k, sh.Peek(kb, now), want, ok && live(want))
		case op < 75: // change in place
			if v := sh.Lookup(kb, now); v != nil {
				v.Exp = now + rng.Int64N(400)
				v.N++
				sh.Changed(kb, v)
				m := model[k]
				m.Exp, m.N = v.Exp, v.N
				model[k] = m
			} else {
				delete(model, k)
			}
		case op < 90: // Delete
			want, ok := model[k]
			if got := sh.Delete(kb, now); got != (ok && live(want)) {
				t.Fatalf("seed %d step %d: Delete(%.20q) = %v, model has %v live %v", seed, step, k, got, ok, live(want))
			}
			delete(model, k)
		case op < 98: // Sweep: it may remove any expired entry, and only those
			sh.Sweep(now, 1+rng.IntN(20))
			for mk, v := range model {
				if _, _, ok := sh.t.lookup([]byte(mk), sh.hash([]byte(mk))); !ok {
					if live(v) {
						t.Fatalf("seed %d step %d: Sweep removed live key %.20q", seed, step, mk)
					}
					delete(model, mk)
				}
			}
		case op < 99 || rng.IntN(20) != 0:
			now += rng.Int64N(300) // let keys expire
		default:
			ks.DB(0).Flush(true)
			clear(model)
		}
		if step%97 == 0 || step == steps-1 {
			checkTable(t, seed, step, sh, model, j)
		}
	}
	return steps, sh.t.compactions
}

func checkValue(t *testing.T, seed uint64, step int, k string, got *Value, want Value, ok bool) {
	t.Helper()
	if (got != nil) != ok {
		t.Fatalf("seed %d step %d: %.20q present %v, model says %v", seed, step, k, got != nil, ok)
	}
	if !ok {
		return
	}
	if got.N != want.N || got.M != want.M || got.Exp != want.Exp || got.Kind != want.Kind {
		t.Fatalf("seed %d step %d: %.20q = %+v, want %+v", seed, step, k, *got, want)
	}
	gb, _ := got.Obj.([]byte)
	wb, _ := want.Obj.([]byte)
	if (got.Obj == nil) != (want.Obj == nil) || !bytes.Equal(gb, wb) {
		t.Fatalf("seed %d step %d: %.20q object %v, want %v", seed, step, k, got.Obj, want.Obj)
	}
}

// checkTable verifies the table against the model and its own invariants.
func checkTable(t *testing.T, seed uint64, step int, sh *Shard, model map[string]Value, j *mirror) {
	t.Helper()
	tb := &sh.t
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d step %d: %s", seed, step, fmt.Sprintf(format, args...))
	}
	if tb.live != len(model) || sh.Len() != len(model) {
		fail("table holds %d entries, model %d", tb.live, len(model))
	}
	if len(j.m) != len(model) {
		fail("journal holds %d keys, model %d", len(j.m), len(model))
	}
	var bytesSum int64
	var keyBytes, used, free int
	for i := uint32(0); i < tb.next; i++ {
		e := tb.at(i)
		if e.meta == 0 {
			free++
			continue
		}
		used++
		k := tb.key(e)
		if int(e.klen()) != len(k) {
			fail("entry %d: klen %d, key bytes %d", i, e.klen(), len(k))
		}
		switch {
		case len(k) <= inlineKey:
			if !e.inline() || len(k) > 0 && &k[0] != &e.kb[1] {
				fail("short key %q not kept in its entry", k)
			}
		case e.inline():
			fail("key %q of %d bytes kept in its entry", k, len(k))
		case e.koff() != bigKeyOff:
			keyBytes += len(k)
		case len(k) <= bigKey:
			fail("key %q kept in objs", k)
		}
		want, ok := model[string(k)]
		if !ok {
			fail("table holds %.20q, model does not", k)
		}
		if jv, ok := j.m[string(k)]; !ok || jv.N != want.N || jv.Exp != want.Exp || jv.Kind != want.Kind {
			fail("journal has %.20q = %+v (%v), want %+v", k, jv, ok, want)
		}
		idx, _, found := tb.lookup(k, sh.hash(k))
		if !found || idx != i {
			fail("entry %d (%.20q) not found through the slots (%d %v)", i, k, idx, found)
		}
		bytesSum += tb.size(e)
	}
	for f := tb.free; f != 0; f = tb.at(f - 1).koff() {
		free--
	}
	if used != tb.live || free != 0 {
		fail("%d entries in use for live %d; free list off by %d", used, tb.live, free)
	}
	if keyBytes != tb.keyBytes {
		fail("page key bytes %d, counted %d", tb.keyBytes, keyBytes)
	}
	if held := (len(tb.pages) - len(tb.freePages)) * pageSize; held > 5*pageSize && held > 2*keyBytes+pageSize {
		fail("pages hold %d bytes for %d live key bytes (pages %d free %d live %v cur %d)", held, keyBytes, len(tb.pages), len(tb.freePages), tb.pageLive, tb.cur)
	}
	if bytesSum != sh.bytes || sh.bytes != sh.ks.used.Load() {
		fail("accounted %d bytes, shard says %d, keyspace %d", bytesSum, sh.bytes, sh.ks.used.Load())
	}
	filled := 0
	for _, s := range tb.slots {
		if s != 0 {
			filled++
		}
	}
	if filled != tb.filled || (len(tb.slots) > 0 && tb.filled*4 > len(tb.slots)*3) {
		fail("slots: %d filled (counted %d) of %d", tb.filled, filled, len(tb.slots))
	}
	n := 0
	sh.Range(0, func(k string, v *Value) bool {
		if _, ok := model[k]; !ok {
			fail("Range gave %.20q, not in the model", k)
		}
		n++
		return true
	})
	if n != len(model) {
		fail("Range gave %d keys, want %d", n, len(model))
	}
}

// TestFullTableEvicts: a shard that reaches its entry limit evicts a key
// to take a new one, even without maxmemory.
func TestFullTableEvicts(t *testing.T) {
	ks := newKS(t, 1)
	sh := ks.DB(0).ShardAt(0)
	sh.Lock()
	defer sh.Unlock()
	sh.t.limit = 100
	for i := range 1000 {
		sh.Set([]byte(fmt.Sprint("k", i)), Value{Kind: KindGCRA})
	}
	if sh.Len() != 100 || ks.Memory().Evicted != 900 {
		t.Fatalf("len %d, evicted %d; want 100 and 900", sh.Len(), ks.Memory().Evicted)
	}
	if sh.Lookup([]byte("k999"), 0) == nil {
		t.Fatal("the newest key was evicted")
	}
}

// TestEvictionPrefersOldKeys: the LRU sample picks the least recently
// touched key, also across the 24-bit wrap of the LRU clock.
func TestEvictionPrefersOldKeys(t *testing.T) {
	for _, base := range []int64{1000, 1<<24 - 5} { // seconds; the second wraps
		ks, _ := New(Config{Shards: 1, MaxMemory: 1 << 30})
		sh := ks.DB(0).ShardAt(0)
		sh.Lock()
		for i := range 5 {
			k := []byte(fmt.Sprint("k", i))
			sh.Lookup(k, (base+int64(i)*3)*1000) // the LRU clock of the insert
			sh.Set(k, Value{Kind: KindGCRA})
		}
		ks.maxMemory = ks.used.Load()           // full: the next insert evicts one
		sh.Lookup([]byte("kn"), (base+20)*1000) // as long as k0: one eviction makes room
		sh.Set([]byte("kn"), Value{Kind: KindGCRA})
		if sh.Peek([]byte("k0"), 0) != nil || sh.Peek([]byte("k1"), 0) == nil {
			t.Fatalf("base %d: k0 (oldest) should be the one evicted", base)
		}
		sh.Unlock()
	}
	if !older(1<<24-1, 2) || older(2, 1<<24-1) || older(5, 5) {
		t.Fatal("older does not wrap")
	}
}

// TestStaleViewIsNotWritten: a value read before its key was removed must
// not overwrite whatever entry took its place.
func TestStaleViewIsNotWritten(t *testing.T) {
	ks := newKS(t, 1)
	sh := ks.DB(0).ShardAt(0)
	sh.Lock()
	defer sh.Unlock()
	sh.Set([]byte("a"), Value{Kind: KindGCRA, N: 1})
	v := *sh.Lookup([]byte("a"), 0)
	sh.Delete([]byte("a"), 0)
	sh.Set([]byte("b"), Value{Kind: KindGCRA, N: 2}) // reuses a's entry
	sh.Replace([]byte("a"), &v, Value{Kind: KindGCRA, N: 3})
	if b := sh.Lookup([]byte("b"), 0); b == nil || b.N != 2 {
		t.Fatalf("b = %+v, want N 2", b)
	}
	if a := sh.Lookup([]byte("a"), 0); a == nil || a.N != 3 || sh.Len() != 2 {
		t.Fatalf("a = %+v, len %d", a, sh.Len())
	}
}

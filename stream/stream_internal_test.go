package stream

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
)

// modelEntry is one entry of the property test's model: a sorted slice of
// the live entries.
type modelEntry struct {
	id     ID
	fields [][]byte
}

// recomputeMem is MemSize's entries part recomputed from the nodes.
func recomputeMem(s *Stream) int {
	m := streamOverhead + cap(s.spare)
	for _, n := range s.nodes {
		m += nodeOverhead + cap(n.data)
	}
	return m
}

func randFields(rng *rand.Rand) [][]byte {
	switch rng.IntN(5) {
	case 0: // an audit entry
		return [][]byte{
			[]byte("key"), fmt.Appendf(nil, "user:%d", rng.IntN(1000)),
			[]byte("policy"), []byte("api"),
			[]byte("decision"), []byte([]string{"allowed", "limited"}[rng.IntN(2)]),
			[]byte("remaining"), fmt.Appendf(nil, "%d", rng.IntN(200)-50),
			[]byte("retry_after_ms"), fmt.Appendf(nil, "%d", rng.IntN(100000)),
			[]byte("quantity"), []byte("1"),
			[]byte("client"), fmt.Appendf(nil, "10.0.%d.%d", rng.IntN(256), rng.IntN(256)),
		}
	case 1: // other names
		f := make([][]byte, 0, 6)
		for i := 0; i < 1+rng.IntN(3); i++ {
			f = append(f, fmt.Appendf(nil, "f%d", rng.IntN(4)), fmt.Appendf(nil, "%d", rng.Int64()))
		}
		return f
	case 2: // a large value
		return [][]byte{[]byte("big"), bytes.Repeat([]byte{'x'}, rng.IntN(1500))}
	}
	return [][]byte{[]byte("a"), fmt.Appendf(nil, "%d", rng.IntN(10)), []byte("b"), []byte("v")}
}

// modelNames are two Names of the audit entry's names (randFields' case 0).
var modelNames = [2]*Names{
	NewNames("key", "policy", "decision", "remaining", "retry_after_ms", "quantity", "client"),
	NewNames("key", "policy", "decision", "remaining", "retry_after_ms", "quantity", "client"),
}

// sameList reports whether the names of fields are nm's.
func sameList(fields [][]byte, nm *Names) bool {
	if len(fields) != 2*len(nm.list) {
		return false
	}
	for i, n := range nm.list {
		if !bytes.Equal(fields[2*i], n) {
			return false
		}
	}
	return true
}

func liveIDs(s *Stream) []ID {
	var ids []ID
	s.Range(ID{}, MaxID, false, func(e Entry) bool { ids = append(ids, e.ID); return true })
	return ids
}

// TestModel checks Append, SetID, Trim (MAXLEN and MINID, exact and approximate,
// LIMIT), Delete, Range, Get, FirstID, LastEntryID and Len against a
// sorted slice, and after every step the encoding's round trip, a delta
// replayed onto a copy, and MemSize against a recomputation.
func TestModel(t *testing.T) {
	const runs, steps = 120, 400
	cases, named := 0, 0
	for run := 0; run < runs; run++ {
		rng := rand.New(rand.NewPCG(uint64(run), 31))
		s := New()
		var model []modelEntry
		replica, err := Decode(s.AppendBinary(nil))
		if err != nil {
			t.Fatal(err)
		}
		journaled(s)
		next := ID{Ms: uint64(rng.IntN(1000))}
		for step := 0; step < steps; step++ {
			cases++
			what := ""
			switch k := rng.IntN(21); {
			case k == 20:
				// XSETID: any ID not below the last live entry, so
				// possibly below deleted ones (and anything when the
				// stream is empty, as Redis allows).
				var last ID
				if len(model) > 0 {
					last = model[len(model)-1].id
					if rng.IntN(2) == 0 {
						last.Seq += uint64(rng.IntN(3))
					}
				} else {
					last = ID{uint64(rng.IntN(int(next.Ms + 2))), uint64(rng.IntN(3))}
				}
				if last.Less(s.LastID()) && rng.IntN(3) == 0 {
					last = s.LastID()
				}
				maxDel := ID{last.Ms, uint64(rng.IntN(2))}
				if last.Less(maxDel) { // XSETID refuses a greatest deleted ID above the last
					maxDel = last
				}
				s.SetID(last, s.EntriesAdded()+uint64(rng.IntN(3)), maxDel)
				if s.LastID() != last {
					t.Fatalf("run %d step %d: LastID %v after SetID(%v)", run, step, s.LastID(), last)
				}
				next = last
				what = "setid " + last.String()
			case k < 12:
				if rng.IntN(3) == 0 {
					next.Ms += 1 + uint64(rng.IntN(3))
					next.Seq = uint64(rng.IntN(3))
				}
				next.Seq++
				f := randFields(rng)
				what = "append " + next.String()
				if nm := modelNames[rng.IntN(2)]; rng.IntN(2) == 0 && sameList(f, nm) {
					// The audit entry's names as a Names, one of two
					// alike: entries appended by name and as fields
					// mix in a node, and the encoding, the model and
					// the replica (which appends them as fields)
					// agree.
					values := make([][]byte, 0, len(f)/2)
					for i := 1; i < len(f); i += 2 {
						values = append(values, f[i])
					}
					// The values' listpack bytes as the audit counts
					// them: an integer's by its value.
					s.AppendNamedSized(next, nm, values, lpOf(values))
					what = "append named " + next.String()
					named++
				} else {
					s.Append(next, f)
				}
				model = append(model, modelEntry{next, f})
			case k < 15:
				var id ID
				if len(model) > 0 && rng.IntN(4) > 0 {
					id = model[rng.IntN(len(model))].id
				} else {
					id = ID{uint64(rng.IntN(int(next.Ms + 2))), uint64(rng.IntN(5))}
				}
				i := slices.IndexFunc(model, func(e modelEntry) bool { return e.id == id })
				got := s.Delete(id)
				if got != (i >= 0) {
					t.Fatalf("run %d step %d: Delete(%v) = %v, model %v", run, step, id, got, i >= 0)
				}
				if i >= 0 {
					model = slices.Delete(model, i, i+1)
				}
				what = "delete " + id.String()
			default:
				a := TrimArgs{ByID: rng.IntN(2) == 0, Approx: rng.IntN(2) == 0}
				if a.ByID {
					a.MinID = ID{uint64(rng.IntN(int(next.Ms + 2))), uint64(rng.IntN(5))}
				} else {
					a.MaxLen = int64(rng.IntN(len(model) + 2))
				}
				if a.Approx && rng.IntN(2) == 0 {
					a.Limit = int64(rng.IntN(250))
				}
				what = fmt.Sprintf("trim %+v", a)
				before := make([]int, len(s.nodes))
				for i, n := range s.nodes {
					before[i] = n.live
				}
				got := s.Trim(a)
				removed := model[:got]
				model = model[got:]
				for _, e := range removed {
					if a.ByID && !e.id.Less(a.MinID) {
						t.Fatalf("run %d step %d: %s removed %v", run, step, what, e.id)
					}
				}
				switch {
				case !a.Approx && a.ByID:
					if len(model) > 0 && model[0].id.Less(a.MinID) {
						t.Fatalf("run %d step %d: %s kept %v", run, step, what, model[0].id)
					}
				case !a.Approx:
					if int64(len(model)) != min(a.MaxLen, int64(len(model))+got) {
						t.Fatalf("run %d step %d: %s left %d", run, step, what, len(model))
					}
				default:
					if !a.ByID && int64(len(model)) < a.MaxLen && got > 0 {
						t.Fatalf("run %d step %d: %s went below: %d", run, step, what, len(model))
					}
					if a.Limit > 0 && got > a.Limit {
						t.Fatalf("run %d step %d: %s removed %d", run, step, what, got)
					}
					// Whole nodes: the removed count is the live count
					// of the nodes gone from the front.
					gone := len(before) - len(s.nodes)
					sum := 0
					for _, c := range before[:gone] {
						sum += c
					}
					if int64(sum) != got {
						t.Fatalf("run %d step %d: %s removed %d, nodes gone held %d", run, step, what, got, sum)
					}
				}
			}
			checkModel(t, s, model, fmt.Sprintf("run %d step %d (%s)", run, step, what))

			enc := s.AppendBinary(nil)
			dec, err := Decode(enc)
			if err != nil {
				t.Fatalf("run %d step %d: Decode: %v", run, step, err)
			}
			if !bytes.Equal(dec.AppendBinary(nil), enc) {
				t.Fatalf("run %d step %d: round trip differs", run, step)
			}
			// The decoded nodes are the original's, listpack sizes and
			// counters included: a decoded stream trims alike.
			for i, n := range s.nodes {
				d := dec.nodes[i]
				if d.master != n.master || d.last != n.last || d.lpBytes != n.lpBytes || d.live != n.live ||
					d.deleted != n.deleted || d.nmf != n.nmf || d.start != n.start {
					t.Fatalf("run %d step %d: decoded node %d = %+v, want %+v", run, step, i, *d, *n)
				}
			}
			if m := recomputeMem(dec); dec.MemSize() != m {
				t.Fatalf("run %d step %d: decoded MemSize %d, recomputed %d", run, step, dec.MemSize(), m)
			}
			d, ok := s.Delta()
			if !ok {
				t.Fatalf("run %d step %d: no delta", run, step)
			}
			// Nothing changed (a trim or a deletion that removed nothing)
			// is a delta of one no-op, as the journal writes it.
			if _, err := replica.ApplyDelta(d); err != nil {
				t.Fatalf("run %d step %d: ApplyDelta: %v", run, step, err)
			}
			s.ResetDelta()
			replica.ResetDelta()
			if !bytes.Equal(replica.AppendBinary(nil), s.AppendBinary(nil)) {
				t.Fatalf("run %d step %d: replica differs after %s", run, step, what)
			}
		}
	}
	if named == 0 {
		t.Fatal("no entry was appended by name")
	}
	t.Logf("%d cases (%d runs of %d steps, %d entries appended by name), each checked against the model, the encoding and a replica",
		cases, runs, steps, named)
}

// lpOf sums LPSize over values, taking LPIntSize of those that are an
// integer's decimal form (strconv's).
func lpOf(values [][]byte) int {
	lp := 0
	for _, v := range values {
		if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && strconv.FormatInt(n, 10) == string(v) {
			lp += LPIntSize(n)
		} else {
			lp += LPSize(v)
		}
	}
	return lp
}

func checkModel(t *testing.T, s *Stream, model []modelEntry, at string) {
	t.Helper()
	if s.Len() != uint64(len(model)) {
		t.Fatalf("%s: Len %d, model %d", at, s.Len(), len(model))
	}
	if m := recomputeMem(s); s.MemSize() != m {
		t.Fatalf("%s: MemSize %d, recomputed %d", at, s.MemSize(), m)
	}
	// A node removed is not kept alive by AppendNamedSized's reference.
	if s.namedNode != nil && !slices.Contains(s.nodes, s.namedNode) {
		t.Fatalf("%s: the named node is not one of the stream's", at)
	}
	first, ok := s.FirstID()
	last, ok2 := s.LastEntryID()
	if len(model) == 0 {
		if ok || ok2 {
			t.Fatalf("%s: FirstID/LastEntryID of an empty stream", at)
		}
		return
	}
	if !ok || first != model[0].id || !ok2 || last != model[len(model)-1].id {
		t.Fatalf("%s: FirstID %v LastEntryID %v, model %v %v", at, first, last, model[0].id, model[len(model)-1].id)
	}
	i := 0
	s.Range(ID{}, MaxID, false, func(e Entry) bool {
		if i >= len(model) || e.ID != model[i].id || !slices.EqualFunc(e.Fields, model[i].fields, bytes.Equal) {
			t.Fatalf("%s: Range entry %d = %v", at, i, e.ID)
		}
		i++
		return true
	})
	if i != len(model) {
		t.Fatalf("%s: Range gave %d entries, model %d", at, i, len(model))
	}
	// A random sub-range, both ways, and Get.
	a, b := model[len(model)/3].id, model[len(model)*2/3].id
	var want, got []ID
	for _, e := range model {
		if !e.id.Less(a) && !b.Less(e.id) {
			want = append(want, e.id)
		}
	}
	s.Range(a, b, true, func(e Entry) bool { got = append(got, e.ID); return true })
	slices.Reverse(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: reverse Range(%v, %v) = %v, want %v", at, a, b, got, want)
	}
	e := model[len(model)/2]
	if f, ok := s.Get(e.id); !ok || !slices.EqualFunc(f, e.fields, bytes.Equal) {
		t.Fatalf("%s: Get(%v) = %v %v", at, e.id, f, ok)
	}
	// Every node emulates a listpack within Redis's bounds.
	for _, n := range s.nodes {
		if n.live+n.deleted > NodeMaxEntries {
			t.Fatalf("%s: node of %d entries", at, n.live+n.deleted)
		}
	}
}

// TestAuditEntrySize measures the bytes an audit entry takes in the
// stream (MemSize per entry) and in the heap.
func TestAuditEntrySize(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 100000
	entries := make([][][]byte, n)
	keyBytes := 0
	for i := range entries {
		f := randFields(rng)
		for len(f) != 14 {
			f = randFields(rng)
		}
		entries[i] = f
		keyBytes += len(f[1])
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := New()
	for i, f := range entries {
		s.Append(ID{Ms: 1700000000000 + uint64(i/3), Seq: uint64(i % 3)}, f)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	runtime.KeepAlive(entries)
	per := float64(s.MemSize()) / n
	heap := float64(after.HeapAlloc-before.HeapAlloc) / n
	key := float64(keyBytes) / n
	t.Logf("audit entry: %.1f bytes per entry (MemSize), %.1f in the heap; %.1f of them the key's value: %.1f (MemSize) and %.1f (heap) beyond it",
		per, heap, key, per-key, heap-key)
	if per-key > 80 || heap-key > 80 {
		t.Fatalf("%.1f (MemSize) and %.1f (heap) bytes per entry beyond the key, want <= 80", per-key, heap-key)
	}
}

// journaled makes s record its deltas as a stream does once a journal
// consumer has asked for one (Delta, then ResetDelta after the write).
func journaled(s *Stream) *Stream {
	s.Delta()
	s.ResetDelta()
	return s
}

// TestDeltaRecordedOnceAsked: a stream no consumer has asked for a delta
// records none (its changes only count versions); the first Delta answers
// with the whole value for every consumer of that change, and the changes
// after it are recorded and replay onto a copy.
func TestDeltaRecordedOnceAsked(t *testing.T) {
	for _, s := range []*Stream{New(), seedStream().Clone(), mustDecode(t, seedStream().AppendBinary(nil))} {
		s.ResetDelta() // what the keyspace does after storing it
		ver := s.ver
		s.Append(ID{Ms: 1 << 40}, [][]byte{[]byte("a"), []byte("b")})
		if len(s.delta) != 0 || s.ver != ver+1 {
			t.Fatalf("unasked: delta %d bytes, version %d after %d", len(s.delta), s.ver, ver)
		}
		for range 2 { // the change log and the replication stream
			if d, ok := s.Delta(); ok {
				t.Fatalf("first Delta = %d bytes, want the whole value", len(d))
			}
		}
		s.ResetDelta()
		replica := mustDecode(t, s.AppendBinary(nil))
		s.Append(ID{Ms: 1<<40 + 1}, [][]byte{[]byte("c"), []byte("d")})
		d, ok := s.Delta()
		if !ok {
			t.Fatal("no delta once asked")
		}
		if applied, err := replica.ApplyDelta(d); !applied || err != nil {
			t.Fatalf("ApplyDelta = %v, %v", applied, err)
		}
		// The replica records nothing itself, and replays all the same.
		if len(replica.delta) != 0 || !bytes.Equal(replica.AppendBinary(nil), s.AppendBinary(nil)) {
			t.Fatal("replica differs or recorded")
		}
	}
}

func mustDecode(t *testing.T, b []byte) *Stream {
	t.Helper()
	s, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDecodeRefusesImpossibleCounters: XSETID keeps entries-added at or
// above the length and the greatest deleted ID at or below the last ID
// (lag and distances depend on it), so an encoding or a delta breaking
// either is malformed.
func TestDecodeRefusesImpossibleCounters(t *testing.T) {
	for _, tc := range []struct {
		name   string
		added  uint64
		maxDel ID
	}{
		{"entries-added below the length", 1, ID{}},
		{"greatest deleted ID above the last", 2, ID{9, 0}},
	} {
		s := New()
		s.Append(ID{1, 0}, [][]byte{[]byte("f"), []byte("v")})
		s.Append(ID{2, 0}, [][]byte{[]byte("f"), []byte("v")})
		base := mustDecode(t, s.AppendBinary(nil))
		journaled(base)
		s.SetID(ID{2, 0}, tc.added, tc.maxDel) // the caller's checks skipped
		if _, err := Decode(s.AppendBinary(nil)); err == nil {
			t.Errorf("%s: Decode accepted it", tc.name)
		}
		journaled(s)
		src := mustDecode(t, base.AppendBinary(nil))
		journaled(src)
		src.SetID(ID{2, 0}, tc.added, tc.maxDel)
		d, ok := src.Delta()
		if !ok {
			t.Fatalf("%s: no delta", tc.name)
		}
		if _, err := base.ApplyDelta(d); err == nil {
			t.Errorf("%s: ApplyDelta accepted it", tc.name)
		}
	}
}

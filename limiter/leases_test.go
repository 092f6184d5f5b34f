package limiter

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

type leaseOp int

const (
	opAcquire leaseOp = iota // Acquire, then Apply if admitted
	opRelease
	opHeld
)

type leaseStep struct {
	op    leaseOp
	at    int64
	token string
	lease int64 // 0: the sequence's lease
	limit int64 // 0: the sequence's limit
	want  Decision
	// opRelease: the expected result; opHeld: wantHeld live leases.
	wantReleased bool
	wantHeld     int64
	wantExpire   int64 // if not 0, the instant Apply or Release returns
}

type leaseSeq struct {
	name         string
	lease, limit int64
	steps        []leaseStep
}

func runLeaseSeq(t *testing.T, sq leaseSeq) {
	t.Helper()
	var ls Leases
	for i, sp := range sq.steps {
		lease, limit := sq.lease, sq.limit
		if sp.lease != 0 {
			lease = sp.lease
		}
		if sp.limit != 0 {
			limit = sp.limit
		}
		where := fmt.Sprintf("step %d (at t0%+dns, token %q)", i, sp.at-t0, sp.token)
		var exp int64
		switch sp.op {
		case opAcquire:
			d := ls.Acquire(sp.at, lease, limit, []byte(sp.token))
			if d != sp.want {
				t.Errorf("%s: acquire %s, want %s", where, ds(d), ds(sp.want))
			}
			if d.Limited {
				continue
			}
			exp = ls.Apply(sp.at, lease, []byte(sp.token))
			if d.ResetAfter != exp-sp.at {
				t.Errorf("%s: ResetAfter %d, but Apply says the last lease ends %d after now", where, d.ResetAfter, exp-sp.at)
			}
		case opRelease:
			var ok bool
			ok, exp = ls.Release(sp.at, []byte(sp.token))
			if ok != sp.wantReleased {
				t.Errorf("%s: released %v, want %v", where, ok, sp.wantReleased)
			}
		case opHeld:
			if n := ls.Held(sp.at); n != sp.wantHeld {
				t.Errorf("%s: held %d, want %d", where, n, sp.wantHeld)
			}
			if n := len(ls.Tokens(sp.at)); int64(n) != sp.wantHeld {
				t.Errorf("%s: %d tokens, want %d", where, n, sp.wantHeld)
			}
		}
		if sp.wantExpire != 0 && exp != sp.wantExpire {
			t.Errorf("%s: expireAt t0%+d, want t0%+d", where, exp-t0, sp.wantExpire-t0)
		}
	}
}

func TestLeasesTable(t *testing.T) {
	seqs := []leaseSeq{
		{name: "limit 2, lease 1s", lease: s, limit: 2, steps: []leaseStep{
			{op: opAcquire, at: t0, token: "a", want: dec(false, 2, 1, -1, s), wantExpire: t0 + s},
			{op: opAcquire, at: t0 + 250*ms, token: "b", want: dec(false, 2, 0, -1, s), wantExpire: t0 + 1250*ms},
			// Full: the soonest lease (a) ends at t0+1s.
			{op: opAcquire, at: t0 + 500*ms, token: "c", want: dec(true, 2, 0, 500*ms, 750*ms)},
			// a holds a lease: admitted, and its lease is extended.
			{op: opAcquire, at: t0 + 500*ms, token: "a", want: dec(false, 2, 0, -1, s), wantExpire: t0 + 1500*ms},
			{op: opAcquire, at: t0 + s, token: "c", want: dec(true, 2, 0, 250*ms, 500*ms)},
			{op: opAcquire, at: t0 + 1250*ms - 1, token: "c", want: dec(true, 2, 0, 1, 250*ms+1)},
			{op: opHeld, at: t0 + 1250*ms - 1, wantHeld: 2},
			// b's lease ends exactly now: not live.
			{op: opHeld, at: t0 + 1250*ms, wantHeld: 1},
			{op: opAcquire, at: t0 + 1250*ms, token: "c", want: dec(false, 2, 0, -1, s), wantExpire: t0 + 2250*ms},
			{op: opRelease, at: t0 + 1300*ms, token: "b", wantReleased: false, wantExpire: t0 + 2250*ms},
			{op: opRelease, at: t0 + 1300*ms, token: "nobody", wantReleased: false, wantExpire: t0 + 2250*ms},
			{op: opRelease, at: t0 + 1300*ms, token: "a", wantReleased: true, wantExpire: t0 + 2250*ms},
			{op: opRelease, at: t0 + 1300*ms, token: "a", wantReleased: false, wantExpire: t0 + 2250*ms},
			{op: opHeld, at: t0 + 1300*ms, wantHeld: 1},
			{op: opAcquire, at: t0 + 1300*ms, token: "d", want: dec(false, 2, 0, -1, s), wantExpire: t0 + 2300*ms},
			{op: opRelease, at: t0 + 1400*ms, token: "d", wantReleased: true, wantExpire: t0 + 2250*ms},
			{op: opRelease, at: t0 + 1400*ms, token: "c", wantReleased: true, wantExpire: t0 + 1400*ms},
			{op: opHeld, at: t0 + 1400*ms, wantHeld: 0},
			{op: opAcquire, at: t0 + 1400*ms, token: "d", want: dec(false, 2, 1, -1, s)},
		}},
		{name: "release at the expiry instant", lease: 100 * ms, limit: 1, steps: []leaseStep{
			{op: opAcquire, at: t0, token: "x", want: dec(false, 1, 0, -1, 100*ms)},
			{op: opRelease, at: t0 + 100*ms, token: "x", wantReleased: false, wantExpire: t0 + 100*ms},
			{op: opHeld, at: t0, wantHeld: 0},
		}},
		{name: "empty; limit 1", lease: s, limit: 1, steps: []leaseStep{
			{op: opHeld, at: t0, wantHeld: 0},
			{op: opRelease, at: t0, token: "x", wantExpire: t0},
			{op: opAcquire, at: t0, token: "x", want: dec(false, 1, 0, -1, s)},
			{op: opAcquire, at: t0, token: "y", want: dec(true, 1, 0, s, s)},
			// A shorter re-acquire by the holder.
			{op: opAcquire, at: t0 + 1, token: "x", lease: 1, want: dec(false, 1, 0, -1, s-1)},
		}},
		{name: "clock backwards", lease: s, limit: 1, steps: []leaseStep{
			{op: opAcquire, at: t0 + 500*ms, token: "a", want: dec(false, 1, 0, -1, s)},
			{op: opAcquire, at: t0, token: "b", want: dec(true, 1, 0, 1500*ms, 1500*ms)},
			{op: opHeld, at: t0 - s, wantHeld: 1},
			{op: opAcquire, at: t0, token: "a", want: dec(false, 1, 0, -1, 1500*ms), wantExpire: t0 + 1500*ms},
		}},
		{name: "negative instants (before 1970)", lease: 100 * ms, limit: 1, steps: []leaseStep{
			{op: opAcquire, at: -s, token: "a", want: dec(false, 1, 0, -1, 100*ms), wantExpire: -900 * ms},
			{op: opAcquire, at: -950 * ms, token: "b", want: dec(true, 1, 0, 50*ms, 50*ms)},
			{op: opAcquire, at: -950 * ms, token: "a", want: dec(false, 1, 0, -1, 100*ms), wantExpire: -850 * ms},
		}},
		{name: "huge: lease MaxPeriod at 2^62", lease: maxP, limit: 1, steps: []leaseStep{
			{op: opAcquire, at: huge, token: "a", want: dec(false, 1, 0, -1, maxP), wantExpire: huge + maxP},
			{op: opAcquire, at: huge + 1, token: "b", want: dec(true, 1, 0, maxP-1, maxP-1)},
			{op: opAcquire, at: huge + maxP, token: "b", want: dec(false, 1, 0, -1, maxP), wantExpire: huge + 2*maxP},
		}},
		// The limit is an argument of every command: more live leases than
		// the new limit must not make Remaining negative.
		{name: "limit lowered below the leases", lease: s, limit: 3, steps: []leaseStep{
			{op: opAcquire, at: t0, token: "a", want: dec(false, 3, 2, -1, s)},
			{op: opAcquire, at: t0 + 100*ms, token: "b", want: dec(false, 3, 1, -1, s)},
			{op: opAcquire, at: t0 + 200*ms, token: "c", want: dec(false, 3, 0, -1, s)},
			{op: opAcquire, at: t0 + 300*ms, token: "d", limit: 2, want: dec(true, 2, 0, 700*ms, 900*ms)},
			{op: opAcquire, at: t0 + 300*ms, token: "a", limit: 2, want: dec(false, 2, 0, -1, s)},
		}},
	}
	n := 0
	for _, sq := range seqs {
		t.Run(sq.name, func(t *testing.T) { runLeaseSeq(t, sq) })
		n += len(sq.steps)
	}
	t.Logf("%d sequences, %d steps", len(seqs), n)
}

// TestLeasesProperties runs random acquire/release sequences (non-decreasing
// clock) against a reference map, and checks that no instant has more than
// limit live leases, and that RetryAfter is exact.
func TestLeasesProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	tokens := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	const sequences, length = 3000, 80
	var ops, retries, instants int
	for seq := 0; seq < sequences; seq++ {
		limit := 1 + rng.Int64N(5)
		maxLease := 1 + rng.Int64N(200)
		var ls Leases
		ref := map[string]int64{} // token -> end of its lease
		live := func(at int64) (n int64, soonest, latest int64) {
			soonest, latest = math.MaxInt64, math.MinInt64
			for _, e := range ref {
				if e > at {
					n++
					soonest, latest = min(soonest, e), max(latest, e)
				}
			}
			return n, soonest, latest
		}
		now := randStart(rng, 1000)
		for i := 0; i < length; i++ {
			now += rng.Int64N(maxLease/2 + 1)
			tok := tokens[rng.IntN(len(tokens))]
			lease := 1 + rng.Int64N(maxLease)
			where := fmt.Sprintf("seq %d step %d: limit %d now %d token %s", seq, i, limit, now, tok)
			ops++
			if rng.IntN(5) == 0 {
				ok, exp := ls.Release(now, []byte(tok))
				if e, had := ref[tok]; ok != (had && e > now) {
					want := had && e > now
					t.Fatalf("%s: released %v, want %v", where, ok, want)
				}
				delete(ref, tok)
				if _, _, latest := live(now); exp != max(now, latest) {
					t.Fatalf("%s: Release returned %d, want %d", where, exp, max(now, latest))
				}
			} else {
				d := ls.Acquire(now, lease, limit, []byte(tok))
				held, soonest, latest := live(now)
				e, had := ref[tok]
				mine := had && e > now
				want := dec(false, limit, 0, -1, 0)
				switch {
				case mine:
				case held < limit:
					held++
				default:
					want.Limited, want.RetryAfter = true, soonest-now
				}
				if !want.Limited {
					latest = max(latest, now+lease)
				}
				want.Remaining = limit - held
				if held > 0 {
					want.ResetAfter = latest - now
				}
				if d != want {
					t.Fatalf("%s: %s, want %s", where, ds(d), ds(want))
				}
				checkShape(t, where, d, limit, 1, maxLease, maxLease)
				if d.Limited {
					retries++
					if ls.Acquire(now+d.RetryAfter, lease, limit, []byte(tok)).Limited || !ls.Acquire(now+d.RetryAfter-1, lease, limit, []byte(tok)).Limited {
						t.Fatalf("%s: RetryAfter %d is not exact", where, d.RetryAfter)
					}
				} else {
					if exp := ls.Apply(now, lease, []byte(tok)); exp != latest {
						t.Fatalf("%s: Apply returned %d, want %d", where, exp, latest)
					}
					// Re-acquiring extends a lease, never shortens it.
					if !mine || e < now+lease {
						ref[tok] = now + lease
					}
				}
			}
			// Live leases only decrease until the next operation: checking
			// now covers every instant up to it.
			instants++
			n := ls.Held(now)
			if wantN, _, _ := live(now); n != wantN || n > limit {
				t.Fatalf("%s: %d live leases (reference %d, limit %d)", where, n, wantN, limit)
			}
			toks := ls.Tokens(now)
			slices.Sort(toks)
			var wantToks []string
			for tk, e := range ref {
				if e > now {
					wantToks = append(wantToks, tk)
				}
			}
			slices.Sort(wantToks)
			if !slices.Equal(toks, wantToks) {
				t.Fatalf("%s: tokens %v, want %v", where, toks, wantToks)
			}
		}
	}
	t.Logf("%d sequences, %d operations, %d RetryAfter exactness checks, %d instants checked", sequences, ops, retries, instants)
}

func BenchmarkLeases(b *testing.B) {
	b.ReportAllocs()
	var ls Leases
	tokens := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d"), []byte("e"), []byte("f"), []byte("g"), []byte("h")}
	now := t0
	i := 0
	for range b.N {
		now += ms
		tok := tokens[i%len(tokens)]
		i++
		if d := ls.Acquire(now, 5*ms, 4, tok); !d.Limited {
			ls.Apply(now, 5*ms, tok)
		}
	}
}

var leasesSink *Leases

// acquireNewKey is CL.ACQUIRE on a key that does not exist yet, as the
// command does it: a new Leases (kept: the keyspace holds it), Acquire,
// then Apply of a token that arrives as []byte.
func acquireNewKey(now int64, tok []byte) {
	ls := new(Leases)
	if d := ls.Acquire(now, 60*s, 30, tok); !d.Limited {
		ls.Apply(now, 60*s, tok)
	}
	leasesSink = ls
}

func BenchmarkLeasesAcquireNewKey(b *testing.B) {
	b.ReportAllocs()
	tok := []byte("tok")
	now := t0
	for range b.N {
		now += ms
		acquireNewKey(now, tok)
	}
}

// TestLeasesAllocs pins the allocations of a new key's first acquire (the
// Leases alone: its entry and token bytes fit inside) and of a re-acquire or release
// on an existing key (none).
func TestLeasesAllocs(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation changes allocations")
	}
	tok := []byte("tok")
	now := t0
	if n := testing.AllocsPerRun(1000, func() { now += ms; acquireNewKey(now, tok) }); n > 1 {
		t.Errorf("new key's first acquire: %v allocs, want at most 1 (the Leases holds one lease and a short token)", n)
	}
	var ls Leases
	toks := [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")}
	for _, tk := range toks {
		ls.Apply(now, s, tk)
	}
	i := 0
	if n := testing.AllocsPerRun(1000, func() {
		now += ms
		tk := toks[i%len(toks)]
		i++
		if d := ls.Acquire(now, s, 4, tk); !d.Limited {
			ls.Apply(now, s, tk)
		}
		ls.Release(now, toks[i%len(toks)])
		ls.Held(now)
	}); n != 0 {
		t.Errorf("acquire/release on an existing key: %v allocs, want 0", n)
	}
	t.Logf("new key's first Acquire+Apply: %v allocs", testing.AllocsPerRun(100, func() { now += ms; acquireNewKey(now, tok) }))
}

// refLeases is the map-based Leases that the compact one replaced, kept as
// the reference model.
type refLeases struct{ m map[string]int64 }

func (ls *refLeases) held(now int64) int64 {
	var n int64
	for _, exp := range ls.m {
		if exp > now {
			n++
		}
	}
	return n
}

func (ls *refLeases) acquire(now, lease, limit int64, token string) Decision {
	d := Decision{Limit: limit, RetryAfter: -1}
	held := ls.held(now)
	exp, mine := ls.m[token]
	mine = mine && exp > now
	var soonest, latest int64 = math.MaxInt64, now
	for _, e := range ls.m {
		if e > now {
			soonest = min(soonest, e)
			latest = max(latest, e)
		}
	}
	switch {
	case mine:
	case held < limit:
		held++
	default:
		d.Limited = true
		d.RetryAfter = soonest - now
	}
	if !d.Limited {
		latest = max(latest, now+lease)
	}
	d.Remaining = max(limit-held, 0)
	if held > 0 {
		d.ResetAfter = latest - now
	}
	return d
}

func (ls *refLeases) apply(now, lease int64, token string) int64 {
	if ls.m == nil {
		ls.m = make(map[string]int64)
	}
	if exp, ok := ls.m[token]; !ok || exp < now+lease {
		ls.m[token] = now + lease
	}
	return ls.prune(now)
}

func (ls *refLeases) release(now int64, token string) (bool, int64) {
	var released bool
	if exp, ok := ls.m[token]; ok {
		released = exp > now
		delete(ls.m, token)
	}
	return released, ls.prune(now)
}

func (ls *refLeases) prune(now int64) int64 {
	latest := now
	for t, e := range ls.m {
		if e <= now {
			delete(ls.m, t)
			continue
		}
		latest = max(latest, e)
	}
	return latest
}

func (ls *refLeases) put(token string, exp int64) {
	if ls.m == nil {
		ls.m = make(map[string]int64)
	}
	ls.m[token] = exp
}

func (ls *refLeases) tokens(now int64) []string {
	var out []string
	for t, e := range ls.m {
		if e > now {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// checkLeasesLayout checks the invariants of the compact layout: tokens
// strictly increasing, ends non-decreasing and covering toks exactly, and
// memory bounded by what is held.
func checkLeasesLayout(t *testing.T, where string, ls *Leases) {
	t.Helper()
	prev := 0
	for i, e := range ls.ents {
		if e.end < prev {
			t.Fatalf("%s: entry %d ends at %d, before %d", where, i, e.end, prev)
		}
		prev = e.end
		if i > 0 && bytes.Compare(ls.token(i-1), ls.token(i)) >= 0 {
			t.Fatalf("%s: tokens %q, %q out of order", where, ls.token(i-1), ls.token(i))
		}
	}
	if prev != len(ls.toks) {
		t.Fatalf("%s: entries end at %d, toks holds %d bytes", where, prev, len(ls.toks))
	}
	if c := cap(ls.ents); c > 8 && 4*len(ls.ents) < c/2 {
		t.Fatalf("%s: %d entries in a capacity of %d", where, len(ls.ents), c)
	}
	if c := cap(ls.toks); c > 64 && 4*len(ls.toks) < c/2 {
		t.Fatalf("%s: %d token bytes in a capacity of %d", where, len(ls.toks), c)
	}
	// The first arrays are part of the Leases; the heap arrays count
	// extra. A slice is in its first array only while within its capacity.
	want := leasesBytes
	if cap(ls.ents) > len(ls.ent0) || cap(ls.ents) > 0 && &ls.ents[:1][0] != &ls.ent0[0] {
		want += leaseBytes * cap(ls.ents)
	}
	if cap(ls.toks) > len(ls.tok0) || cap(ls.toks) > 0 && &ls.toks[:1][0] != &ls.tok0[0] {
		want += cap(ls.toks)
	}
	if ls.MemSize() != want {
		t.Fatalf("%s: MemSize %d, want %d", where, ls.MemSize(), want)
	}
}

// TestLeasesModel runs random sequences of every operation (Acquire, Apply
// with or without a prior Acquire, Release, Held, Tokens, Put, Each) with a
// clock that also goes backwards, limits that change, and tokens that are
// empty, prefixes of each other or binary, against refLeases: every result
// and the whole state (Each) must be equal after every operation.
func TestLeasesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	pool := []string{"", "a", "aa", "ab", "b", "ba", "\x00", "\x00\x00", "\xff", "tok", "token-1", "token-10", "token-2",
		"a-much-longer-token-that-takes-more-room-than-the-others-0123456789"}
	const sequences, length = 4000, 120
	var ops, cases int
	for seq := 0; seq < sequences; seq++ {
		var ls Leases
		var ref refLeases
		// Few tokens make re-acquires and releases of held tokens common;
		// many make large sets (and shrinking) happen.
		ntok := 1 + rng.IntN(len(pool))
		if seq%10 == 0 {
			ntok = 200
		}
		token := func() string {
			if i := rng.IntN(ntok); i < len(pool) {
				return pool[i]
			} else {
				return fmt.Sprintf("t%d", i)
			}
		}
		maxLease := 1 + rng.Int64N(300)
		limit := 1 + rng.Int64N(6)
		if ntok == 200 {
			limit = 1 + rng.Int64N(250)
		}
		now := randStart(rng, 1000)
		for i := 0; i < length; i++ {
			switch rng.IntN(8) {
			case 0:
				now -= rng.Int64N(maxLease) // clock backwards
			case 1:
				limit = max(1, limit+rng.Int64N(5)-2)
			default:
				now += rng.Int64N(maxLease/2 + 1)
			}
			tok := token()
			btok := []byte(tok)
			lease := 1 + rng.Int64N(maxLease)
			where := fmt.Sprintf("seq %d step %d: limit %d now %d token %q", seq, i, limit, now, tok)
			ops++
			switch op := rng.IntN(10); {
			case op < 5:
				d, wd := ls.Acquire(now, lease, limit, btok), ref.acquire(now, lease, limit, tok)
				if d != wd {
					t.Fatalf("%s: Acquire %s, want %s", where, ds(d), ds(wd))
				}
				if !d.Limited {
					if e, we := ls.Apply(now, lease, btok), ref.apply(now, lease, tok); e != we {
						t.Fatalf("%s: Apply returned %d, want %d", where, e, we)
					}
				}
			case op == 5: // Apply without Acquire (as after a lowered limit)
				if e, we := ls.Apply(now, lease, btok), ref.apply(now, lease, tok); e != we {
					t.Fatalf("%s: Apply returned %d, want %d", where, e, we)
				}
			case op < 8:
				ok, e := ls.Release(now, btok)
				wok, we := ref.release(now, tok)
				if ok != wok || e != we {
					t.Fatalf("%s: Release (%v, %d), want (%v, %d)", where, ok, e, wok, we)
				}
			case op == 8: // decoding: expired and live leases, any order
				exp := now + rng.Int64N(2*maxLease) - maxLease
				ls.Put(tok, exp)
				ref.put(tok, exp)
			default:
				at := now + rng.Int64N(2*maxLease) - maxLease
				if n, wn := ls.Held(at), ref.held(at); n != wn {
					t.Fatalf("%s: Held(%d) %d, want %d", where, at, n, wn)
				}
				if toks, wt := ls.Tokens(at), ref.tokens(at); !slices.Equal(toks, wt) {
					t.Fatalf("%s: Tokens(%d) %q, want %q", where, at, toks, wt)
				}
			}
			// The whole state, expired leases not yet pruned included.
			got := map[string]int64{}
			var order []string
			ls.Each(func(tk string, e int64) { got[tk] = e; order = append(order, tk) })
			if !maps.Equal(got, ref.m) || len(order) != len(got) {
				t.Fatalf("%s: state %v, want %v", where, got, ref.m)
			}
			if !slices.IsSorted(order) {
				t.Fatalf("%s: Each order %q, want increasing", where, order)
			}
			checkLeasesLayout(t, where, &ls)
			cases++
		}
	}
	t.Logf("%d sequences, %d operations, %d states compared with the map-based model", sequences, ops, cases)
}

// TestLeasesShrink checks that memory follows the leases held: a set that
// held many leases gives memory back once they end.
func TestLeasesShrink(t *testing.T) {
	var ls Leases
	for i := range 1000 {
		ls.Apply(t0, s, []byte(fmt.Sprintf("token-%04d", i)))
	}
	big := ls.MemSize()
	if ls.Held(t0) != 1000 || big < 1000*(leaseBytes+10) {
		t.Fatalf("held %d, MemSize %d", ls.Held(t0), big)
	}
	ls.Apply(t0+s, s, []byte("last"))
	if small := ls.MemSize(); small > leasesBytes+8*leaseBytes+64 || ls.Held(t0+s) != 1 {
		t.Fatalf("after expiry: MemSize %d (was %d), held %d", small, big, ls.Held(t0+s))
	}
	if ok, exp := ls.Release(t0+s, []byte("last")); !ok || exp != t0+s || len(ls.ents) != 0 || len(ls.toks) != 0 {
		t.Fatalf("release: %v %d, %d entries, %d bytes", ok, exp, len(ls.ents), len(ls.toks))
	}
}

// leasesBytes, which MemSize counts and the keyspace accounts, is the real
// size of a Leases.
func TestLeasesSize(t *testing.T) {
	if n := unsafe.Sizeof(Leases{}); n != leasesBytes {
		t.Fatalf("Leases is %d bytes, leasesBytes says %d", n, leasesBytes)
	}
}

// MemSize counts the Leases alone while its one lease and short token fit
// inside it, and adds the heap arrays once they do not.
func TestLeasesMemSize(t *testing.T) {
	var ls Leases
	if n := ls.MemSize(); n != leasesBytes {
		t.Errorf("empty: MemSize %d, want %d", n, leasesBytes)
	}
	// A UUID's text, the usual token, fits inside.
	uuid := []byte("f81d4fae-7dec-11d0-a765-00a0c91e6bf6")
	ls.Apply(t0, s, uuid)
	if n := ls.MemSize(); n != leasesBytes {
		t.Errorf("one lease, %d-byte token: MemSize %d, want %d", len(uuid), n, leasesBytes)
	}
	var long Leases
	long.Apply(t0, s, bytes.Repeat([]byte("t"), len(long.tok0)+1))
	if n := long.MemSize(); n != leasesBytes+cap(long.toks) || cap(long.toks) <= len(long.tok0) {
		t.Errorf("one lease, %d-byte token: MemSize %d, token capacity %d", len(long.tok0)+1, n, cap(long.toks))
	}
	ls.Apply(t0, s, []byte("z"))
	// Two leases: the entries move to the heap; 37 token bytes still fit.
	if n := ls.MemSize(); n != leasesBytes+leaseBytes*cap(ls.ents) || cap(ls.ents) < 2 || &ls.toks[0] != &ls.tok0[0] {
		t.Errorf("two leases: MemSize %d, entries capacity %d, token capacity %d", n, cap(ls.ents), cap(ls.toks))
	}
	ls.Apply(t0, s, []byte("zz-and-the-token-bytes-no-longer-fit"))
	if n := ls.MemSize(); n != leasesBytes+leaseBytes*cap(ls.ents)+cap(ls.toks) || cap(ls.toks) <= len(ls.tok0) {
		t.Errorf("three leases: MemSize %d, entries capacity %d, token capacity %d", n, cap(ls.ents), cap(ls.toks))
	}
}

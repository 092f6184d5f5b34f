package limiter

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
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
			d := ls.Acquire(sp.at, lease, limit, sp.token)
			if d != sp.want {
				t.Errorf("%s: acquire %s, want %s", where, ds(d), ds(sp.want))
			}
			if d.Limited {
				continue
			}
			exp = ls.Apply(sp.at, lease, sp.token)
			if d.ResetAfter != exp-sp.at {
				t.Errorf("%s: ResetAfter %d, but Apply says the last lease ends %d after now", where, d.ResetAfter, exp-sp.at)
			}
		case opRelease:
			var ok bool
			ok, exp = ls.Release(sp.at, sp.token)
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
				ok, exp := ls.Release(now, tok)
				if e, had := ref[tok]; ok != (had && e > now) {
					want := had && e > now
					t.Fatalf("%s: released %v, want %v", where, ok, want)
				}
				delete(ref, tok)
				if _, _, latest := live(now); exp != max(now, latest) {
					t.Fatalf("%s: Release returned %d, want %d", where, exp, max(now, latest))
				}
			} else {
				d := ls.Acquire(now, lease, limit, tok)
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
					if ls.Acquire(now+d.RetryAfter, lease, limit, tok).Limited || !ls.Acquire(now+d.RetryAfter-1, lease, limit, tok).Limited {
						t.Fatalf("%s: RetryAfter %d is not exact", where, d.RetryAfter)
					}
				} else {
					if exp := ls.Apply(now, lease, tok); exp != latest {
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
	tokens := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	now := t0
	i := 0
	for b.Loop() {
		now += ms
		tok := tokens[i%len(tokens)]
		i++
		if d := ls.Acquire(now, 5*ms, 4, tok); !d.Limited {
			ls.Apply(now, 5*ms, tok)
		}
	}
}

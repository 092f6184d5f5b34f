package gcra

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestSettle settles at explicit instants with an emission interval of
// 100 ms (10 units per second) unless stated.
func TestSettle(t *testing.T) {
	const ei = 100 * ms
	u := func(x int64) uint64 { return uint64(x) }
	for _, tc := range []struct {
		name    string
		now     int64
		tat     uint64
		exists  bool
		ei      int64
		delta   int64
		wantTAT uint64
		wantTTL int64
	}{
		{"absent key, take 3", t0, 0, false, ei, 3, u(t0 + 300*ms), 300},
		{"absent key, give back: nothing below now", t0, 0, false, ei, -3, u(t0), 0},
		{"absent key, delta 0", t0, 0, false, ei, 0, u(t0), 0},
		{"absent key: the stored value is not read", t0, u(t0 + 5*s), false, ei, 1, u(t0 + 100*ms), 100},
		{"give back 2 of a TAT 500 ms ahead", t0, u(t0 + 500*ms), true, ei, -2, u(t0 + 300*ms), 300},
		{"give back exactly down to now", t0, u(t0 + 500*ms), true, ei, -5, u(t0), 0},
		{"give back more: not below now", t0, u(t0 + 500*ms), true, ei, -10, u(t0), 0},
		{"give back MaxInt64 units", t0, u(t0 + s), true, math.MaxInt64, -math.MaxInt64, u(t0), 0},
		{"TAT in the past, take 2: from now", t0, u(t0 - s), true, ei, 2, u(t0 + 200*ms), 200},
		{"TAT in the past, give back: nothing", t0, u(t0 - s), true, ei, -2, u(t0), 0},
		{"TAT at 1970 (0)", t0, 0, true, ei, 1, u(t0 + 100*ms), 100},
		{"take 4 more from the TAT: beyond the bucket, debt", t0, u(t0 + 500*ms), true, ei, 4, u(t0 + 900*ms), 900},
		{"delta 0 keeps a future TAT", t0, u(t0 + 500*ms), true, ei, 0, u(t0 + 500*ms), 500},
		{"delta 0 on a past TAT: now", t0, u(t0 - s), true, ei, 0, u(t0), 0},
		{"ttl truncated to ms", t0, u(t0 + 2*ms), true, 1, -1, u(t0 + 2*ms - 1), 1},
		{"ttl 0 under a ms", t0, u(t0 + ms), true, 1, -1, u(t0 + ms - 1), 0},
		// A TAT read as unsigned is ~year 2554: far ahead; a sum past
		// 2^64-1 saturates there (wrapping would free the key).
		{"TAT near 2^64, take 2: saturated", t0, math.MaxUint64 - uint64(100*ms), true, ei, 2, math.MaxUint64, int64((math.MaxUint64 - u(t0)) / uint64(ms))},
		// The exact TAT is t0 + (2^63-1)^2: saturated at 2^64-1.
		{"huge delta: TAT saturated", t0, 0, false, math.MaxInt64, math.MaxInt64, math.MaxUint64, int64((math.MaxUint64 - u(t0)) / uint64(ms))},
		{"take MaxInt64 ns", t0, u(t0), true, 1, math.MaxInt64, 11018684982062451178, 9223372036854},
		// Before 1970: the TAT wraps to a huge unsigned value (as Decide
		// stores it) and reads back as far in the future.
		{"negative now, absent key", -5 * s, 0, false, ei, 1, 18446744068809551616, 100},
		{"negative now, a wrapped TAT reads as year 2554", -5 * s, 18446744069709551616, true, ei, -2, 18446744069509551616, 18446744074509},
	} {
		tat, ttl := Settle(tc.now, tc.tat, tc.exists, tc.ei, tc.delta)
		if tat != tc.wantTAT || ttl != tc.wantTTL {
			t.Errorf("%s: Settle(%d, %d, %v, %d, %d) = %d %d, want %d %d", tc.name, tc.now, tc.tat, tc.exists, tc.ei, tc.delta, tat, ttl, tc.wantTAT, tc.wantTTL)
		}
		if wt, wl := refSettle(tc.now, tc.tat, tc.exists, tc.ei, tc.delta); wt != tat || wl != ttl {
			t.Errorf("%s: reference %d %d", tc.name, wt, wl)
		}
	}
}

// refSettle is Settle in math/big: base = max(now, TAT if it exists),
// the new TAT is max(base + delta*ei, now), at most 2^64-1 (below 0:
// mod 2^64), and the ttl its
// distance from now in whole ms, saturated.
func refSettle(now int64, tat uint64, exists bool, ei, delta int64) (uint64, int64) {
	n := big.NewInt(now)
	base := new(big.Int).Set(n)
	if old := new(big.Int).SetUint64(tat); exists && old.Cmp(n) > 0 {
		base = old
	}
	next := new(big.Int).Mul(big.NewInt(delta), big.NewInt(ei))
	next.Add(next, base)
	if next.Cmp(n) < 0 {
		next.Set(n)
	}
	if limit := new(big.Int).SetUint64(math.MaxUint64); next.Cmp(limit) > 0 {
		next = limit // debt past the year 2554 saturates
	}
	ttl := new(big.Int).Quo(new(big.Int).Sub(next, n), big.NewInt(ms))
	if !ttl.IsInt64() {
		ttl.SetInt64(math.MaxInt64)
	}
	mod := new(big.Int).Lsh(big.NewInt(1), 64)
	return new(big.Int).Mod(next, mod).Uint64(), ttl.Int64()
}

// TestSettleReference compares Settle with refSettle on random values
// over the whole input range, extremes favoured (randInt64, randNow).
func TestSettleReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 4))
	n := 200000
	if testing.Short() {
		n = 20000
	}
	for range n {
		now, tat, exists := randNow(rng), rng.Uint64(), rng.IntN(4) != 0
		if rng.IntN(2) == 0 {
			tat = uint64(now + randInt64(rng)%(10*s)) // near now
		}
		ei, delta := randInt64(rng), randInt64(rng)
		gt, gl := Settle(now, tat, exists, ei, delta)
		if wt, wl := refSettle(now, tat, exists, ei, delta); gt != wt || gl != wl {
			t.Fatalf("Settle(%d, %d, %v, %d, %d) = %d %d, reference %d %d", now, tat, exists, ei, delta, gt, gl, wt, wl)
		}
	}
	t.Logf("%d random settles agree with the math/big reference", n)
}

// TestSettleIsDecide: where Decide admits a quantity of delta and its new
// TAT is not before now, Settle gives the same TAT and ttl (Settle is
// Decide's arithmetic, never refused, floored at now).
func TestSettleIsDecide(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 5))
	var cases, agreed int
	for range 100000 {
		p := Params{MaxBurst: rng.Int64N(50), Count: 1 + rng.Int64N(1000), PeriodNS: 1 + rng.Int64N(10*s)}
		ei := p.emissionInterval()
		if ei == 0 {
			continue
		}
		limit := p.MaxBurst + 1
		now := int64(t0) + rng.Int64N(s)
		tat, exists := uint64(now+rng.Int64N(2*limit*ei)-limit*ei/2), rng.IntN(5) != 0
		p.Quantity = rng.Int64N(2*limit+1) - limit
		cases++
		r, err := Decide(now, tat, exists, p)
		if err != nil || r.Limited || int64(r.NewTAT) < now {
			continue
		}
		agreed++
		if gt, gl := Settle(now, tat, exists, ei, p.Quantity); gt != r.NewTAT || gl != r.TTLMillis {
			t.Fatalf("%+v at %d on %d (%v): Settle %d %d, Decide %d %d", p, now, tat, exists, gt, gl, r.NewTAT, r.TTLMillis)
		}
	}
	t.Logf("%d cases, %d admitted by Decide with a TAT not before now: Settle agrees", cases, agreed)
	if agreed < cases/4 {
		t.Errorf("too few admitted cases: %d of %d", agreed, cases)
	}
}

// gcraRes is an open reservation in TestSettleProperties' model of a key.
type gcraRes struct {
	q, deadline int64
}

// TestSettleProperties drives one GCRA key with random reserves (Decide
// with the reservation's quantity), plain requests, settles up and down,
// cancels and time passing the reservations' deadlines (a reservation past
// it is forgotten: its units stay used). Instants stay near t0, so TATs
// compare as int64. After every operation:
//
//   - the TAT never exceeds now + dvt + ei * (the positive deltas settled
//     since the last admitted request): an admitted Decide leaves TAT <=
//     now + dvt, and until the next one only a take moves the TAT further
//     ahead than time moves it back (dvt = ei * (max_burst + 1));
//   - a settle never leaves the TAT before now (a give-back never makes
//     the units in use negative), its ttl is (TAT - now) in whole ms;
//   - a take moves the TAT from max(TAT, now) by exactly delta*ei; a
//     give-back moves it back by exactly -delta*ei while that stays at or
//     after now, else to now;
//   - a settle with delta 0 changes no TAT still ahead.
func TestSettleProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 6))
	runs, length := 2000, 150
	if testing.Short() {
		runs = 200
	}
	var ops, reserves, refused, plain, takes, givebacks, floored, expired, checks int
	for range runs {
		p := Params{MaxBurst: rng.Int64N(20), Count: 1 + rng.Int64N(100), PeriodNS: []int64{ms, s, 60 * s}[rng.IntN(3)]}
		ei := p.emissionInterval()
		limit := p.MaxBurst + 1
		dvt := ei * limit
		ttl := ei * (1 + rng.Int64N(3*limit))
		now := int64(t0) + rng.Int64N(s)
		var tat uint64
		exists := false
		var debt int64 // positive deltas settled since the last admission
		var open []gcraRes
		where := func() string {
			return fmt.Sprintf("%+v (ei %d dvt %d) at %d, TAT %d (%v), debt %d", p, ei, dvt, now, int64(tat), exists, debt)
		}
		decide := func(q int64) bool {
			p.Quantity = q
			r, err := Decide(now, tat, exists, p)
			if err != nil {
				t.Fatalf("%s: %v", where(), err)
			}
			if !r.Limited {
				tat, exists, debt = r.NewTAT, true, 0
			}
			return !r.Limited
		}
		settle := func(delta int64) {
			before := int64(tat)
			if !exists {
				before = now
			}
			gt, gl := Settle(now, tat, exists, ei, delta)
			nt := int64(gt)
			base := max(before, now)
			switch {
			case nt < now || gl != (nt-now)/ms:
				t.Fatalf("%s: settle of %d: TAT %d ttl %d", where(), delta, nt, gl)
			case delta >= 0 && nt != base+delta*ei:
				t.Fatalf("%s: take of %d: TAT %d, want %d", where(), delta, nt, base+delta*ei)
			case delta < 0 && base+delta*ei >= now && nt != base+delta*ei:
				t.Fatalf("%s: give-back of %d: TAT %d, want %d", where(), -delta, nt, base+delta*ei)
			case delta < 0 && base+delta*ei < now && nt != now:
				t.Fatalf("%s: give-back of %d past now: TAT %d, want now", where(), -delta, nt)
			}
			switch {
			case delta > 0:
				takes++
				debt += delta
			case delta < 0:
				givebacks++
				if base+delta*ei < now {
					floored++
				}
			}
			tat, exists = gt, true
		}
		for range length {
			ops++
			switch op := rng.IntN(100); {
			case op < 30: // reserve
				q := 1 + rng.Int64N(limit+1)
				if decide(q) {
					reserves++
					open = append(open, gcraRes{q, now + ttl})
				} else {
					refused++
				}
			case op < 40: // plain request
				plain++
				decide(1 + rng.Int64N(limit))
			case op < 75 && len(open) > 0: // settle (10 in 35: cancel)
				i := rng.IntN(len(open))
				actual := rng.Int64N(2*open[i].q + 2)
				if op < 50 {
					actual = 0
				}
				settle(actual - open[i].q)
				open = append(open[:i], open[i+1:]...)
			case op < 90:
				now += rng.Int64N(ei)
			default: // past deadlines: the units stay used
				now += ttl/2 + rng.Int64N(ttl)
				kept := open[:0]
				for _, r := range open {
					if now <= r.deadline {
						kept = append(kept, r)
					} else {
						expired++
					}
				}
				open = kept
			}
			if exists {
				checks++
				if bound := now + dvt + debt*ei; int64(tat) > bound {
					t.Fatalf("%s: TAT %d beyond now + dvt + debt*ei = %d", where(), int64(tat), bound)
				}
			}
		}
	}
	t.Logf("%d runs, %d operations: %d reservations (%d refused), %d plain requests, %d takes, %d give-backs (%d floored at now), %d reservations forgotten at their deadline; %d TAT bounds checked",
		runs, ops, reserves, refused, plain, takes, givebacks, floored, expired, checks)
	if takes < 1000 || givebacks < 1000 || floored < 100 || refused < 1000 || expired < 1000 {
		t.Errorf("the generator covers too little")
	}
}

// FuzzSettle checks Settle against refSettle on any input; the seeds are
// TestSettle's edges.
func FuzzSettle(f *testing.F) {
	f.Add(int64(t0), uint64(0), false, 100*ms, int64(3))
	f.Add(int64(t0), uint64(t0+500*ms), true, 100*ms, int64(-10))
	f.Add(int64(t0), uint64(math.MaxUint64)-uint64(100*ms), true, 100*ms, int64(2))
	f.Add(int64(t0), uint64(0), false, int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add(int64(-5*s), uint64(18446744069709551616), true, 100*ms, int64(-2))
	f.Add(int64(math.MinInt64), uint64(math.MaxUint64), true, int64(math.MinInt64), int64(math.MinInt64))
	f.Add(int64(math.MaxInt64), uint64(0), true, int64(-1), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, now int64, tat uint64, exists bool, ei, delta int64) {
		gt, gl := Settle(now, tat, exists, ei, delta)
		if wt, wl := refSettle(now, tat, exists, ei, delta); gt != wt || gl != wl {
			t.Fatalf("Settle(%d, %d, %v, %d, %d) = %d %d, reference %d %d", now, tat, exists, ei, delta, gt, gl, wt, wl)
		}
		if gl < 0 {
			t.Fatalf("negative ttl %d", gl)
		}
	})
}

// TestSettleScenario steps one GCRA key (1 per second, max_burst 4: limit
// 5, dvt 5 s) through reserves, plain requests and settles at explicit
// instants, as the command layer drives them: a reservation is Decide with
// its quantity, its settle Settle with actual - reserved.
func TestSettleScenario(t *testing.T) {
	type step struct {
		at      int64 // ns after t0
		op      byte  // 'q': Decide with quantity v; 's': Settle with delta v
		v       int64
		limited bool
		wantTAT int64 // ns after t0
	}
	p := Params{MaxBurst: 4, Count: 1, PeriodNS: s}
	var tat uint64
	exists := false
	for i, sp := range []step{
		{0, 'q', 5, false, 5 * s},        // reserve 5: the whole bucket
		{0, 'q', 1, true, 5 * s},         // full
		{1 * s, 's', -3, false, 2 * s},   // settled with 2: 3 given back
		{1 * s, 'q', 3, false, 5 * s},    // the 3 units given back are usable
		{1 * s, 'q', 1, false, 6 * s},    // reserve 1
		{1 * s, 's', 3, false, 9 * s},    // settled with 4: debt, 4 s beyond the bucket
		{3 * s, 'q', 1, true, 9 * s},     // refused until the debt recedes
		{5 * s, 'q', 1, false, 10 * s},   // t0+5s: 9+1-5 <= 5
		{6 * s, 's', -20, false, 6 * s},  // a give-back stops at now: a full bucket
		{20 * s, 's', -1, false, 20 * s}, // on a TAT long past: nothing
		{20 * s, 's', 2, false, 22 * s},  // a take counts from now
		{20 * s, 'q', 4, true, 22 * s},   // 22+4-5 > 20
		{20 * s, 'q', 3, false, 25 * s},  // 22+3-5 <= 20
		{21 * s, 's', -2, false, 23 * s}, // give back 2 of the 3
		{21 * s, 's', 0, false, 23 * s},  // delta 0: the TAT stays
	} {
		now := int64(t0) + sp.at
		var limited bool
		switch sp.op {
		case 'q':
			p.Quantity = sp.v
			r, err := Decide(now, tat, exists, p)
			if err != nil {
				t.Fatal(err)
			}
			if limited = r.Limited; !limited {
				tat, exists = r.NewTAT, true
			}
		case 's':
			var ttl int64
			tat, ttl = Settle(now, tat, exists, s, sp.v)
			exists = true
			if ttl != (int64(tat)-now)/ms {
				t.Errorf("step %d: ttl %d for TAT t0%+d at t0%+d", i, ttl, int64(tat)-t0, sp.at)
			}
		}
		if limited != sp.limited || int64(tat)-t0 != sp.wantTAT {
			t.Errorf("step %d at t0+%ds (%c %d): limited %v TAT t0%+d, want %v t0%+d", i, sp.at/s, sp.op, sp.v, limited, int64(tat)-t0, sp.limited, sp.wantTAT)
		}
	}
}

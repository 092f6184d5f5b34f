package gcra

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// This file holds an independent reference for Decide written with
// math/big, straight from the pseudo-code of spec section 3: integers are
// unbounded big.Ints reduced mod 2^64 where redis-cell's i64 wraps, and
// every float64 operation is a big.Float operation at 53 bits, rounding to
// nearest even (IEEE 754 double for the normal range, which is all these
// values reach). It shares no code with the package.

var (
	big2p64    = new(big.Int).Lsh(big.NewInt(1), 64)
	big2p63    = new(big.Int).Lsh(big.NewInt(1), 63)
	bigF2p63   = new(big.Float).SetInt(big2p63)
	bigFM2p63  = new(big.Float).Neg(bigF2p63)
	bigMicro   = big.NewInt(1_000)
	bigMilli   = big.NewInt(1_000_000)
	bigSecond  = big.NewInt(1_000_000_000)
	bigFSecond = new(big.Float).SetInt64(1_000_000_000)
)

// refWrap returns x mod 2^64 as a two's complement int64, like an i64
// operation in a Rust release build.
func refWrap(x *big.Int) int64 {
	m := new(big.Int).Mod(x, big2p64)
	if m.Cmp(big2p63) >= 0 {
		m.Sub(m, big2p64)
	}
	return m.Int64()
}

// refF64 rounds x to a float64 value (53 bits, nearest even).
func refF64(x *big.Int) *big.Float {
	return new(big.Float).SetPrec(53).SetMode(big.ToNearestEven).SetInt(x)
}

// refQuo is float64 division: a/b rounded to 53 bits. b must not be 0.
func refQuo(a, b *big.Float) *big.Float {
	return new(big.Float).SetPrec(53).SetMode(big.ToNearestEven).Quo(a, b)
}

// refSatTrunc is Rust's `f as i64` on a finite value.
func refSatTrunc(f *big.Float) int64 {
	if f.Cmp(bigF2p63) >= 0 {
		return math.MaxInt64
	}
	if f.Cmp(bigFM2p63) <= 0 {
		return math.MinInt64
	}
	i, _ := f.Int(nil) // toward zero
	return i.Int64()
}

// refSecs is redis-cell's secs(): Duration::as_seconds_f64() as i64, plus
// one if subsec_milliseconds() > 0.
func refSecs(d *big.Int) int64 {
	s, n := new(big.Int).QuoRem(d, bigSecond, new(big.Int))
	frac := refQuo(refF64(n), bigFSecond)
	sum := new(big.Float).SetPrec(53).SetMode(big.ToNearestEven).Add(refF64(s), frac)
	r := refSatTrunc(sum)
	if new(big.Int).Quo(n, bigMilli).Sign() > 0 {
		r++
	}
	return r
}

// refMillisCeil is d ns in ms rounded toward +Inf.
func refMillisCeil(d *big.Int) int64 {
	q, r := new(big.Int).QuoRem(d, bigMilli, new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// refEmissionInterval is Rate::per_period: period*10^9 exactly, both sides
// rounded to float64, divided, saturated.
func refEmissionInterval(count, period int64) int64 {
	ns := new(big.Int).Mul(big.NewInt(period), bigSecond)
	if count == 0 || ns.Sign() == 0 {
		return 0
	}
	return refSatTrunc(refQuo(refF64(ns), refF64(big.NewInt(count))))
}

// refDecide is Decide written with math/big.
func refDecide(now int64, tat uint64, exists bool, p Params) (Result, error) {
	ei := refEmissionInterval(p.Count, p.Period)
	if ei == 0 {
		return Result{}, ErrZeroRate
	}
	limit := refWrap(new(big.Int).Add(big.NewInt(p.MaxBurst), big.NewInt(1)))
	dvt := refWrap(new(big.Int).Mul(big.NewInt(ei), big.NewInt(limit)))
	inc := refWrap(new(big.Int).Mul(big.NewInt(ei), big.NewInt(p.Quantity)))

	bNow := big.NewInt(now)
	bTAT := new(big.Int).Set(bNow)
	if exists {
		bTAT.SetUint64(tat)
	}
	newTAT := new(big.Int)
	if bNow.Cmp(bTAT) > 0 {
		newTAT.Add(bNow, big.NewInt(inc))
	} else {
		newTAT.Add(bTAT, big.NewInt(inc))
	}
	allowAt := new(big.Int).Sub(newTAT, big.NewInt(dvt))
	diff := new(big.Int).Sub(bNow, allowAt)

	r := Result{Limit: limit, RetryAfter: -1, RetryAfterMillis: -1}
	var ttl *big.Int
	if diff.Sign() < 0 {
		r.Limited = true
		if inc <= dvt {
			retry := new(big.Int).Neg(diff)
			r.RetryAfter = refSecs(retry)
			r.RetryAfterMillis = refMillisCeil(retry)
		}
		ttl = new(big.Int).Sub(bTAT, bNow)
	} else {
		ttl = new(big.Int).Sub(newTAT, bNow)
		r.Store = true
		r.NewTAT = new(big.Int).Mod(newTAT, big2p64).Uint64()
		r.TTLMillis = new(big.Int).Quo(ttl, bigMilli).Int64()
	}

	next := new(big.Int).Sub(big.NewInt(dvt), ttl)
	if next.Cmp(new(big.Int).Neg(big.NewInt(ei))) > 0 {
		nu := new(big.Int).Quo(next, bigMicro)
		eu := new(big.Int).Quo(big.NewInt(ei), bigMicro)
		if eu.Sign() == 0 {
			// x/0.0 in IEEE: ±Inf saturates, 0/0 is NaN, which becomes 0.
			switch nu.Sign() {
			case 1:
				r.Remaining = math.MaxInt64
			case -1:
				r.Remaining = math.MinInt64
			}
		} else {
			r.Remaining = refSatTrunc(refQuo(refF64(nu), refF64(eu)))
		}
	}
	r.ResetAfter = refSecs(ttl)
	r.ResetAfterMillis = refMillisCeil(ttl)
	return r, nil
}

// checkAgainstRef fails t when Decide and refDecide disagree.
func checkAgainstRef(t *testing.T, now int64, tat uint64, exists bool, p Params) {
	t.Helper()
	have, herr := Decide(now, tat, exists, p)
	want, werr := refDecide(now, tat, exists, p)
	if have != want || herr != werr {
		t.Fatalf("Decide(%d, %d, %v, %+v):\nhave %+v, %v\nwant %+v, %v", now, tat, exists, p, have, herr, want, werr)
	}
}

// interesting are argument values at the edges of the arithmetic.
var interesting = []int64{
	math.MinInt64, math.MinInt64 + 1, -9223372036, -1e9 - 1, -1e9, -1e6, -1000, -2, -1,
	0, 1, 2, 3, 4, 5, 10, 15, 30, 60, 1000, 999, 2000, 2001, 41221, 300000,
	1e6, 1e7, 1e9 - 1, 1e9, 1e9 + 1, 86400, 86400000000, 9223372036, 9223372037,
	1 << 53, math.MaxInt64 - 1, math.MaxInt64,
}

// randInt64 returns an argument value: an edge case, a small number, a
// number of any magnitude or any int64.
func randInt64(rng *rand.Rand) int64 {
	switch rng.IntN(6) {
	case 0, 1:
		return interesting[rng.IntN(len(interesting))]
	case 2:
		return rng.Int64N(201) - 100
	case 3:
		v := int64(rng.Uint64() >> rng.UintN(64)) // any magnitude
		if rng.IntN(2) == 0 {
			v = -v
		}
		return v
	case 4:
		return interesting[rng.IntN(len(interesting))] + rng.Int64N(5) - 2 // wraps near the ends
	}
	return int64(rng.Uint64())
}

// randNow returns an instant: mostly near today's 1.8e18 ns, sometimes
// anywhere.
func randNow(rng *rand.Rand) int64 {
	switch rng.IntN(4) {
	case 0:
		return interesting[rng.IntN(len(interesting))]
	case 1:
		return int64(rng.Uint64())
	}
	return t0 + rng.Int64N(1e12) - 5e11
}

// randTAT returns a stored value near now or anywhere in [0, 2^64).
func randTAT(rng *rand.Rand, now int64) uint64 {
	switch rng.IntN(5) {
	case 0:
		return rng.Uint64()
	case 1:
		return []uint64{0, 1, math.MaxInt64, 1 << 63, math.MaxUint64, math.MaxUint64 - 1e9}[rng.IntN(6)]
	case 2:
		return uint64(now) + uint64(rng.Int64N(2e9)-1e9) // within 1 s of now
	}
	return uint64(now) + uint64(rng.Int64N(1e12)-1e11)
}

// TestDecideMatchesReference compares Decide with the math/big reference
// on random and extreme arguments.
func TestDecideMatchesReference(t *testing.T) {
	n := 300_000
	if testing.Short() {
		n = 20_000
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var allowed, limited, zero, huge int
	for range n {
		now := randNow(rng)
		p := Params{MaxBurst: randInt64(rng), Count: randInt64(rng), Period: randInt64(rng), Quantity: randInt64(rng)}
		if rng.IntN(3) == 0 { // a sane rate, so that more cases are allowed
			p.Count, p.Period = rng.Int64N(1000)+1, rng.Int64N(100)+1
		}
		if rng.IntN(4) == 0 {
			p.Quantity = rng.Int64N(5)
		}
		exists := rng.IntN(4) != 0
		tat := randTAT(rng, now)
		checkAgainstRef(t, now, tat, exists, p)

		r, err := Decide(now, tat, exists, p)
		switch {
		case err != nil:
			zero++
		case r.Limited:
			limited++
		default:
			allowed++
		}
		if r.Remaining == math.MaxInt64 || r.Remaining == math.MinInt64 || r.ResetAfter > 1e9 || r.ResetAfter < -1e9 {
			huge++
		}
	}
	t.Logf("checked %d cases against the math/big reference: %d allowed, %d limited, %d zero rate, %d with saturated or huge values",
		n, allowed, limited, zero, huge)
	if allowed < n/10 || limited < n/10 || zero == 0 || huge == 0 {
		t.Errorf("the generator covers too little: %d allowed, %d limited, %d zero rate, %d huge", allowed, limited, zero, huge)
	}
}

// TestReferenceEdges runs the reference comparison over the cross product
// of edge values.
func TestReferenceEdges(t *testing.T) {
	edges := []int64{math.MinInt64, -1e9, -1, 0, 1, 1e9, 9223372036, math.MaxInt64}
	tats := []uint64{0, t0 - 5e9, t0, t0 + 2e9, math.MaxInt64, 1 << 63, math.MaxUint64}
	n := 0
	for _, b := range edges {
		for _, c := range edges {
			for _, per := range edges {
				for _, q := range edges {
					p := Params{MaxBurst: b, Count: c, Period: per, Quantity: q}
					checkAgainstRef(t, t0, 0, false, p)
					n++
					for _, tat := range tats {
						checkAgainstRef(t, t0, tat, true, p)
						n++
					}
				}
			}
		}
	}
	t.Logf("checked %d edge cases against the math/big reference", n)
}

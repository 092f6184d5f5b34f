package gcra

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

func (a i128) big() *big.Int {
	v := big.NewInt(a.hi)
	v.Lsh(v, 64)
	return v.Add(v, new(big.Int).SetUint64(a.lo))
}

// randI128 returns a value of random bit length (up to ~100 bits, beyond
// anything Decide builds), with bit patterns that stress rounding: runs of
// ones and zeros, ties and sticky bits far below the significand.
func randI128(rng *rand.Rand) i128 {
	var a i128
	switch rng.IntN(4) {
	case 0:
		a = i128{hi: int64(rng.Uint64() >> (28 + rng.UintN(37))), lo: rng.Uint64()} // < 2^100
	case 1: // 53 significant bits, then a tie or near-tie, then a sticky bit or not
		n := 54 + rng.UintN(46)
		v := new(big.Int).Lsh(big.NewInt(int64(rng.Uint64()>>11|1<<52)), n-53)
		v.Add(v, new(big.Int).Lsh(big.NewInt(int64(rng.IntN(2))), n-54)) // the rounding bit
		if rng.IntN(2) == 0 {
			v.Add(v, big.NewInt(int64(rng.IntN(2))))
		}
		a = i128{hi: new(big.Int).Rsh(v, 64).Int64(), lo: new(big.Int).And(v, new(big.Int).SetUint64(math.MaxUint64)).Uint64()}
	case 2:
		a = i128FromInt64(int64(rng.Uint64()))
	default:
		a = i128FromUint64(rng.Uint64() >> rng.UintN(64))
	}
	if rng.IntN(2) == 0 {
		a = a.neg()
	}
	return a
}

func TestI128(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 200_000
	for range n {
		a, b := randI128(rng), randI128(rng)
		ba, bb := a.big(), b.big()
		if have, want := a.add(b).big(), new(big.Int).Add(ba, bb); have.Cmp(want) != 0 {
			t.Fatalf("%v + %v: have %v, want %v", ba, bb, have, want)
		}
		if have, want := a.sub(b).big(), new(big.Int).Sub(ba, bb); have.Cmp(want) != 0 {
			t.Fatalf("%v - %v: have %v, want %v", ba, bb, have, want)
		}
		if have, want := a.neg().big(), new(big.Int).Neg(ba); have.Cmp(want) != 0 {
			t.Fatalf("-%v: have %v, want %v", ba, have, want)
		}
		if have, want := a.cmp(b), ba.Cmp(bb); have != want {
			t.Fatalf("cmp(%v, %v): have %d, want %d", ba, bb, have, want)
		}
		if have, want := a.isNeg(), ba.Sign() < 0; have != want {
			t.Fatalf("isNeg(%v): have %v", ba, have)
		}
		for _, d := range []uint64{1, 3, 1_000, 1_000_000, 1_000_000_000, math.MaxInt64} {
			q, r := a.quoRem(d)
			wq, wr := new(big.Int).QuoRem(ba, new(big.Int).SetUint64(d), new(big.Int))
			if q.big().Cmp(wq) != 0 || r != wr.Int64() {
				t.Fatalf("%v quoRem %d: have %v, %d; want %v, %v", ba, d, q.big(), r, wq, wr)
			}
		}
		want, _ := new(big.Float).SetInt(ba).Float64() // nearest even
		if have := a.float64(); have != want {
			t.Fatalf("float64(%v): have %g, want %g", ba, have, want)
		}
	}
	for range n {
		x, y := int64(rng.Uint64()), int64(rng.Uint64()>>rng.UintN(64))
		if rng.IntN(8) == 0 {
			x = []int64{math.MinInt64, math.MaxInt64, -1, 0}[rng.IntN(4)]
		}
		if have, want := mulInt64(x, y).big(), new(big.Int).Mul(big.NewInt(x), big.NewInt(y)); have.Cmp(want) != 0 {
			t.Fatalf("%d * %d: have %v, want %v", x, y, have, want)
		}
	}
	t.Logf("checked %d random i128 pairs and %d products against math/big", n, n)
}

func TestI128Float64Rounding(t *testing.T) {
	p := func(e int) *big.Int { return new(big.Int).Lsh(big.NewInt(1), uint(e)) }
	sum := func(xs ...*big.Int) *big.Int {
		s := new(big.Int)
		for _, x := range xs {
			s.Add(s, x)
		}
		return s
	}
	for _, tc := range []struct {
		v    *big.Int
		want float64
	}{
		{p(64), 0x1p64},
		{sum(p(80), p(27)), 0x1p80},                         // exact tie, even below: down
		{sum(p(80), p(28), p(27)), 0x1p80 + 0x1p29},         // exact tie, odd below: up
		{sum(p(80), p(27), big.NewInt(1)), 0x1p80 + 0x1p28}, // tie + sticky bit in lo: up
		{sum(p(100), p(47), p(0)), 0x1p100 + 0x1p48},        // sticky bit 100 bits down
		{sum(p(100), p(47)), 0x1p100},
		{new(big.Int).Sub(p(93), big.NewInt(1)), 0x1p93}, // all ones round up to a power of two
		{new(big.Int).Mul(big.NewInt(math.MaxInt64), big.NewInt(1e9)), 0x1p63 * 1e9},
	} {
		for _, sign := range []int64{1, -1} {
			v := new(big.Int).Mul(tc.v, big.NewInt(sign))
			a := i128{hi: new(big.Int).Rsh(v, 64).Int64(), lo: new(big.Int).And(v, new(big.Int).SetUint64(math.MaxUint64)).Uint64()}
			if a.big().Cmp(v) != 0 {
				t.Fatalf("bad test value %v", v)
			}
			if have, want := a.float64(), float64(sign)*tc.want; have != want {
				t.Errorf("float64(%v): have %b, want %b", v, have, want)
			}
		}
	}
}

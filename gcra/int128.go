package gcra

import (
	"math"
	"math/bits"
)

// i128 is a signed 128-bit integer in two's complement, hi*2^64 + lo.
// The zero value is 0.
//
// It holds instants and durations in nanoseconds that do not fit in an
// int64: a stored TAT is any uint64 (up to ~year 2554) and the increment
// and delay variation tolerance reach ±2^63 ns (±292 years), so TATs and
// their differences need about 67 bits. Every value Decide builds stays far
// inside the 128-bit range, so the operations below never overflow.
type i128 struct {
	hi int64
	lo uint64
}

// i128FromInt64 returns x sign-extended to 128 bits.
func i128FromInt64(x int64) i128 { return i128{hi: x >> 63, lo: uint64(x)} }

// i128FromUint64 returns x zero-extended to 128 bits.
func i128FromUint64(x uint64) i128 { return i128{lo: x} }

// mulInt64 returns the exact product a*b.
func mulInt64(a, b int64) i128 {
	hi, lo := bits.Mul64(abs64(a), abs64(b))
	p := i128{hi: int64(hi), lo: lo}
	if (a < 0) != (b < 0) {
		p = p.neg()
	}
	return p
}

// abs64 returns |x| as a uint64; abs64(math.MinInt64) is 2^63.
func abs64(x int64) uint64 {
	if x < 0 {
		return -uint64(x)
	}
	return uint64(x)
}

func (a i128) add(b i128) i128 {
	lo, carry := bits.Add64(a.lo, b.lo, 0)
	return i128{hi: a.hi + b.hi + int64(carry), lo: lo}
}

func (a i128) sub(b i128) i128 {
	lo, borrow := bits.Sub64(a.lo, b.lo, 0)
	return i128{hi: a.hi - b.hi - int64(borrow), lo: lo}
}

func (a i128) neg() i128 { return i128{}.sub(a) }

func (a i128) isNeg() bool { return a.hi < 0 }

// cmp returns -1, 0 or +1 as a is less than, equal to or greater than b.
func (a i128) cmp(b i128) int {
	switch {
	case a.hi < b.hi:
		return -1
	case a.hi > b.hi:
		return 1
	case a.lo < b.lo:
		return -1
	case a.lo > b.lo:
		return 1
	}
	return 0
}

// quoRem returns a/d truncated toward zero and the remainder, which has the
// sign of a (like Go's / and % on integers). d must be in (0, 2^63).
func (a i128) quoRem(d uint64) (q i128, r int64) {
	neg := a.isNeg()
	m := a
	if neg {
		m = a.neg()
	}
	qhi, rem := bits.Div64(0, uint64(m.hi), d)
	qlo, rem := bits.Div64(rem, m.lo, d)
	q, r = i128{hi: int64(qhi), lo: qlo}, int64(rem)
	if neg {
		q, r = q.neg(), -r
	}
	return q, r
}

// int64 returns the low 64 bits of a as an int64: a itself when it fits.
func (a i128) int64() int64 { return int64(a.lo) }

// float64 returns a rounded to the nearest float64, ties to even, as Rust's
// `i128 as f64` does.
func (a i128) float64() float64 {
	neg := a.isNeg()
	m := a
	if neg {
		m = a.neg()
	}
	hi, lo := uint64(m.hi), m.lo
	var f float64
	if hi == 0 {
		f = float64(lo) // Go rounds integer to float conversions to nearest even.
	} else {
		// Keep the top 64 significant bits and fold every bit shifted out
		// into the lowest one (a sticky bit). 64 bits leave 11 below the
		// 53-bit significand, so that single rounding to nearest even is
		// the same as rounding the exact value.
		n := uint(bits.Len64(hi)) // 1..64: the number of bits to drop
		top := hi<<(64-n) | lo>>n
		if lo<<(64-n) != 0 {
			top |= 1
		}
		f = math.Ldexp(float64(top), int(n))
	}
	if neg {
		f = -f
	}
	return f
}

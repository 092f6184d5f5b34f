package commands

import (
	"math/big"
)

// Redis computes INCRBYFLOAT (and INCREX BYFLOAT) in C's long double: on
// x86-64, the x87 extended format, a 64-bit mantissa with a 15-bit
// exponent. Go has no such type, so these helpers emulate it with
// big.Float at precision 64, rounding to nearest even as the FPU does,
// and with the format's range: what Redis answers ("10.6" for 10.5 plus
// 0.1, where float64 would give 10.599999999999999) depends on it.
// Subnormal long doubles (below 2^-16382) keep 64 bits here, where the
// FPU keeps fewer; no counter lives there.

const (
	ldPrec = 64
	// ldMaxExp is the largest big.Float exponent (value = mant × 2^exp,
	// 0.5 ≤ mant < 1) of a finite long double: LDBL_MAX < 2^16384.
	ldMaxExp = 16384
	// ldMinExp is the exponent of the smallest subnormal long double,
	// 2^-16445; what rounds below it is zero (strtold: ERANGE).
	ldMinExp = -16444
	// ldMaxChars is Redis's MAX_LONG_DOUBLE_CHARS: string2ld refuses a
	// string of this length or more.
	ldMaxChars = 5 * 1024
)

func newLD() *big.Float { return new(big.Float).SetPrec(ldPrec).SetMode(big.ToNearestEven) }

// ldFinite reports whether f fits a finite long double.
func ldFinite(f *big.Float) bool {
	if f.IsInf() {
		return false
	}
	return f.Sign() == 0 || f.MantExp(nil) <= ldMaxExp
}

// parseLongDouble accepts what Redis's string2ld accepts (strtold reading
// the whole string): an optional sign, then a decimal number with an
// optional exponent, a hexadecimal one ("0x1.8p3") or "inf"/"infinity"
// in any case; no leading space, not NaN, not out of range, not a
// non-zero number that rounds to zero. Infinity is a number here, as it
// is for strtold.
func parseLongDouble(b []byte) (*big.Float, bool) {
	if len(b) == 0 || len(b) >= ldMaxChars {
		return nil, false
	}
	s := b
	neg := false
	if s[0] == '+' || s[0] == '-' {
		neg = s[0] == '-'
		s = s[1:]
	}
	if eqFold(s, "inf") || eqFold(s, "infinity") {
		return newLD().SetInf(neg), true
	}
	hex := len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')
	digits := s
	if hex {
		digits = s[2:]
	}
	// mantissa: digits [. digits], at least one digit; then an exponent.
	isDigit := func(c byte) bool {
		if hex {
			return '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f'
		}
		return '0' <= c && c <= '9'
	}
	// first is the index, among the digits, of the first non-zero one.
	i, nd, dot, first, intDigits := 0, 0, -1, -1, 0
	for ; i < len(digits); i++ {
		c := digits[i]
		if isDigit(c) {
			if c != '0' && first < 0 {
				first = nd
			}
			nd++
			if dot < 0 {
				intDigits++
			}
			continue
		}
		if c == '.' && dot < 0 {
			dot = i
			continue
		}
		break
	}
	if nd == 0 {
		return nil, false
	}
	exp := int64(0)
	if i < len(digits) {
		c := digits[i] | 0x20
		if (hex && c != 'p') || (!hex && c != 'e') {
			return nil, false
		}
		e := digits[i+1:]
		eneg := false
		if len(e) > 0 && (e[0] == '+' || e[0] == '-') {
			eneg = e[0] == '-'
			e = e[1:]
		}
		if len(e) == 0 {
			return nil, false
		}
		for _, c := range e {
			if c < '0' || c > '9' {
				return nil, false
			}
			if exp < 1<<40 {
				exp = exp*10 + int64(c-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	if first < 0 {
		f := newLD()
		if neg {
			f.Neg(f)
		}
		return f, true
	}
	// The magnitude, roughly (in decimal or binary places), decides
	// overflow and underflow before big.Float is asked to build a number
	// with a huge exponent.
	// The first non-zero digit's place: 10^mag (16^mag in hex) apart
	// from the exponent.
	mag := int64(intDigits - first - 1)
	if hex {
		mag = exp + 4*mag
		if mag > ldMaxExp+8 || mag < ldMinExp-8 {
			return nil, false
		}
	} else {
		mag += exp
		if mag > 4934 || mag < -4953 {
			return nil, false
		}
	}
	f := newLD()
	var err error
	if hex {
		_, _, err = f.Parse(string(b), 0)
	} else {
		_, _, err = f.Parse(string(b), 10)
	}
	if err != nil || !ldFinite(f) || f.MantExp(nil) < ldMinExp {
		return nil, false
	}
	return f, true
}

// formatLongDouble is Redis's ld2string in human mode: printf "%.17Lf",
// then trailing zeros and a trailing point removed, "-0" written "0",
// and "inf"/"-inf" for the infinities.
func formatLongDouble(dst []byte, f *big.Float) []byte {
	if f.IsInf() {
		if f.Sign() < 0 {
			return append(dst, "-inf"...)
		}
		return append(dst, "inf"...)
	}
	// |f| < 2^-58 (about 3.5e-18) prints as 0 at 17 decimals. Said at
	// once: big.Float would expand its exact decimal first, thousands of
	// digits for the smallest long doubles (milliseconds per call).
	if f.Sign() == 0 || f.MantExp(nil) <= -58 {
		return append(dst, '0')
	}
	start := len(dst)
	dst = f.Append(dst, 'f', 17)
	if dst[start] == '+' {
		dst = append(dst[:start], dst[start+1:]...)
	}
	for dst[len(dst)-1] == '0' {
		dst = dst[:len(dst)-1]
	}
	if dst[len(dst)-1] == '.' {
		dst = dst[:len(dst)-1]
	}
	if string(dst[start:]) == "-0" {
		dst = append(dst[:start], '0')
	}
	return dst
}

// ldToFloat64 is the long double's value as a C cast to double gives it.
func ldToFloat64(f *big.Float) float64 {
	v, _ := f.Float64()
	return v
}

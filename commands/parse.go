package commands

import (
	"math"
	"strconv"
)

// parseRustI64 accepts exactly what Rust's i64::from_str accepts (and Go's
// strconv.ParseInt(s, 10, 64)): an optional single '+' or '-', then one or
// more ASCII digits, within the int64 range. It does not allocate.
func parseRustI64(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '+' || b[0] == '-') {
		neg = b[0] == '-'
		b = b[1:]
	}
	u, ok := parseDigits(b)
	if !ok {
		return 0, false
	}
	return signed(neg, u)
}

// signed applies a sign to a magnitude, refusing what int64 cannot hold.
func signed(neg bool, u uint64) (int64, bool) {
	if neg {
		if u > 1<<63 {
			return 0, false
		}
		return int64(-u), true // -(1<<63) wraps to MinInt64, as intended
	}
	if u > math.MaxInt64 {
		return 0, false
	}
	return int64(u), true
}

// parseRustU64 accepts what Rust's u64::from_str accepts: an optional '+',
// then one or more ASCII digits, at most 2^64-1.
func parseRustU64(b []byte) (uint64, bool) {
	if len(b) > 0 && b[0] == '+' {
		b = b[1:]
	}
	return parseDigits(b)
}

func parseDigits(b []byte) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if u > (math.MaxUint64-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	return u, true
}

// parseRedisInt accepts what Redis's string2ll accepts: "0", or an optional
// '-' followed by a digit 1-9 and more digits, within the int64 range. No
// '+', no leading zeros, no spaces.
func parseRedisInt(b []byte) (int64, bool) {
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg = true
		b = b[1:]
	}
	if len(b) == 0 || b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	u, ok := parseDigits(b)
	if !ok {
		return 0, false
	}
	return signed(neg, u)
}

// eqFold reports whether b equals the lower-case ASCII word w, ignoring case.
func eqFold(b []byte, w string) bool {
	if len(b) != len(w) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != w[i] {
			return false
		}
	}
	return true
}

// parseRedisDouble accepts what Redis's getDoubleFromObject accepts: a
// non-empty string with no leading space that strtod reads whole, not NaN
// and not out of the float64 range ("inf" is a number). Go's digit
// separators ("0x_1p0") are refused, as no C parser reads them.
func parseRedisDouble(b []byte) (float64, bool) {
	if len(b) == 0 || b[0] == ' ' || (b[0] >= '\t' && b[0] <= '\r') {
		return 0, false
	}
	for _, c := range b {
		if c == '_' {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

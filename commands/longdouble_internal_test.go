package commands

import (
	"math"
	"math/big"
	"strconv"
	"strings"
	"testing"
)

// FuzzParseLongDouble: parseLongDouble never panics; what it reads as a
// finite number reads back the same after formatLongDouble when the
// digits hold it (numbers written with fewer than 17 decimals); and every
// plain decimal float64 string it agrees on with strconv.
//
//	go test -run '^$' -fuzz '^FuzzParseLongDouble$' -fuzztime 30s ./commands
func FuzzParseLongDouble(f *testing.F) {
	for _, s := range []string{"0", "-0", "10.5", ".5", "5.", "1e308", "1e4932", "1e4933", "1e-4950", "1e-5000",
		"0x1.8p1", "0x10", "inf", "-Infinity", "nan", "", " 1", "1 ", "1e", "0x", "1_0", "0b1", "+3", "1e99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, ok := parseLongDouble([]byte(s))
		if !ok {
			if x, err := strconv.ParseFloat(s, 64); err == nil && plainDecimal(s) && !math.IsInf(x, 0) && math.Abs(x) > 1e-300 {
				t.Fatalf("%q: refused, strconv reads %v", s, x)
			}
			return
		}
		if v.IsInf() {
			return
		}
		out := formatLongDouble(nil, v)
		back, ok := parseLongDouble(out)
		if !ok {
			t.Fatalf("%q: formatted %q, which does not parse", s, out)
		}
		if x, err := strconv.ParseFloat(s, 64); err == nil && plainDecimal(s) {
			if f64, _ := v.Float64(); f64 != x && !math.IsInf(x, 0) {
				t.Fatalf("%q: %v as a double, strconv reads %v", s, f64, x)
			}
		}
		if v.MantExp(nil) > -50 && v.MantExp(nil) < 50 && back.Cmp(v) != 0 && len(s) < 12 && !strings.ContainsAny(s, "eExXpP") {
			if d := new(big.Float).Sub(back, v); d.Abs(d).Cmp(big.NewFloat(1e-17)) > 0 {
				t.Fatalf("%q: %v formatted %q reads back %v", s, v, out, back)
			}
		}
	})
}

// plainDecimal reports whether s is digits with at most one point and a
// sign, an optional exponent: a form strtold and strconv read alike.
func plainDecimal(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c >= '0' && c <= '9', c == '.', c == 'e', c == 'E':
		case (c == '-' || c == '+') && (i == 0 || s[i-1] == 'e' || s[i-1] == 'E'):
		default:
			return false
		}
	}
	return true
}

// TestFormatLongDoubleTiny: values that print as 0 at 17 decimals do so
// without expanding their exact decimal (thousands of digits for the
// smallest long doubles): one allocation each (the result), and
// those just above the cut still print their digit.
func TestFormatLongDoubleTiny(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"1e-4950", "0"}, {"-1e-4950", "0"}, {"3e-18", "0"}, {"-1e-30", "0"},
		{"6e-18", "0.00000000000000001"}, {"-6e-18", "-0.00000000000000001"},
	} {
		f, _, err := big.ParseFloat(tc.in, 10, 64, big.ToNearestEven)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(formatLongDouble(nil, f)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.in, got, tc.want)
		}
		if n := testing.AllocsPerRun(10, func() { formatLongDouble(nil, f) }); tc.want == "0" && n > 1 {
			t.Errorf("%s: %v allocations to format, want one (the result)", tc.in, n)
		}
	}
}

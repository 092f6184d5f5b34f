package commands

import (
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
)

// randomIntegerish returns strings close to integers: signs, digits (many
// around 19-20 digits, where int64 overflows), and the bytes parsers get
// wrong (spaces, '_', '.', 'e', 'x', NUL, non-ASCII digits).
func randomIntegerish(rng *rand.Rand) string {
	var b strings.Builder
	switch rng.Intn(4) {
	case 0: // a well-formed number, possibly out of range
		if rng.Intn(2) == 0 {
			b.WriteByte("+-"[rng.Intn(2)])
		}
		n := 1 + rng.Intn(21)
		if rng.Intn(3) == 0 {
			n = 18 + rng.Intn(3)
		}
		for i := 0; i < n; i++ {
			b.WriteByte(byte('0' + rng.Intn(10)))
		}
	case 1: // a boundary value, maybe off by a little
		base := []string{"9223372036854775807", "-9223372036854775808", "18446744073709551615", "0"}[rng.Intn(4)]
		b.WriteString(base)
		if rng.Intn(2) == 0 {
			d := []byte(b.String())
			d[len(d)-1] = byte('0' + rng.Intn(10))
			b.Reset()
			b.Write(d)
		}
	default: // anything from an alphabet that looks numeric
		pieces := []string{"0", "1", "7", "9", "+", "-", " ", "\t", "_", ".", "e", "x", "\x00", "١", "１", "00", "--"}
		for n := rng.Intn(8); n >= 0; n-- {
			b.WriteString(pieces[rng.Intn(len(pieces))])
		}
	}
	return b.String()
}

// TestParseRustI64MatchesStrconv: parseRustI64 accepts exactly what
// strconv.ParseInt(s, 10, 64) accepts, with the same value (spec section 2:
// Rust's i64::from_str and Go's ParseInt agree).
func TestParseRustI64MatchesStrconv(t *testing.T) {
	fixed := []string{
		"", "+", "-", "+-1", "-+1", "--1", "++1", "0", "-0", "+0", "007", "-007",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808",
		"-9223372036854775809", "+9223372036854775807", "18446744073709551615",
		"18446744073709551616", "99999999999999999999999", " 1", "1 ", "1_000",
		"0x10", "1e3", "1.0", "١", "１", "\x001", "1\x00",
	}
	rng := rand.New(rand.NewSource(1))
	accepted, rejected := 0, 0
	check := func(s string) {
		got, gotOK := parseRustI64([]byte(s))
		want, err := strconv.ParseInt(s, 10, 64)
		if gotOK != (err == nil) || gotOK && got != want {
			t.Errorf("parseRustI64(%q) = %d, %v; strconv.ParseInt: %d, %v", s, got, gotOK, want, err)
		}
		if gotOK {
			accepted++
		} else {
			rejected++
		}
	}
	for _, s := range fixed {
		check(s)
	}
	for i := 0; i < 200000; i++ {
		check(randomIntegerish(rng))
	}
	t.Logf("%d accepted, %d rejected", accepted, rejected)
	if accepted < 20000 || rejected < 20000 {
		t.Fatalf("only %d accepted and %d rejected: the generator checks too little", accepted, rejected)
	}
}

// TestParseRustU64: Rust's u64::from_str takes one optional '+' and
// digits; no '-', even "-0".
func TestParseRustU64(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	accepted, rejected := 0, 0
	for i := 0; i < 100000; i++ {
		s := randomIntegerish(rng)
		got, gotOK := parseRustU64([]byte(s))
		want, err := strconv.ParseUint(strings.TrimPrefix(s, "+"), 10, 64)
		if strings.HasPrefix(s, "++") || strings.HasPrefix(s, "+-") {
			err = strconv.ErrSyntax
		}
		if gotOK != (err == nil) || gotOK && got != want {
			t.Errorf("parseRustU64(%q) = %d, %v; want %d, %v", s, got, gotOK, want, err)
		}
		if gotOK {
			accepted++
		} else {
			rejected++
		}
	}
	if accepted < 10000 || rejected < 10000 {
		t.Fatalf("only %d accepted and %d rejected", accepted, rejected)
	}
	for s, want := range map[string]bool{"+5": true, "-0": false, "18446744073709551615": true, "18446744073709551616": false, "+": false} {
		if _, ok := parseRustU64([]byte(s)); ok != want {
			t.Errorf("parseRustU64(%q) ok = %v, want %v", s, ok, want)
		}
	}
}

// string2ll is Redis's util.c string2ll, transcribed literally as the
// reference for parseRedisInt.
func string2ll(s string) (int64, bool) {
	const longStrSize = 21
	slen := len(s)
	if slen == 0 || slen >= longStrSize {
		return 0, false
	}
	if slen == 1 && s[0] == '0' {
		return 0, true
	}
	p := 0
	negative := false
	if s[p] == '-' {
		negative = true
		p++
		if p == slen {
			return 0, false
		}
	}
	var v uint64
	if s[p] >= '1' && s[p] <= '9' {
		v = uint64(s[p] - '0')
		p++
	} else {
		return 0, false
	}
	for p < slen && s[p] >= '0' && s[p] <= '9' {
		if v > math.MaxUint64/10 {
			return 0, false
		}
		v *= 10
		if v > math.MaxUint64-uint64(s[p]-'0') {
			return 0, false
		}
		v += uint64(s[p] - '0')
		p++
	}
	if p < slen {
		return 0, false
	}
	if negative {
		if v > uint64(-(math.MinInt64+1))+1 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// TestParseRedisInt: parseRedisInt follows Redis's string2ll: no '+', no
// leading zeros, no "-0", no spaces, int64 range.
func TestParseRedisInt(t *testing.T) {
	for s, want := range map[string]bool{
		"0": true, "-0": false, "+1": false, "01": false, "-01": false, "1": true, "-1": true,
		"9223372036854775807": true, "9223372036854775808": false,
		"-9223372036854775808": true, "-9223372036854775809": false,
		"": false, "-": false, " 1": false, "1 ": false, "1.0": false,
	} {
		if _, ok := parseRedisInt([]byte(s)); ok != want {
			t.Errorf("parseRedisInt(%q) ok = %v, want %v", s, ok, want)
		}
	}
	rng := rand.New(rand.NewSource(3))
	accepted, rejected := 0, 0
	for i := 0; i < 200000; i++ {
		s := randomIntegerish(rng)
		got, gotOK := parseRedisInt([]byte(s))
		want, wantOK := string2ll(s)
		if gotOK != wantOK || got != want {
			t.Errorf("parseRedisInt(%q) = %d, %v; string2ll: %d, %v", s, got, gotOK, want, wantOK)
		}
		if gotOK {
			accepted++
		} else {
			rejected++
		}
	}
	t.Logf("%d accepted, %d rejected", accepted, rejected)
	if accepted < 20000 || rejected < 20000 {
		t.Fatalf("only %d accepted and %d rejected", accepted, rejected)
	}
}

// TestParseUintCursor: SCAN cursors as Redis's strtoul-based parser reads
// them (checked with Redis 7.0.15, see testdata/patterns.txt).
func TestParseUintCursor(t *testing.T) {
	for i, tc := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		0:  {"0", 0, true},
		1:  {"", 0, true},
		2:  {"007", 7, true},
		3:  {"+5", 5, true},
		4:  {"-0", 0, true},
		5:  {"-1", math.MaxUint64, true},
		6:  {"-18446744073709551615", 1, true},
		7:  {"18446744073709551615", math.MaxUint64, true},
		8:  {"18446744073709551616", 0, false},
		9:  {"-18446744073709551616", 0, false},
		10: {"0\x00junk", 0, true},
		11: {"\x00", 0, true},
		12: {" 0", 0, false},
		13: {"0 ", 0, false},
		14: {"+", 0, false},
		15: {"-", 0, false},
		16: {"+-1", 0, false},
		17: {"0x10", 0, false},
		18: {"1.0", 0, false},
	} {
		got, ok := parseUintCursor([]byte(tc.in))
		if ok != tc.ok || ok && got != tc.want {
			t.Errorf("%d: parseUintCursor(%q) = %d, %v; want %d, %v", i, tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

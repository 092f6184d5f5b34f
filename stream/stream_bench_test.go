package stream

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// BenchmarkAppendAudit is what an audit entry costs the stream (commands'
// CL.APPLY with audit: limited or all): AppendNamedSized of a 7-field entry (the
// audit entry's names and values; keys of 1024 in turn, numbers as the decision
// gives them), then, as the audit does, Trim (MAXLEN ~ 100000, LIMIT
// 10000) once the length passes 100000, and ResetDelta as the keyspace
// does after the journal has seen the change (no journal asks for a
// delta: the stream records none, as on a server that neither persists
// nor replicates).
func BenchmarkAppendAudit(b *testing.B) {
	const keys, maxLen = 1024, 100000
	names := NewNames("key", "policy", "decision", "remaining", "retry_after_ms", "quantity", "client")
	entries := make([][][]byte, keys)
	ints := make([][3]int64, keys) // remaining, retry_after_ms, quantity
	for i := range entries {
		decision, retry := "allowed", int64(-1)
		if i%10 == 9 {
			decision, retry = "limited", int64(1000+i)
		}
		ints[i] = [3]int64{int64(999999000 + i), retry, 1}
		entries[i] = [][]byte{ // the values of names
			[]byte("bench:key:" + strconv.Itoa(i)),
			[]byte("all"),
			[]byte(decision),
			strconv.AppendInt(nil, ints[i][0], 10),
			strconv.AppendInt(nil, ints[i][1], 10),
			strconv.AppendInt(nil, ints[i][2], 10),
			[]byte("127.0.0.1:53122"),
		}
	}
	s := New()
	s.ResetDelta()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		// The values' listpack bytes, counted as the audit counts them.
		e, n := entries[i%keys], &ints[i%keys]
		lp := LPSize(e[0]) + LPSize(e[1]) + LPSize(e[2]) + LPSize(e[6]) + LPIntSize(n[0]) + LPIntSize(n[1]) + LPIntSize(n[2])
		s.AppendNamedSized(ID{Ms: 1700000000000 + uint64(i/8), Seq: uint64(i % 8)}, names, e, lp)
		if s.Len() > maxLen {
			s.Trim(TrimArgs{MaxLen: maxLen, Approx: true, Limit: 100 * NodeMaxEntries})
		}
		s.ResetDelta()
	}
}

// TestLpStringToInt64 compares lpStringToInt64 (and lpStringSize's fast
// path) with its definition: a string is an integer when it is an int64's
// canonical decimal form. So LPSize of strconv's form of n is LPIntSize(n),
// as AppendNamedSized's callers count it.
func TestLpStringToInt64(t *testing.T) {
	cases := []string{"", "0", "-0", "00", "01", "-", "+1", " 1", "1 ", "7", "-7", "127", "128", "-4096",
		"999999999999999999", "-999999999999999999", "1000000000000000000", "-1000000000000000000",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
		"18446744073709551615", "18446744073709551616", "99999999999999999999", "123456789012345678901",
		"12a", "-12a", "1.5", "allowed", "127.0.0.1:6379"}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		b := make([]byte, 1+rng.IntN(21))
		for i := range b {
			b[i] = "0123456789-x"[rng.IntN(12)]
		}
		if rng.IntN(2) == 0 { // an integer of any magnitude, either sign
			n := rng.Int64() >> rng.IntN(64)
			if rng.IntN(2) == 0 {
				n = -n
			}
			b = strconv.AppendInt(b[:0], n, 10)
		}
		cases = append(cases, string(b))
	}
	for _, c := range cases {
		v, err := strconv.ParseInt(c, 10, 64)
		wantOK := err == nil && strconv.FormatInt(v, 10) == c
		got, ok := lpStringToInt64([]byte(c))
		if ok != wantOK || ok && got != v {
			t.Fatalf("lpStringToInt64(%q) = %d, %v; want %d, %v", c, got, ok, v, wantOK)
		}
		size := lpStringSize([]byte(c))
		if wantOK && size != lpIntSize(v) || !wantOK && size < len(c)+2 {
			t.Fatalf("lpStringSize(%q) = %d", c, size)
		}
	}
}

// TestSameNames: an entry whose names are the node's first entry's is
// stored without its names (flagSameFields), whatever the names' lengths;
// any other is stored whole.
func TestSameNames(t *testing.T) {
	long := func(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }
	master := [][]byte{[]byte("a"), []byte("1"), long('b', 200), []byte("2"), long('c', 127), []byte("3")}
	for _, c := range []struct {
		name   string
		fields [][]byte
		same   bool
	}{
		{"same", [][]byte{[]byte("a"), []byte("x"), long('b', 200), []byte("y"), long('c', 127), []byte("z")}, true},
		{"short differs", [][]byte{[]byte("z"), []byte("x"), long('b', 200), []byte("y"), long('c', 127), []byte("z")}, false},
		{"long differs", [][]byte{[]byte("a"), []byte("x"), append(long('b', 199), 'x'), []byte("y"), long('c', 127), []byte("z")}, false},
		{"long shorter", [][]byte{[]byte("a"), []byte("x"), long('b', 199), []byte("y"), long('c', 127), []byte("z")}, false},
		{"127 longer", [][]byte{[]byte("a"), []byte("x"), long('b', 200), []byte("y"), long('c', 128), []byte("z")}, false},
		{"fewer", [][]byte{[]byte("a"), []byte("x"), long('b', 200), []byte("y")}, false},
	} {
		s := New()
		s.Append(ID{Ms: 1}, master)
		s.Append(ID{Ms: 2}, c.fields)
		n := s.nodes[0]
		var it recIter
		it.init(n)
		it.next()
		it.next()
		if got := it.flags&flagSameFields != 0; got != c.same {
			t.Errorf("%s: same fields %v, want %v", c.name, got, c.same)
		}
		if got, ok := s.Get(ID{Ms: 2}); !ok || !slices.EqualFunc(got, c.fields, bytes.Equal) {
			t.Errorf("%s: Get = %q, want %q", c.name, got, c.fields)
		}
	}
}

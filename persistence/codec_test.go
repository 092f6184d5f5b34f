package persistence

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
)

var allKinds = []keyspace.Kind{
	keyspace.KindString, keyspace.KindGCRA, keyspace.KindFixed,
	keyspace.KindSliding, keyspace.KindLog, keyspace.KindLeases,
}

func randInt64(rng *rand.Rand) int64 {
	switch rng.IntN(4) {
	case 0:
		return []int64{0, 1, -1, math.MaxInt64, math.MinInt64}[rng.IntN(5)]
	case 1:
		return rng.Int64N(1 << 20)
	}
	return int64(rng.Uint64())
}

// randValue returns a random valid Value of kind k.
func randValue(rng *rand.Rand, k keyspace.Kind) keyspace.Value {
	v := keyspace.Value{Kind: k, Exp: randInt64(rng)}
	switch k {
	case keyspace.KindString:
		b := make([]byte, rng.IntN(3)*rng.IntN(300))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		v.Obj = b
	case keyspace.KindGCRA:
		v.N = rng.Uint64()
	case keyspace.KindFixed, keyspace.KindSliding:
		v.N, v.M = rng.Uint64(), randInt64(rng)
	case keyspace.KindLog:
		l := &limiter.Log{}
		t := rng.Int64N(1 << 62)
		for range rng.IntN(3) * rng.IntN(200) {
			t += 1 + rng.Int64N(1e9)
			n := 1 + rng.Int64N(1<<20)
			l.Entries = append(l.Entries, limiter.LogEntry{T: t, N: n})
			l.Units += n
		}
		v.Obj = l
	case keyspace.KindLeases:
		ls := &limiter.Leases{}
		n, maxTok := rng.IntN(3)*rng.IntN(50), 40
		if rng.IntN(3) == 0 { // one lease, its token around the packing limit
			n, maxTok = 1, 2*limiter.PackedTokenLen
		}
		for range n {
			tok := make([]byte, rng.IntN(maxTok))
			for i := range tok {
				tok[i] = byte(rng.Uint32())
			}
			ls.Put(string(tok), randInt64(rng))
		}
		v.Obj = ls
		// The commands store one lease with a short token packed.
		if tok, exp, ok := ls.Pack(); ok && rng.IntN(2) == 0 {
			v.N, v.M, v.Obj = tok, exp, nil
		}
	}
	if rng.IntN(3) == 0 {
		switch k {
		case keyspace.KindGCRA, keyspace.KindFixed, keyspace.KindSliding:
			v.Obj = randReservations(rng)
		case keyspace.KindLog:
			v.Obj.(*limiter.Log).Res = randReservations(rng)
		}
	}
	return v
}

// randReservations returns 1 to 100 random valid reservations.
func randReservations(rng *rand.Rand) *limiter.Reservations {
	res := &limiter.Reservations{StateExp: rng.Int64N(1 << 50)}
	id := rng.Int64N(1 << 52)
	for range 1 + rng.IntN(3)*rng.IntN(50) {
		id += 1 + rng.Int64N(1e6)
		res.List = append(res.List, limiter.Reservation{ID: id, At: randInt64(rng), Deadline: randInt64(rng),
			Reserved: rng.Int64N(1 << 40), Actual: rng.Int64N(1<<40) - 1, Unit: 1 + rng.Int64N(1<<40)})
	}
	res.LastID = id + rng.Int64N(3)
	return res
}

// reservationsOf returns the reservations v holds, or nil.
func reservationsOf(v keyspace.Value) *limiter.Reservations {
	switch o := v.Obj.(type) {
	case *limiter.Reservations:
		return o
	case *limiter.Log:
		return o.Res
	}
	return nil
}

// leases returns the leases of a concurrency value, packed or not.
func leases(v keyspace.Value) map[string]int64 {
	ls, _ := v.Obj.(*limiter.Leases)
	if v.Obj == nil {
		ls = new(limiter.Leases)
		ls.Unpack(v.N, v.M)
	}
	m := map[string]int64{}
	if ls != nil {
		ls.Each(func(tok string, exp int64) { m[tok] = exp })
	}
	return m
}

// equalValues compares two Values, Leases by their contents.
func equalValues(a, b keyspace.Value) bool {
	if a.Kind == keyspace.KindLeases && b.Kind == a.Kind && a.Exp == b.Exp {
		return reflect.DeepEqual(leases(a), leases(b)) // packed or not
	}
	if a.Kind != b.Kind || a.N != b.N || a.M != b.M || a.Exp != b.Exp {
		return false
	}
	if x, y := reservationsOf(a), reservationsOf(b); (x != nil || y != nil) && !reflect.DeepEqual(x, y) {
		return false
	}
	switch a.Kind {
	case keyspace.KindString:
		x, _ := a.Obj.([]byte)
		y, _ := b.Obj.([]byte)
		return bytes.Equal(x, y)
	case keyspace.KindLog:
		x, y := a.Obj.(*limiter.Log), b.Obj.(*limiter.Log)
		if len(x.Entries) == 0 && len(y.Entries) == 0 {
			return x.Units == y.Units
		}
		return reflect.DeepEqual(x.Entries, y.Entries) && x.Units == y.Units
	case keyspace.KindGCRA, keyspace.KindFixed, keyspace.KindSliding:
		return true // the object, if any, holds the reservations compared above
	}
	return a.Obj == nil && b.Obj == nil
}

func TestValueRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	counts := map[keyspace.Kind]int{}
	const values = 6000
	bytesOut, packedCount, reserved := 0, 0, 0
	for i := range values {
		k := allKinds[i%len(allKinds)]
		v := randValue(rng, k)
		prefix := []byte("prefix")
		enc := EncodeValue(prefix, v)
		if !bytes.Equal(enc[:len(prefix)], []byte("prefix")) {
			t.Fatalf("EncodeValue did not append")
		}
		enc = enc[len(prefix):]
		bytesOut += len(enc)
		format := byte(ValueFormat)
		if reservationsOf(v) != nil {
			format = ReservedFormat // version 2 only for a value holding reservations
			reserved++
		}
		if enc[0] != format || keyspace.Kind(enc[1]) != k {
			t.Fatalf("%s: encoding starts %x", k, enc[:2])
		}
		got, err := DecodeValue(enc)
		if err != nil {
			t.Fatalf("%s: DecodeValue(EncodeValue(%+v)): %v", k, v, err)
		}
		if !equalValues(v, got) {
			t.Fatalf("%s: round trip:\n got  %+v\n want %+v", k, got, v)
		}
		if again := EncodeValue(nil, got); !bytes.Equal(again, enc) {
			t.Fatalf("%s: re-encoding differs:\n %x\n %x", k, again, enc)
		}
		if k == keyspace.KindLeases {
			// Decoding packs what packs, as the commands store it.
			packable := len(leases(got)) == 1
			for tok := range leases(got) {
				packable = packable && len(tok) <= limiter.PackedTokenLen
			}
			if packed := got.Obj == nil; packed != packable {
				t.Fatalf("leases %v decoded packed=%v, want %v", leases(got), packed, packable)
			}
			if packable {
				packedCount++
			}
		}
		counts[k]++
	}
	t.Logf("round-tripped %d random values (%v; %d concurrency values packed, %d values with reservations), %d bytes encoded",
		values, counts, packedCount, reserved, bytesOut)
	if packedCount == 0 || reserved == 0 {
		t.Fatalf("no packed concurrency value, or no value with reservations, was checked")
	}
}

func TestDecodeDoesNotAlias(t *testing.T) {
	enc := EncodeValue(nil, keyspace.Value{Kind: keyspace.KindString, Obj: []byte("hello")})
	v, err := DecodeValue(enc)
	if err != nil {
		t.Fatal(err)
	}
	clear(enc)
	if s := string(v.Obj.([]byte)); s != "hello" {
		t.Fatalf("decoded string changed with its input: %q", s)
	}
}

func TestEncodeEmptyObjects(t *testing.T) {
	for _, v := range []keyspace.Value{
		{Kind: keyspace.KindString},
		{Kind: keyspace.KindString, Obj: []byte(nil)},
		{Kind: keyspace.KindLog},
		{Kind: keyspace.KindLog, Obj: (*limiter.Log)(nil)},
		{Kind: keyspace.KindLeases},
		{Kind: keyspace.KindLeases, Obj: (*limiter.Leases)(nil)},
	} {
		got, err := DecodeValue(EncodeValue(nil, v))
		if err != nil {
			t.Fatalf("%s with %#v: %v", v.Kind, v.Obj, err)
		}
		switch o := got.Obj.(type) {
		case []byte:
			if o == nil || len(o) != 0 {
				t.Errorf("string: Obj %#v, want empty []byte", o)
			}
		case *limiter.Log:
			if len(o.Entries) != 0 || o.Units != 0 {
				t.Errorf("log: %+v", o)
			}
		case *limiter.Leases:
			if len(leases(got)) != 0 {
				t.Errorf("leases: %v", leases(got))
			}
		default:
			t.Errorf("%s: Obj %T", v.Kind, got.Obj)
		}
	}
}

func TestEncodePanicsOnBugs(t *testing.T) {
	for _, v := range []keyspace.Value{
		{Kind: 0},
		{Kind: keyspace.KindLeases + 1},
		{Kind: keyspace.KindString, Obj: "a string, not []byte"},
		{Kind: keyspace.KindLog, Obj: limiter.Log{}},
		{Kind: keyspace.KindLeases, Obj: &limiter.Log{}},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("EncodeValue(%+v) did not panic", v)
				}
			}()
			EncodeValue(nil, v)
		}()
	}
}

// TestValueGolden pins format version 1: a change to these bytes is a new
// format version, and needs DecodeValue to keep reading version 1.
func TestValueGolden(t *testing.T) {
	ls := &limiter.Leases{}
	ls.Put("b", 7)
	ls.Put("a", -1)
	for _, tc := range []struct {
		v    keyspace.Value
		want string
	}{
		{keyspace.Value{Kind: keyspace.KindString, Exp: 1700000000000, Obj: []byte("hi")},
			"01" + "01" + "0068e5cf8b010000" + "0000000000000000" + "0000000000000000" + "6869"},
		{keyspace.Value{Kind: keyspace.KindGCRA, N: 0x0102030405060708},
			"01" + "02" + "0000000000000000" + "0807060504030201" + "0000000000000000"},
		{keyspace.Value{Kind: keyspace.KindFixed, N: 3, M: -2, Exp: 5},
			"01" + "03" + "0500000000000000" + "0300000000000000" + "feffffffffffffff"},
		{keyspace.Value{Kind: keyspace.KindSliding, N: 1<<32 | 2, M: 9},
			"01" + "04" + "0000000000000000" + "0200000001000000" + "0900000000000000"},
		{keyspace.Value{Kind: keyspace.KindLog, Obj: &limiter.Log{Entries: []limiter.LogEntry{{T: 10, N: 2}, {T: 300, N: 1}}, Units: 3}},
			"01" + "05" + "0000000000000000" + "0000000000000000" + "0000000000000000" +
				"02" + "0a00000000000000" + "0200000000000000" + "2c01000000000000" + "0100000000000000" + "0300000000000000"},
		{keyspace.Value{Kind: keyspace.KindLeases, Obj: ls},
			"01" + "06" + "0000000000000000" + "0000000000000000" + "0000000000000000" +
				"02" + "01" + "61" + "ffffffffffffffff" + "01" + "62" + "0700000000000000"},
		// One lease packed as the commands store it ("a" until 9 ns): written
		// as its lease list, N and M 0.
		{keyspace.Value{Kind: keyspace.KindLeases, N: 'a'<<8 | 2, M: 9},
			"01" + "06" + "0000000000000000" + "0000000000000000" + "0000000000000000" +
				"01" + "01" + "61" + "0900000000000000"},
		// Version 2: a fixed window holding one reservation (id 5, at 6,
		// deadline 7, 3 reserved, open, unit 10; last id 5; state until 8).
		{keyspace.Value{Kind: keyspace.KindFixed, N: 3, M: -2, Exp: 5, Obj: &limiter.Reservations{
			List: []limiter.Reservation{{ID: 5, At: 6, Deadline: 7, Reserved: 3, Actual: -1, Unit: 10}}, LastID: 5, StateExp: 8}},
			"02" + "03" + "0500000000000000" + "0300000000000000" + "feffffffffffffff" +
				"01" + "0500000000000000" + "0600000000000000" + "0700000000000000" + "0300000000000000" +
				"ffffffffffffffff" + "0a00000000000000" + "0500000000000000" + "0800000000000000"},
		// An empty reservation list is written as version 1.
		{keyspace.Value{Kind: keyspace.KindGCRA, N: 0x0102030405060708, Obj: &limiter.Reservations{LastID: 9}},
			"01" + "02" + "0000000000000000" + "0807060504030201" + "0000000000000000"},
	} {
		got := hex.EncodeToString(EncodeValue(nil, tc.v))
		if got != tc.want {
			t.Errorf("%s:\n got  %s\n want %s", tc.v.Kind, got, tc.want)
		}
		if got[:2] == "01" && (tc.v.Kind == keyspace.KindGCRA || tc.v.Kind == keyspace.KindFixed || tc.v.Kind == keyspace.KindSliding) {
			if len(got) != 2*headerSize {
				t.Errorf("%s: %d bytes, want %d", tc.v.Kind, len(got)/2, headerSize)
			}
		}
	}
}

func mustCorrupt(t *testing.T, what string, b []byte) {
	t.Helper()
	v, err := DecodeValue(b)
	if err == nil {
		t.Fatalf("%s: DecodeValue(%x) = %+v, want an error", what, b, v)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("%s: DecodeValue(%x): %v, want ErrCorrupt", what, b, err)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	cases := 0
	for _, k := range allKinds {
		for range 20 {
			v := randValue(rng, k)
			enc := EncodeValue(nil, v)
			// Every truncation. A string's object runs to the end, so only
			// cuts into its header are detectable.
			cuts := len(enc)
			if k == keyspace.KindString {
				cuts = headerSize
			}
			for n := range cuts {
				mustCorrupt(t, fmt.Sprintf("%s cut to %d of %d bytes", k, n, len(enc)), enc[:n])
				cases++
			}
			if k != keyspace.KindString {
				mustCorrupt(t, fmt.Sprintf("%s with a trailing byte", k), append(bytes.Clone(enc), 0))
				cases++
			}
			for _, kind := range []byte{0, byte(keyspace.KindLeases) + 1, 0x80, 0xff} {
				b := bytes.Clone(enc)
				b[1] = kind
				mustCorrupt(t, fmt.Sprintf("%s with kind byte %d", k, kind), b)
				cases++
			}
			for _, version := range []byte{0, ReservedFormat + 1, 0xff} {
				b := bytes.Clone(enc)
				b[0] = version
				_, err := DecodeValue(b)
				if !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrFormat) {
					t.Fatalf("%s with version %d: %v, want ErrCorrupt and ErrFormat", k, version, err)
				}
				cases++
			}
		}
	}

	hdr := func(k keyspace.Kind) []byte {
		return EncodeValue(nil, keyspace.Value{Kind: k})[:headerSize]
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	le := func(x int64) []byte {
		b := make([]byte, 8)
		for i := range b {
			b[i] = byte(uint64(x) >> (8 * i))
		}
		return b
	}
	v2 := func(k keyspace.Kind) []byte { return cat([]byte{ReservedFormat}, hdr(k)[1:]) }
	rec := func(id, reserved, actual, unit int64) []byte {
		return cat(le(id), le(7), le(9), le(reserved), le(actual), le(unit))
	}
	tail := func(lastID, stateExp int64) []byte { return cat(le(lastID), le(stateExp)) }
	for name, b := range map[string][]byte{
		"log units disagree":       cat(hdr(keyspace.KindLog), []byte{1}, le(5), le(2), le(3)),
		"log units overflow":       cat(hdr(keyspace.KindLog), []byte{2}, le(5), le(math.MaxInt64), le(6), le(1), le(math.MinInt64)),
		"log count too large":      cat(hdr(keyspace.KindLog), []byte{3}, le(5), le(2), le(2)),
		"log huge count":           cat(hdr(keyspace.KindLog), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, le(0)),
		"log count overflows":      cat(hdr(keyspace.KindLog), bytes.Repeat([]byte{0xff}, 10), []byte{1}),
		"log non-minimal count":    cat(hdr(keyspace.KindLog), []byte{0x80, 0x00}, le(0)),
		"leases out of order":      cat(hdr(keyspace.KindLeases), []byte{2, 1, 'b'}, le(1), []byte{1, 'a'}, le(1)),
		"leases repeated":          cat(hdr(keyspace.KindLeases), []byte{2, 1, 'a'}, le(1), []byte{1, 'a'}, le(2)),
		"lease length too long":    cat(hdr(keyspace.KindLeases), []byte{1, 20, 'a'}, le(1)),
		"lease non-minimal length": cat(hdr(keyspace.KindLeases), []byte{1, 0x81, 0x00, 'a'}, le(1)),
		"leases count too large":   cat(hdr(keyspace.KindLeases), []byte{2, 0}, le(1)),
		"leases count, no bytes":   cat(hdr(keyspace.KindLeases)),
		"leases with N set":        cat(EncodeValue(nil, keyspace.Value{Kind: keyspace.KindLeases})[:10], le(2), le(0), []byte{1, 1, 'a'}, le(1)),
		"leases with M set":        cat(EncodeValue(nil, keyspace.Value{Kind: keyspace.KindLeases})[:10], le(0), le(5), []byte{1, 1, 'a'}, le(1)),
		"gcra with an object":      cat(hdr(keyspace.KindGCRA), []byte{0}),
		// Version 2's reservations (rec: one record; tail: LastID, StateExp).
		"v2 string":                  cat(v2(keyspace.KindString), []byte{1}, rec(5, 1, 0, 1), tail(5, 0)),
		"v2 leases":                  cat(v2(keyspace.KindLeases), []byte{0}, []byte{1}, rec(5, 1, 0, 1), tail(5, 0)),
		"v2 no reservation":          cat(v2(keyspace.KindGCRA), []byte{0}, tail(5, 0)),
		"v2 count past the bytes":    cat(v2(keyspace.KindGCRA), []byte{2}, rec(5, 1, 0, 1), tail(5, 0)),
		"v2 ids out of order":        cat(v2(keyspace.KindFixed), []byte{2}, rec(5, 1, 0, 1), rec(5, 1, 0, 1), tail(5, 0)),
		"v2 negative reserved":       cat(v2(keyspace.KindFixed), []byte{1}, rec(5, -1, 0, 1), tail(5, 0)),
		"v2 actual below -1":         cat(v2(keyspace.KindFixed), []byte{1}, rec(5, 1, -2, 1), tail(5, 0)),
		"v2 zero unit":               cat(v2(keyspace.KindSliding), []byte{1}, rec(5, 1, 0, 0), tail(5, 0)),
		"v2 last id below the last":  cat(v2(keyspace.KindSliding), []byte{1}, rec(5, 1, 0, 1), tail(4, 0)),
		"v2 negative state expiry":   cat(v2(keyspace.KindSliding), []byte{1}, rec(5, 1, 0, 1), tail(5, -1)),
		"v2 truncated tail":          cat(v2(keyspace.KindGCRA), []byte{1}, rec(5, 1, 0, 1), le(5)),
		"v2 trailing byte":           cat(v2(keyspace.KindGCRA), []byte{1}, rec(5, 1, 0, 1), tail(5, 0), []byte{0}),
		"v2 log without its entries": cat(v2(keyspace.KindLog), []byte{1}, rec(5, 1, 0, 1), tail(5, 0)),
		"empty":                      nil,
		"version only":               {ValueFormat},
		"header one byte too short":  hdr(keyspace.KindFixed)[:headerSize-1],
	} {
		mustCorrupt(t, name, b)
		cases++
	}
	t.Logf("%d corrupt inputs rejected", cases)
}

func FuzzDecodeValue(f *testing.F) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, k := range allKinds {
		for range 3 {
			f.Add(EncodeValue(nil, randValue(rng, k)))
		}
		f.Add(EncodeValue(nil, keyspace.Value{Kind: k}))
	}
	f.Add([]byte{})
	f.Add([]byte{ValueFormat, byte(keyspace.KindLeases)})
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := DecodeValue(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeValue(%x): %v does not wrap ErrCorrupt", b, err)
			}
			return
		}
		if again := EncodeValue(nil, v); !bytes.Equal(again, b) {
			t.Fatalf("DecodeValue(%x) = %+v, which encodes as %x", b, v, again)
		}
	})
}

// BenchmarkEncodeValue is the encoding of one value as the Writer queues
// it and as the replication backlog frames it: a GCRA value (what
// CL.THROTTLE stores) and a short string.
func BenchmarkEncodeValue(b *testing.B) {
	for _, tc := range []struct {
		name string
		v    keyspace.Value
	}{
		{"gcra", keyspace.Value{Kind: keyspace.KindGCRA, N: 1 << 40, Exp: 1 << 40}},
		{"string16", keyspace.Value{Kind: keyspace.KindString, Obj: []byte("0123456789abcdef")}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, 0, 64)
			b.ReportAllocs()
			for range b.N {
				buf = EncodeValue(buf[:0], tc.v)
			}
		})
	}
}

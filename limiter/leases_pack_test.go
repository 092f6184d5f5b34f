package limiter

import (
	"maps"
	"math/rand/v2"
	"testing"
)

// contents returns ls's leases as token -> end.
func contents(ls *Leases) map[string]int64 {
	m := map[string]int64{}
	ls.Each(func(tok string, exp int64) { m[tok] = exp })
	return m
}

// Pack succeeds exactly for one lease with a token of up to PackedTokenLen
// bytes; Unpack gives the same lease back, into a Leases that held
// anything before; Clone copies without sharing memory.
func TestLeasesPackUnpackClone(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	var scratch Leases
	scratch.Apply(t0, s, []byte("a token longer than sixteen bytes"))
	scratch.Apply(t0, s, []byte("b"))
	const cases = 20000
	packed := 0
	for i := range cases {
		var ls Leases
		for range rng.IntN(4) {
			tok := make([]byte, rng.IntN(2*PackedTokenLen))
			for j := range tok {
				tok[j] = byte(rng.IntN(4)) // zero bytes included, repeats likely
			}
			ls.Put(string(tok), rng.Int64())
		}
		want := contents(&ls)
		packable := len(want) == 1
		for tok := range want {
			packable = packable && len(tok) <= PackedTokenLen
		}
		tok, exp, ok := ls.Pack()
		if ok != packable {
			t.Fatalf("case %d: Pack of %v: ok %v, want %v", i, want, ok, packable)
		}
		if ok {
			packed++
			if tok == 0 {
				t.Fatalf("case %d: Pack of %v gave token 0, which means no lease", i, want)
			}
			scratch.Unpack(tok, exp)
			if got := contents(&scratch); !maps.Equal(got, want) {
				t.Fatalf("case %d: Unpack(Pack(%v)) = %v", i, want, got)
			}
			if t2, e2, ok2 := scratch.Pack(); !ok2 || t2 != tok || e2 != exp {
				t.Fatalf("case %d: Pack(Unpack(x)) = %x %d %v, want %x %d", i, t2, e2, ok2, tok, exp)
			}
		}
		c := ls.Clone()
		if got := contents(c); !maps.Equal(got, want) {
			t.Fatalf("case %d: Clone of %v = %v", i, want, got)
		}
		c.Put("zz-only-in-the-clone", 1)
		if got := contents(&ls); !maps.Equal(got, want) {
			t.Fatalf("case %d: changing the clone changed the original: %v", i, got)
		}
	}
	scratch.Unpack(0, 123)
	if n := len(contents(&scratch)); n != 0 {
		t.Fatalf("Unpack(0, _) left %d leases", n)
	}
	t.Logf("%d random lease sets, %d packed", cases, packed)
	if packed == 0 {
		t.Fatal("no case packed")
	}
}

// Unpacking into the reused scratch Leases allocates nothing.
func TestLeasesUnpackAllocs(t *testing.T) {
	var one Leases
	one.Apply(t0, s, []byte("tok"))
	tok, exp, ok := one.Pack()
	if !ok {
		t.Fatal("one lease with a 3-byte token did not pack")
	}
	var scratch Leases
	if n := testing.AllocsPerRun(100, func() {
		scratch.Unpack(tok, exp)
		d := scratch.Acquire(t0+1, s, 2, []byte("tok"))
		scratch.Apply(t0+1, s, []byte("tok"))
		if _, _, ok := scratch.Pack(); !ok || d.Limited {
			t.Fatal("re-acquire did not stay packed")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per unpack, acquire, apply, pack", n)
	}
}

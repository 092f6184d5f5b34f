package commands

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/glob"
	"github.com/cellserver/cellserver/policy"
	"github.com/cellserver/cellserver/resp"
)

// TestApplyPinsOneSet: a reload that lands between the resolution of a
// CL.APPLY's keys (from set A: a hierarchy's member key) and its run does
// not change what the call applies: the keys, parameters and reply all
// come from A. The next call uses B.
func TestApplyPinsOneSet(t *testing.T) {
	def := func(limit, prefix string) *policy.Set {
		s, err := policy.Parse([]byte("policies:\n  - {name: m, algorithm: fixed, limit: " + limit +
			", period: 1h}\n  - {name: h, all: [{policy: m, key: \"" + prefix + ":${key}\"}]}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := def("10", "A"), def("20", "B")
	srv, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Policies: a})
	if err != nil {
		t.Fatal(err)
	}
	conn := new(resp.Conn)
	srv.Open(conn)
	defer srv.Close(conn)
	cl := conn.Context().(*client)
	x := &cl.x
	sp := srv.table["cl.apply"]

	// As dispatch does: resolve the keys, then run; the swap in between.
	x.args = [][]byte{[]byte("CL.APPLY"), []byte("k"), []byte("h")}
	x.polSet, x.haveNow = nil, false
	x.resolveKeys(sp, x.db())
	srv.pol.set.Store(b)
	srv.call(x, sp)
	x.keys = nil
	if have, want := string(conn.Out), "*5\r\n:0\r\n:10\r\n:9\r\n"; !strings.HasPrefix(have, want) {
		t.Fatalf("call resolved with A, run after the swap: %q, want A's reply %q...", have, want)
	}
	nowMS := x.clockMS()
	if srv.ks.DB(0).Shard([]byte("A:k")).Peek([]byte("A:k"), nowMS) == nil {
		t.Fatal("A:k not charged")
	}
	if srv.ks.DB(0).Shard([]byte("B:k")).Peek([]byte("B:k"), nowMS) != nil {
		t.Fatal("B:k charged by a call resolved with A")
	}
	conn.Out = conn.Out[:0]
	srv.ServeRESP(conn, [][]byte{[]byte("CL.APPLY"), []byte("k"), []byte("h")})
	if have, want := string(conn.Out), "*5\r\n:0\r\n:20\r\n:19\r\n"; !strings.HasPrefix(have, want) {
		t.Fatalf("next call: %q, want B's reply %q...", have, want)
	}
}

// TestParamsForAgreesWithGlob: the override lookup's fast path (the
// globs' first bytes, literal prefixes and suffixes reject a key before a
// glob runs; an all-literal glob is compared directly) picks for every key
// the override that trying each glob in turn picks (the first that
// matches, else none). Random policies of 1 to 4 overrides, globs over an
// alphabet of every metacharacter, keys both random and made from one of
// the globs (so that many match).
func TestParamsForAgreesWithGlob(t *testing.T) {
	const n = 40000
	rng := rand.New(rand.NewPCG(18, 2026))
	const patAlpha = "ab*?[]^-\\"
	const keyAlpha = "abc]-^\\*?["
	var key []byte
	matched, ran, byFirst := 0, 0, 0
	counting := func(pattern, key []byte) bool { ran++; return policyGlob(pattern, key) }
	for i := range n {
		pats := make([][]byte, 1+rng.IntN(4))
		src := "policies:\n  - name: p\n    algorithm: fixed\n    limit: 1000\n    period: 60\n    overrides:\n"
		for j := range pats {
			for range 1 + rng.IntN(8) {
				pats[j] = append(pats[j], patAlpha[rng.IntN(len(patAlpha))])
			}
			src += "      - {match: '" + string(pats[j]) + "', limit: " + strconv.Itoa(j+1) + "}\n"
		}
		set, err := policy.Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		p := set.Lookup([]byte("p"))
		key = key[:0]
		if i%2 == 0 {
			for range rng.IntN(9) {
				key = append(key, keyAlpha[rng.IntN(len(keyAlpha))])
			}
		} else { // a glob with each metacharacter replaced by a random run
			pat := pats[rng.IntN(len(pats))]
			for j := 0; j < len(pat); j++ {
				switch c := pat[j]; c {
				case '*', '?', '[', ']', '^', '-':
					for range rng.IntN(3) {
						key = append(key, keyAlpha[rng.IntN(len(keyAlpha))])
					}
				case '\\':
					if j+1 < len(pat) {
						j++
					}
					key = append(key, pat[j])
				default:
					key = append(key, c)
				}
			}
		}
		want := p.Params
		for j := range pats {
			if glob.Match(pats[j], key, false) {
				want = p.Overrides[j].Params
				matched++
				break
			}
		}
		before := ran
		if have := p.ParamsFor(key, counting); have != want {
			t.Fatalf("globs %q, key %q: ParamsFor = %+v, trying each glob gives %+v", pats, key, have, want)
		}
		if ran == before && want == p.Params {
			byFirst++
		}
	}
	t.Logf("%d random policies and keys: %d matched an override, %d none; the fast path agreed on all, ran %d globs, decided %d misses without one",
		n, matched, n-matched, ran, byFirst)
	if matched < n/20 || matched > n-n/20 || byFirst < n/20 {
		t.Fatalf("%d of %d matched, %d decided without a glob: the cases do not exercise every outcome", matched, n, byFirst)
	}
}

// BenchmarkParamsForMiss: the override lookup of BenchmarkApply's
// override case alone (10 globs "tenant:N:*", none matching the key),
// through the fast path (ParamsFor: the key's first byte starts no glob;
// or it does and each literal prefix refuses the key) and through the
// glob alone (plain).
func BenchmarkParamsForMiss(b *testing.B) {
	src := "policies:\n  - name: ov\n    algorithm: gcra\n    count: 30\n    period: 60\n    overrides:\n"
	for i := range 10 {
		src += "      - {match: \"tenant:" + strconv.Itoa(i) + ":*\", count: 1}\n"
	}
	set, err := policy.Parse([]byte(src))
	if err != nil {
		b.Fatal(err)
	}
	p := set.Lookup([]byte("ov"))
	key := []byte("bench:key:17")
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if p.ParamsFor(key, policyGlob) != p.Params {
				b.Fatal("an override matched")
			}
		}
	})
	b.Run("fast-same-first-byte", func(b *testing.B) { // each prefix refuses the key
		b.ReportAllocs()
		key := []byte("tenant:x:17")
		for range b.N {
			if p.ParamsFor(key, policyGlob) != p.Params {
				b.Fatal("an override matched")
			}
		}
	})
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			for i := range p.Overrides {
				if policyGlob(p.Overrides[i].Match, key) {
					b.Fatal("an override matched")
				}
			}
		}
	})
}

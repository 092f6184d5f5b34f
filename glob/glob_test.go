package glob

import (
	"context"
	"math/rand"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// globCases are Redis 7.0's stringmatchlen answers. Those with nocase false
// are checked against a real Redis by TestGlobMatchRedis (KEYS).
var globCases = []struct {
	pattern, str string
	nocase       bool
	want         bool
}{
	{"*", "anything", false, true},
	{"*", "", false, false}, // KEYS * and SCAN MATCH * take "" by a shortcut
	{"**", "a", false, true},
	{"", "", false, true},
	{"", "a", false, false},
	{"a", "a", false, true},
	{"a", "A", false, false},
	{"a", "A", true, true},
	{"a", "ab", false, false},
	{"ab", "a", false, false},
	{"a*", "a", false, true},
	{"a*", "abc", false, true},
	{"*c", "abc", false, true},
	{"a*c", "ac", false, true},
	{"a*c", "abxc", false, true},
	{"a*c", "abxcd", false, false},
	{"*a*b*c*", "xaybzc", false, true},
	{"*a*b*c*", "xaybz", false, false},
	{"h?llo", "hello", false, true},
	{"h?llo", "hllo", false, false},
	{"?", "", false, false},
	{"??", "é", false, true}, // bytes, not runes
	{"h[ae]llo", "hallo", false, true},
	{"h[ae]llo", "hillo", false, false},
	{"h[^e]llo", "hallo", false, true},
	{"h[^e]llo", "hello", false, false},
	{"h[a-b]llo", "hbllo", false, true},
	{"h[a-b]llo", "hcllo", false, false},
	{"[c-a]", "b", false, true}, // reversed ranges are swapped
	{"[A-C]", "b", false, false},
	{"[A-C]", "b", true, true},
	{"[a-c]", "B", true, true},
	{"[^a-c]", "d", false, true},
	{"[^a-c]", "b", false, false},
	{"[abc]", "c", false, true},
	{"[aBc]", "b", true, true},
	{"[a-]", "-", false, false}, // "a-]" is the range ']'..'a', and the class is unterminated
	{"[a-]", "a", false, true},
	{"[a-]", "_", false, true},
	{"[a-]", "]", false, true},
	{"[-]", "-", false, true},
	{"[]]", "]", false, false}, // "[]" is an empty class, then a literal ']'
	{"[]]", "x]", false, false},
	{"[\\]]", "]", false, true},
	{"[\\\\]", "\\", false, true},
	{"[\\-]", "-", false, true},
	{"[\\a-c]", "b", false, false}, // the escape ends the range: members 'a', '-', 'c'
	{"[\\a-c]", "-", false, true},
	{"[", "a", false, false}, // an unterminated class ends at the pattern's end
	{"[a", "a", false, true},
	{"[^", "a", false, true},
	{"[ab", "b", false, true},
	{"a[", "a", false, false},
	{"a[b", "ab", false, true},
	{"\\*", "*", false, true},
	{"\\*", "a", false, false},
	{"a\\*", "a*", false, true},
	{"\\?", "?", false, true},
	{"\\[", "[", false, true},
	{"\\a", "a", false, true},
	{"\\", "\\", false, true}, // a trailing backslash is itself
	{"*\\", "a\\", false, true},
	{"a\\", "a", false, false},
	// Bytes 0x80-0xff are signed C chars in ranges (x86-64 Redis).
	{"[\x80-\xff]", "\xc3", false, true},
	{"[^\x80-\xff]", "b", false, true},
	{"[a-\xff]", "b", false, false}, // the range -1..97
	{"[a-\xff]", "A", false, true},
	{"[a-\xff]", "\xc3", false, false},
	{"[\xff-a]", "*", false, true},
	{"[\xc0-\xff]", "\xc3", false, true},
	{"[\x01-\xff]", "a", false, false}, // 1..-1 swaps to -1..1
	{"\xc3?", "\xc3\xa9", false, true},
}

func TestGlobMatch(t *testing.T) {
	for i, tc := range globCases {
		if got := Match([]byte(tc.pattern), []byte(tc.str), tc.nocase); got != tc.want {
			t.Errorf("%d: Match(%q, %q, nocase %v) = %v, want %v", i, tc.pattern, tc.str, tc.nocase, got, tc.want)
		}
	}
}

// TestGlobMatchNesting: Redis stops recursing after 1000 nested '*' and
// reports no match; 999 still match (checked with Redis 7.0.15).
func TestGlobMatchNesting(t *testing.T) {
	for _, tc := range []struct {
		stars int
		want  bool
	}{{999, true}, {1000, true}, {1001, false}} {
		pat := strings.Repeat("*a", tc.stars)
		str := strings.Repeat("a", tc.stars)
		if got := Match([]byte(pat), []byte(str), false); got != tc.want {
			t.Errorf("%d nested stars: %v, want %v", tc.stars, got, tc.want)
		}
	}
}

// TestGlobMatchNoBacktrackingBlowup: without Redis's skipLongerMatches
// (CVE-2022-36021), a pattern of many '*' that cannot match makes the
// matcher try exponentially many splits, holding shard locks meanwhile.
func TestGlobMatchNoBacktrackingBlowup(t *testing.T) {
	for _, tc := range []struct{ pattern, str string }{
		{strings.Repeat("*a", 20) + "*b", strings.Repeat("a", 200)},
		{strings.Repeat("a*", 30) + "b", strings.Repeat("a", 300)},
		{strings.Repeat("*a", 1001), strings.Repeat("a", 2000)},
	} {
		done := make(chan bool, 1)
		go func() { done <- Match([]byte(tc.pattern), []byte(tc.str), false) }()
		select {
		case got := <-done:
			if got {
				t.Errorf("Match(%.20q..., %.10q...) = true", tc.pattern, tc.str)
			}
		case <-time.After(10 * time.Second): // linear work takes microseconds
			t.Fatalf("Match(%.20q..., %.10q...) did not finish: exponential backtracking", tc.pattern, tc.str)
		}
	}
}

// TestGlobMatchRedis compares Match with a real Redis 7.0 (KEYS in
// database 9 of CELLSERVER_REFERENCE=host:port): the cases above, then
// random patterns over a small alphabet against a set of random keys.
func TestGlobMatchRedis(t *testing.T) {
	addr := os.Getenv("CELLSERVER_REFERENCE")
	if addr == "" {
		t.Skip("set CELLSERVER_REFERENCE=host:port of a Redis 7.0 to compare with it")
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: 9, Protocol: 2})
	defer rdb.Close()
	keysMatching := func(pattern string, keys []string) map[string]bool {
		t.Helper()
		got, err := rdb.Keys(ctx, pattern).Result()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, k := range got {
			m[k] = true
		}
		return m
	}
	for i, tc := range globCases {
		if tc.nocase || tc.str == "" {
			continue
		}
		rdb.FlushDB(ctx)
		rdb.Set(ctx, tc.str, 1, 0)
		if got := keysMatching(tc.pattern, nil)[tc.str]; got != tc.want {
			t.Errorf("case %d: Redis KEYS %q matches %q: %v, table says %v", i, tc.pattern, tc.str, got, tc.want)
		}
	}

	rng := rand.New(rand.NewSource(1))
	alphabet := []string{"a", "b", "A", "*", "?", "[", "]", "^", "-", "\\", "\xc3", "\xff", "\x80"}
	randString := func(max int) string {
		var b strings.Builder
		for n := rng.Intn(max + 1); n > 0; n-- {
			b.WriteString(alphabet[rng.Intn(len(alphabet))])
		}
		return b.String()
	}
	rdb.FlushDB(ctx)
	var keys []string
	for len(keys) < 400 {
		k := randString(5)
		if k == "" || slices.Contains(keys, k) {
			continue
		}
		keys = append(keys, k)
		rdb.Set(ctx, k, 1, 0)
	}
	compared, matched := 0, 0
	for i := 0; i < 2000; i++ {
		pat := randString(7)
		if pat == "*" {
			continue
		}
		redisSays := keysMatching(pat, keys)
		for _, k := range keys {
			got := Match([]byte(pat), []byte(k), false)
			if got != redisSays[k] {
				t.Errorf("pattern %q key %q: Match %v, Redis %v", pat, k, got, redisSays[k])
			}
			compared++
			if got {
				matched++
			}
		}
	}
	rdb.FlushDB(ctx)
	t.Logf("compared %d pattern/key pairs with Redis, %d matches", compared, matched)
	if matched < 1000 || compared-matched < 1000 {
		t.Fatalf("too few matches (%d) or non-matches (%d) to mean anything", matched, compared-matched)
	}
}

// TestSimpleFastPath: Match's one-pass answer for a literal or a
// "literal*" pattern is what the general matcher answers, for random
// patterns (over bytes that are and are not glob syntax, so that the
// shortcut is also refused where it must be) against random strings, the
// empty one included.
func TestSimpleFastPath(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	alphabet := []byte("ab:*?[]\\^-\xc3")
	randBytes := func(max int) []byte {
		b := make([]byte, rng.Intn(max+1))
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		return b
	}
	shortcut := 0
	for range 300000 {
		pat := randBytes(4)
		if rng.Intn(3) > 0 {
			pat = append(pat, []byte("**")[:1+rng.Intn(2)]...)
		}
		str := randBytes(6)
		if rng.Intn(2) == 0 { // often a string that starts with the literal
			lit, _, _ := strings.Cut(string(pat), "*")
			str = append([]byte(lit), str[:rng.Intn(len(str)+1)]...)
		}
		if _, ok := matchSimple(pat, str); ok {
			shortcut++
		}
		skipLonger := false
		want := matchDepth(pat, str, false, &skipLonger, 0)
		if got := Match(pat, str, false); got != want {
			t.Fatalf("Match(%q, %q) = %v, the general matcher says %v", pat, str, got, want)
		}
	}
	if shortcut < 30000 {
		t.Fatalf("only %d patterns took the shortcut", shortcut)
	}
}

func BenchmarkMatchPrefix(b *testing.B) {
	p, k := []byte("tenant:*"), []byte("tenant:0001")
	for b.Loop() {
		if !Match(p, k, false) {
			b.Fatal("no match")
		}
	}
}

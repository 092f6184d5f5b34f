package commands

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/armon/go-radix"
	"github.com/cellserver/cellserver/resp"
)

// bruteCollision is Redis 7.0's checkPrefixCollisionsOrReply as written
// there: for each new prefix in order, every existing one in byte order
// (its rax), then every later new one.
func bruteCollision(existing []string, ps []string) wireErr {
	existing = slices.Sorted(slices.Values(existing))
	for i, p := range ps {
		for _, q := range existing {
			if prefixesOverlap(p, q) {
				return errTrackingPrefixExisting(p, q)
			}
		}
		for _, q := range ps[i+1:] {
			if prefixesOverlap(p, q) {
				return errTrackingPrefixProvided(p, q)
			}
		}
	}
	return noErr
}

// randPrefix is a short string over a small alphabet, so that random
// prefixes overlap often; one in 50 is "".
func randPrefix(r *rand.Rand, maxLen int) string {
	if r.IntN(50) == 0 {
		return ""
	}
	b := make([]byte, 1+r.IntN(maxLen))
	for i := range b {
		b[i] = "abc"[r.IntN(3)]
	}
	return string(b)
}

// TestTrackingPrefixCollisionProperty: the tree-based overlap check
// (prefixCollision) answers exactly what Redis's pairwise check answers
// (the same error, the same pair, or none) on random prefix lists against
// random non-overlapping existing sets, as CLIENT TRACKING keeps them;
// 200,000 cases.
func TestTrackingPrefixCollisionProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const cases = 200000
	var existingErrs, providedErrs int
	for n := range cases {
		// An existing set without overlaps, grown as the command grows it.
		var existing []string
		tree := radix.New()
		for range r.IntN(6) {
			p := randPrefix(r, 4)
			if e, _ := prefixCollision(tree, []string{p}); e == noErr {
				existing = append(existing, p)
				tree.Insert(p, nil)
			}
		}
		var ex *radix.Tree
		if len(existing) > 0 || r.IntN(2) == 0 {
			ex = tree
		}
		ps := make([]string, 1+r.IntN(6))
		for i := range ps {
			ps[i] = randPrefix(r, 5)
		}
		want := bruteCollision(existing, ps)
		got, work := prefixCollision(ex, ps)
		if got != want {
			t.Fatalf("case %d: existing %q, new %q: %q, want %q", n, existing, ps, got, want)
		}
		switch {
		case strings.Contains(string(got), "an existing prefix"):
			existingErrs++
		case got != noErr:
			providedErrs++
		}
		if work > 3*len(ps) {
			t.Fatalf("case %d: %d lookups and comparisons for %d new prefixes", n, work, len(ps))
		}
	}
	t.Logf("%d cases: %d overlap an existing prefix, %d another new one, %d none",
		cases, existingErrs, providedErrs, cases-existingErrs-providedErrs)
}

// TestTrackingPrefixMatchProperty: the clients bcastLocked finds for a
// changed key are exactly those with a prefix the key starts with
// (compared with every prefix), on random prefix sets of random clients
// registered, some dropped again, through CLIENT TRACKING; 300 sets of up
// to 8 clients, 200 keys each (60,000 keys).
func TestTrackingPrefixMatchProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const sets, keysPerSet = 300, 200
	matched := 0
	for range sets {
		h := newWatchHarness(t, Config{})
		conns := make([]*resp.Conn, 1+r.IntN(8))
		want := map[*client][]string{}
		for i := range conns {
			conns[i] = h.open()
			var ps []string
			for range 1 + r.IntN(6) {
				ps = append(ps, randPrefix(r, 4))
			}
			if h.do(conns[i], trackingPrefixCmd(ps)...) == "+OK\r\n" {
				want[conns[i].Context().(*client)] = ps
			}
		}
		for _, c := range conns[:r.IntN(len(conns))] { // some leave
			h.s.Close(c)
			delete(want, c.Context().(*client))
		}
		for range keysPerSet {
			key := randPrefix(r, 7)
			var exp []*client
			for cl, ps := range want {
				for _, p := range ps {
					if strings.HasPrefix(key, p) {
						exp = append(exp, cl)
					}
				}
			}
			h.s.track.mu.Lock()
			got := h.s.track.bcastLocked(key, nil)
			h.s.track.mu.Unlock()
			byAddr := func(a, b *client) int { return strings.Compare(fmt.Sprintf("%p", a), fmt.Sprintf("%p", b)) }
			slices.SortFunc(exp, byAddr)
			slices.SortFunc(got, byAddr)
			if !slices.Equal(got, exp) {
				t.Fatalf("key %q: %d clients, want %d", key, len(got), len(exp))
			}
			matched += len(got)
		}
		var n int64
		for _, ps := range want {
			n += int64(len(ps))
		}
		h.s.track.mu.Lock()
		if h.s.track.nprefix != n {
			t.Fatalf("%d prefixes counted, %d registered", h.s.track.nprefix, n)
		}
		h.s.track.mu.Unlock()
	}
	t.Logf("%d keys over %d prefix sets, %d matches", sets*keysPerSet, sets, matched)
}

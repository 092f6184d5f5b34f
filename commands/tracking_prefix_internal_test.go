package commands

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// trackingPrefixCmd is CLIENT TRACKING on BCAST with a PREFIX for each of
// prefixes.
func trackingPrefixCmd(prefixes []string) []string {
	args := []string{"CLIENT", "TRACKING", "on", "BCAST"}
	for _, p := range prefixes {
		args = append(args, "PREFIX", p)
	}
	return args
}

// TestTrackingPrefixWork: with TrackingMaxPrefixes (100,000) BCAST
// prefixes registered by 10 clients of 10,000 each, the overlap check of
// each command makes at most 2 tree lookups per prefix (Redis's pairwise
// check compares 10,000^2/2 = 5e7 pairs), and each change of a key
// is compared with at most len(key)+1 of them (those on its path; the
// scan over the whole set compared it with all 100,000), whether it
// matches prefixes of several clients or none. Work is counted, not timed.
func TestTrackingPrefixWork(t *testing.T) {
	h := newWatchHarness(t, Config{})
	const clients, per = 10, 10000
	// Client j holds "t%04d" followed by j colons: the clients' prefixes
	// nest into each other (allowed across clients), each client's are
	// disjoint.
	for j := range clients {
		c := h.open()
		ps := make([]string, per)
		for i := range ps {
			ps[i] = fmt.Sprintf("t%04d", i) + strings.Repeat(":", j)
		}
		before := h.s.track.checked.Load()
		if r := h.do(c, trackingPrefixCmd(ps)...); r != "+OK\r\n" {
			t.Fatalf("client %d: %q", j, r)
		}
		// Each prefix is looked up once in a tree of the command's later
		// ones, and once in the client's (none here).
		if got := h.s.track.checked.Load() - before; got > 2*per {
			t.Errorf("client %d: the overlap check of %d prefixes compared %d, want at most %d", j, per, got, 2*per)
		}
	}
	_, _, total := h.s.track.stats() // every prefix is distinct here
	if total != clients*per {
		t.Fatalf("%d prefixes registered, want %d", total, clients*per)
	}
	w := h.open()
	keys := []string{
		"t0042::::::::::x", // every client's t0042 prefix: 10 matches
		"t9999:::",         // 4 matches
		"t0000",            // client 0's only
		"u0042:x",          // none
		"t00",              // none: shorter than every prefix
		"t0042" + strings.Repeat(":", 200),
	}
	for _, k := range keys {
		want := 0
		if strings.HasPrefix(k, "t") && len(k) >= 5 {
			want = min(len(k)-5+1, clients)
		}
		h.s.track.mu.Lock()
		before := h.s.track.examined
		h.s.track.mu.Unlock()
		if r := h.do(w, "SET", k, "v"); r != "+OK\r\n" {
			t.Fatalf("SET %s: %q", k, r)
		}
		h.s.track.mu.Lock()
		got := h.s.track.examined - before
		h.s.track.mu.Unlock()
		if got > int64(len(k)+1) {
			t.Errorf("SET %q: compared with %d prefixes of %d, want at most len(key)+1 = %d", k, got, total, len(k)+1)
		}
		if got != int64(want) {
			t.Errorf("SET %q: compared with %d prefixes, want the %d it starts with", k, got, want)
		}
	}
	t.Logf("%d prefixes on %d clients; %d changes checked", total, clients, len(keys))
}

// TestTrackingPrefixCapBeforeWork: one CLIENT TRACKING with 100,000
// prefixes, ten times TrackingMaxPrefixesPerClient, is refused before any
// overlap check or registration (no lookup, no comparison, nothing
// registered, the client not tracking); the pairwise check compared
// 100,000^2/2 = 5e9 pairs (about 25 s of one event loop) and registered
// them all.
func TestTrackingPrefixCapBeforeWork(t *testing.T) {
	h := newWatchHarness(t, Config{})
	c := h.open()
	const n = 100000
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf("p%06d:", i)
	}
	if r, want := h.do(c, trackingPrefixCmd(ps)...), "-"+msgTrackingPrefixesClient+"\r\n"; r != want {
		t.Errorf("%d prefixes: %q, want %q", n, r, want)
	}
	if w := h.s.track.checked.Load(); w != 0 {
		t.Errorf("the refused command made %d lookups and comparisons, want 0", w)
	}
	if _, _, registered := h.s.track.stats(); registered != 0 || c.Context().(*client).track.flags.Load() != 0 {
		t.Errorf("after the refusal: %d prefixes registered, tracking flags %b", registered, c.Context().(*client).track.flags.Load())
	}
	t.Logf("%d prefixes in one command", n)
}

// TestBcastPendingBounded: the keys a command changes under BCAST
// prefixes are held until the command ends, but never more than
// bcastMaxPending bytes of them: past it they are sent at once. 100000
// distinct keys for two clients, checked after each.
func TestBcastPendingBounded(t *testing.T) {
	defer func(d time.Duration) { bcastDelay = d }(bcastDelay)
	bcastDelay = time.Hour // only the bound sends them here
	tt := newTrackTable(0)
	a, b := &client{}, &client{}
	peak := 0
	for i := range 100000 {
		key := fmt.Sprintf("user:%08d", i)
		tt.queueBcast(bcastHit{a, "user:"}, key)
		tt.queueBcast(bcastHit{b, ""}, key)
		tt.bcast.mu.Lock()
		peak = max(peak, tt.bcast.bytes)
		tt.bcast.mu.Unlock()
	}
	if limit := bcastMaxPending + 13 + bcastKeyOverhead; peak > limit {
		t.Fatalf("%d bytes of BCAST invalidations pending at the peak, want at most %d", peak, limit)
	}
	tt.flushBcast()
	if tt.bcast.bytes != 0 || tt.bcast.any.Load() {
		t.Fatalf("after a flush: %d bytes pending, any %v", tt.bcast.bytes, tt.bcast.any.Load())
	}
}

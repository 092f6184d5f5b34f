package commands_test

import (
	"os"
	"strconv"
	"testing"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// TestLatencyHistogram checks LATENCY HISTOGRAM's reply shape, Redis 7.0's:
// name, [calls, n, histogram_usec, [bound, cumulative count, ...]], bounds
// and counts increasing, the last count equal to calls; a container
// brings its subcommands, unknown names are skipped, a name given twice is
// answered twice. With CELLSERVER_REFERENCE=host:port the same checks run
// against a real Redis 7.0 (without the bucket bounds, Redis's differ).
func TestLatencyHistogram(t *testing.T) {
	addr := os.Getenv(referenceEnv)
	ref := addr != ""
	if !ref {
		_, addr = servertest.Start(t, server.Config{})
	}
	c := resptest.MustDial(t, addr)
	if ref {
		c.MustDo(t, "SELECT", "9")
	}
	c.MustDo(t, "CONFIG", "RESETSTAT") // empties the histograms, then counts itself
	const calls = 25
	for i := 0; i < calls; i++ {
		c.MustDo(t, "STRLEN", "latency-test-key")
	}
	c.MustDo(t, "CONFIG", "GET", "maxclients")
	bounds := map[int64]bool{}
	for _, s := range commands.LatencyBuckets {
		bounds[int64(s*1e6)] = true
	}
	// check verifies a histogram map and returns its names in order; its
	// maps are arrays of pairs in RESP2, maps (kind '%') in RESP3.
	kind := byte('*')
	check := func(args ...string) []string {
		t.Helper()
		v := c.MustDo(t, append([]string{"LATENCY", "HISTOGRAM"}, args...)...)
		if v.Kind != kind || len(v.Elems)%2 != 0 {
			t.Fatalf("LATENCY HISTOGRAM %q: %v", args, v)
		}
		var names []string
		for i := 0; i < len(v.Elems); i += 2 {
			name, h := v.Elems[i], v.Elems[i+1]
			if name.Kind != '$' || h.Kind != kind || len(h.Elems) != 4 || h.Elems[0].Str != "calls" || h.Elems[1].Kind != ':' ||
				h.Elems[2].Str != "histogram_usec" || h.Elems[3].Kind != kind || len(h.Elems[3].Elems)%2 != 0 || len(h.Elems[3].Elems) == 0 {
				t.Fatalf("LATENCY HISTOGRAM %q: entry %v %v", args, name, h)
			}
			n, _ := strconv.ParseInt(h.Elems[1].Str, 10, 64)
			var lastBound, lastCount int64
			pairs := h.Elems[3].Elems
			for j := 0; j < len(pairs); j += 2 {
				b, _ := strconv.ParseInt(pairs[j].Str, 10, 64)
				k, _ := strconv.ParseInt(pairs[j+1].Str, 10, 64)
				if b <= lastBound || k <= lastCount || (!ref && !bounds[b]) {
					t.Errorf("%s: pair %d (%d, %d) after (%d, %d)", name.Str, j/2, b, k, lastBound, lastCount)
				}
				lastBound, lastCount = b, k
			}
			if lastCount != n {
				t.Errorf("%s: last cumulative count %d, calls %d", name.Str, lastCount, n)
			}
			if name.Str == "strlen" && n != calls {
				t.Errorf("strlen: calls %d, want %d", n, calls)
			}
			names = append(names, name.Str)
		}
		return names
	}
	if got := check("strlen"); len(got) != 1 || got[0] != "strlen" {
		t.Errorf("LATENCY HISTOGRAM strlen: %q", got)
	}
	if got := check("nosuch", "STRLEN", "strlen"); len(got) != 2 || got[0] != "strlen" || got[1] != "strlen" {
		t.Errorf("LATENCY HISTOGRAM nosuch STRLEN strlen: %q", got)
	}
	if got := check("config"); len(got) != 2 || !(got[0] == "config|get" && got[1] == "config|resetstat" ||
		got[0] == "config|resetstat" && got[1] == "config|get") {
		t.Errorf("LATENCY HISTOGRAM config: %q", got)
	}
	if got := check("config|get"); len(got) != 1 || got[0] != "config|get" {
		t.Errorf("LATENCY HISTOGRAM config|get: %q", got)
	}
	all := check()
	seen := map[string]bool{}
	for _, n := range all {
		seen[n] = true
	}
	for _, n := range []string{"strlen", "config|get", "config|resetstat", "latency|histogram"} {
		if !seen[n] {
			t.Errorf("LATENCY HISTOGRAM: no %s in %q", n, all)
		}
	}
	t.Logf("LATENCY HISTOGRAM with no argument: %d commands", len(all))

	// RESP3: the same, as maps. (Not in the golden files: which buckets
	// hold the calls depends on how fast they ran.)
	c.MustDo(t, "HELLO", "3")
	kind = '%'
	if got := check("strlen"); len(got) != 1 || got[0] != "strlen" {
		t.Errorf("RESP3 LATENCY HISTOGRAM strlen: %q", got)
	}
}

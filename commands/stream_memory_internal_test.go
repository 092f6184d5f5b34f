package commands

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/keyspace"
)

// TestStreamMemoryCounted: a stream's entries count towards maxmemory as
// they are added in place (MEMORY USAGE and the keyspace's total grow
// with them), XADD is refused with OOM past the cap under noeviction
// while XDEL, XTRIM and DEL still run, and a stream at its size cap
// refuses XADD with its own error.
func TestStreamMemoryCounted(t *testing.T) {
	ks, err := keyspace.New(keyspace.Config{MaxMemory: 256 << 10, Policy: keyspace.NoEviction})
	if err != nil {
		t.Fatal(err)
	}
	h := newWatchHarness(t, Config{Keyspace: ks})
	c := h.open()
	used0 := ks.Memory().Used
	added, oom := 0, ""
	for i := range 100000 {
		out := h.do(c, "XADD", "s", fmt.Sprintf("%d-0", i+1), "field", strings.Repeat("v", 50))
		if strings.HasPrefix(out, "-") {
			oom = out
			break
		}
		added++
	}
	if !strings.HasPrefix(oom, "-OOM ") {
		t.Fatalf("after %d entries XADD answered %q, want OOM", added, oom)
	}
	grown := ks.Memory().Used - used0
	if perEntry := float64(grown) / float64(added); grown < 256<<10-4096 || perEntry < 50 {
		t.Fatalf("%d entries of 50-byte values grew the counted memory by %d bytes (%.1f per entry)", added, grown, perEntry)
	}
	usage := h.do(c, "MEMORY", "USAGE", "s")
	if !strings.HasPrefix(usage, ":") {
		t.Fatalf("MEMORY USAGE s = %q", usage)
	}
	if out := h.do(c, "XTRIM", "s", "MAXLEN", "10"); out != fmt.Sprintf(":%d\r\n", added-10) {
		t.Fatalf("XTRIM over the cap answered %q", out)
	}
	if after := ks.Memory().Used - used0; after > grown/10 {
		t.Fatalf("after XTRIM to 10 entries the counted memory is %d bytes above empty (was %d)", after, grown)
	}
	if out := h.do(c, "XADD", "s", "*", "f", "v"); strings.HasPrefix(out, "-") {
		t.Fatalf("XADD under the cap again answered %q", out)
	}
	t.Logf("%d entries of 50-byte values until OOM at 256 KiB: %.1f counted bytes per entry", added, float64(grown)/float64(added))

	// The size cap of one stream.
	defer func(old int) { maxStreamSize = old }(maxStreamSize)
	maxStreamSize = 1 << 10
	h2 := newWatchHarness(t, Config{})
	c2 := h2.open()
	for i := range 100 {
		out := h2.do(c2, "XADD", "big", "*", "field", strings.Repeat("v", 50))
		if out == "-"+msgStreamTooLarge+"\r\n" {
			if i < 5 {
				t.Fatalf("XADD refused after %d entries, below a 1 KiB cap", i)
			}
			return
		}
	}
	t.Fatal("XADD never refused past a 1 KiB stream cap")
}

package commands_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// clientFields parses one CLIENT LIST line into its fields.
func clientFields(t *testing.T, line string) map[string]string {
	t.Helper()
	f := map[string]string{}
	for _, kv := range strings.Fields(line) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("CLIENT LIST field %q in %q", kv, line)
		}
		f[k] = v
	}
	return f
}

// TestClientInfoMemory: CLIENT INFO and CLIENT LIST report the buffers
// (qbuf, qbuf-free, argv-mem, multi-mem, rbs, obl, oll, omem, tot-mem)
// instead of zeros. Where the figures are deterministic they are Redis
// 7.0.15's own, recorded with the same bytes sent: CLIENT INFO alone gives
// qbuf=26 argv-mem=10 obl=0 oll=0 omem=0; after three pipelined PINGs,
// qbuf=68 argv-mem=10 obl=21 oll=0 omem=0. multi-mem is what
// --multi-max-bytes counts (Redis counts 24 bytes per command, not per
// argument, and says 29 for SET k v).
func TestClientInfoMemory(t *testing.T) {
	// Event loops (Linux's default) and a goroutine per connection.
	for _, loops := range []int{0, -1} {
		t.Run("event-loops="+strconv.Itoa(loops), func(t *testing.T) { testClientInfoMemory(t, loops) })
	}
}

func testClientInfoMemory(t *testing.T, loops int) {
	_, addr := servertest.Start(t, server.Config{EventLoops: loops})
	c := resptest.MustDial(t, addr)
	info := func(pings int) map[string]string {
		t.Helper()
		var req []byte
		for range pings {
			req = resptest.AppendCommand(req, "PING")
		}
		if _, err := c.C.Write(resptest.AppendCommand(req, "CLIENT", "INFO")); err != nil {
			t.Fatal(err)
		}
		for range pings {
			if v, err := c.Read(); err != nil || v.Str != "PONG" {
				t.Fatalf("PING: %v %v", v, err)
			}
		}
		v, err := c.Read()
		if err != nil || v.Kind != '$' {
			t.Fatalf("CLIENT INFO: %v %v", v, err)
		}
		return clientFields(t, v.Str)
	}
	num := func(f map[string]string, k string) int {
		t.Helper()
		n, err := strconv.Atoi(f[k])
		if err != nil {
			t.Fatalf("%s=%q: %v", k, f[k], err)
		}
		return n
	}
	check := func(what string, f map[string]string, want map[string]string) {
		t.Helper()
		for k, v := range want {
			if f[k] != v {
				t.Errorf("%s: %s=%s, want %s (Redis 7.0.15 says the same)", what, k, f[k], v)
			}
		}
		if num(f, "qbuf-free") <= 0 {
			t.Errorf("%s: qbuf-free=%s, want the free part of the input buffer", what, f["qbuf-free"])
		}
		sum := num(f, "qbuf") + num(f, "qbuf-free") + num(f, "argv-mem") + num(f, "multi-mem") + num(f, "rbs")
		if num(f, "tot-mem") <= sum {
			t.Errorf("%s: tot-mem=%s, want more than the buffers' %d", what, f["tot-mem"], sum)
		}
		if f["rbp"] != f["rbs"] {
			t.Errorf("%s: rbp=%s rbs=%s, want equal", what, f["rbp"], f["rbs"])
		}
	}
	check("CLIENT INFO", info(0), map[string]string{"qbuf": "26", "argv-mem": "10", "obl": "0", "oll": "0", "omem": "0", "multi-mem": "0"})
	f := info(3)
	check("PING PING PING CLIENT INFO", f, map[string]string{"qbuf": "68", "argv-mem": "10", "obl": "21", "oll": "0", "omem": "0"})
	if num(f, "rbs") < 21 {
		t.Errorf("rbs=%s, want room for the 21 bytes of replies", f["rbs"])
	}

	// Another client's line: between commands, no arguments; its MULTI
	// queue counted as --multi-max-bytes counts it.
	c.MustDo(t, "MULTI")
	c.MustDo(t, "SET", "k", "v")
	id := num(f, "id")
	other := resptest.MustDial(t, addr)
	v := other.MustDo(t, "CLIENT", "LIST", "ID", strconv.Itoa(id))
	g := clientFields(t, v.Str)
	want := map[string]string{"multi": "1", "multi-mem": strconv.Itoa(3 + 1 + 1 + 3*24), "argv-mem": "0", "qbuf": "0"}
	for k, w := range want {
		if g[k] != w {
			t.Errorf("other client: %s=%s, want %s", k, g[k], w)
		}
	}
	c.MustDo(t, "DISCARD")
	v = other.MustDo(t, "CLIENT", "LIST", "ID", strconv.Itoa(id))
	if g := clientFields(t, v.Str); g["multi-mem"] != "0" {
		t.Errorf("after DISCARD: multi-mem=%s, want 0", g["multi-mem"])
	}
}

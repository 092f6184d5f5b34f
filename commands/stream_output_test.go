package commands_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// TestStreamReadsBoundedByOutputLimit: XRANGE, XREAD, XREADGROUP (new
// entries and history) and XINFO STREAM FULL of a
// stream far larger than the client's output buffer limit stop building
// the reply once it passes the limit (the memory allocated stays near the
// limit, not the stream's size) and close the connection, as every reply
// past it does; the server serves the next client.
func TestStreamReadsBoundedByOutputLimit(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{MaxOutputBuffer: 1 << 20})
	w := resptest.MustDial(t, addr)
	defer w.Close()
	val := strings.Repeat("v", 1000)
	for i := 0; i < 40000; i++ { // about 40 MB of entries
		if err := w.Send("XADD", "big", "*", "f", val); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 40000; i++ {
		if _, err := w.Read(); err != nil {
			t.Fatal(err)
		}
	}
	w.MustDo(t, "XGROUP", "CREATE", "big", "g", "0")
	for _, cmd := range [][]string{
		{"XRANGE", "big", "-", "+"},
		{"XREAD", "STREAMS", "big", "0"},
		{"XREADGROUP", "GROUP", "g", "c", "STREAMS", "big", ">"},
		{"XREADGROUP", "GROUP", "g", "c", "STREAMS", "big", "0"}, // the history just delivered
		{"XINFO", "STREAM", "big", "FULL", "COUNT", "0"},
	} {
		replyCutAtLimit(t, addr, cmd, "the stream holds 40 MB")
		if v := w.MustDo(t, "PING"); v.Str != "PONG" {
			t.Fatalf("PING after %v: %v", cmd, v)
		}
	}
}

// TestStreamGroupRepliesBoundedByOutputLimit: XPENDING's extended form,
// XINFO CONSUMERS and XINFO GROUPS over tens of MB of
// pending entries, consumers and groups (names of 1000 bytes) stop
// building their replies once past the output buffer limit.
func TestStreamGroupRepliesBoundedByOutputLimit(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{MaxOutputBuffer: 1 << 20})
	w := resptest.MustDial(t, addr)
	defer w.Close()
	pipe := func(cmds [][]string) {
		for _, c := range cmds {
			if err := w.Send(c...); err != nil {
				t.Fatal(err)
			}
		}
		for range cmds {
			if v, err := w.Read(); err != nil || v.Kind == '-' {
				t.Fatalf("%v %v", v, err)
			}
		}
	}
	var cmds [][]string
	for range 40000 {
		cmds = append(cmds, []string{"XADD", "s", "*", "f", "v"})
	}
	pipe(cmds)
	w.MustDo(t, "XGROUP", "CREATE", "s", "g", "0")
	name := func(i int) string { return fmt.Sprintf("%0999d", i) }
	cmds = cmds[:0]
	for i := range 40 { // 40 consumers of 1000 entries each: 40000 pending
		cmds = append(cmds, []string{"XREADGROUP", "GROUP", "g", name(i), "COUNT", "1000", "STREAMS", "s", ">"})
	}
	pipe(cmds)
	cmds = cmds[:0]
	for i := range 40000 {
		cmds = append(cmds, []string{"XGROUP", "CREATECONSUMER", "s", "g", name(1000 + i)})
	}
	pipe(cmds)
	cmds = cmds[:0]
	for i := range 40000 {
		cmds = append(cmds, []string{"XGROUP", "CREATE", "s", name(i), "0"})
	}
	pipe(cmds)
	for _, cmd := range [][]string{
		{"XPENDING", "s", "g", "-", "+", "100000"},
		{"XINFO", "CONSUMERS", "s", "g"},
		{"XINFO", "GROUPS", "s"},
	} {
		replyCutAtLimit(t, addr, cmd, "about 40 MB whole")
	}
}

// TestXAutoClaimBoundedByOutputLimit: XAUTOCLAIM and XCLAIM of tens of MB of
// pending entries stops copying them for its reply once past the output
// buffer limit (what it claimed stays claimed, pending).
func TestXAutoClaimBoundedByOutputLimit(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{MaxOutputBuffer: 1 << 20})
	w := resptest.MustDial(t, addr)
	defer w.Close()
	val := strings.Repeat("v", 2000)
	for range 20000 { // 40 MB
		if err := w.Send("XADD", "s", "*", "f", val); err != nil {
			t.Fatal(err)
		}
	}
	claim := []string{"XCLAIM", "s", "g", "c3", "0"}
	for range 20000 {
		v, err := w.Read()
		if err != nil {
			t.Fatal(err)
		}
		claim = append(claim, v.Str)
	}
	w.MustDo(t, "XGROUP", "CREATE", "s", "g", "0")
	for range 50 { // each reply 800 KB, under the limit: 20000 pending
		if v := w.MustDo(t, "XREADGROUP", "GROUP", "g", "c", "COUNT", "400", "STREAMS", "s", ">"); v.Kind == '-' {
			t.Fatal(v.Str)
		}
	}
	for _, cmd := range [][]string{
		{"XAUTOCLAIM", "s", "g", "c2", "0", "0", "COUNT", "100000"},
		claim,
	} {
		replyCutAtLimit(t, addr, cmd, "40 MB whole")
	}
}

// replyCutAtLimit sends cmd on a connection of its own to a server with a
// 1 MiB output buffer limit and checks that the connection is closed
// rather than answered, and that the reply was not built whole first
// (at most 16 MiB allocated meanwhile; whole is the reply's size, for
// the message).
func replyCutAtLimit(t *testing.T, addr string, cmd []string, whole string) {
	t.Helper()
	name := cmd[:min(len(cmd), 6)] // XCLAIM's 20000 IDs left out of the messages
	c := resptest.MustDial(t, addr)
	defer c.Close()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := c.Send(cmd...); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Read(); err == nil {
		t.Fatalf("%v: answered %d bytes past a 1 MiB output limit, want the connection closed", name, len(v.Encode(nil)))
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("%v allocated %d MiB for a reply cut at 1 MiB (%s)", name, grew>>20, whole)
	}
}

package commands_test

import (
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
		c := resptest.MustDial(t, addr)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := c.Send(cmd...); err != nil {
			t.Fatal(err)
		}
		if v, err := c.Read(); err == nil {
			t.Fatalf("%v: answered %d bytes past a 1 MiB output limit, want the connection closed", cmd, len(v.Encode(nil)))
		}
		runtime.ReadMemStats(&after)
		if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
			t.Errorf("%v allocated %d MiB for a reply cut at 1 MiB (the stream holds 40 MB)", cmd, grew>>20)
		}
		c.Close()
		if v := w.MustDo(t, "PING"); v.Str != "PONG" {
			t.Fatalf("PING after %v: %v", cmd, v)
		}
	}
}

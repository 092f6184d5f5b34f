package commands_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/server"
)

// TestMonitorTwiceNoReply: a second MONITOR is ignored without a reply, as
// in Redis (monitorCommand returns early for a client already in monitor
// mode): the next reply is PING's, then PING's line; QUIT is fed, and
// closes.
func TestMonitorTwiceNoReply(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	m, o := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	if v := m.MustDo(t, "MONITOR"); v.Str != "OK" {
		t.Fatalf("MONITOR: %v", v)
	}
	if err := m.Send("MONITOR"); err != nil {
		t.Fatal(err)
	}
	if v := m.MustDo(t, "PING"); v.Str != "PONG" {
		t.Fatalf("after a second MONITOR, PING's reply is %v", v)
	}
	if v, err := m.Read(); err != nil || !strings.HasSuffix(v.Str, `"PING"`) {
		t.Fatalf("PING's line: %v, %v", v, err)
	}
	o.MustDo(t, "QUIT")
	if v, err := m.Read(); err != nil || !strings.HasSuffix(v.Str, `"QUIT"`) {
		t.Fatalf("QUIT's line: %v, %v", v, err)
	}
}

// TestMonitorSlowIsDropped: a monitor that never reads is disconnected
// once its queued lines pass the output buffer limit (Redis bounds it by
// client-output-buffer-limit too, in its normal class), the client whose
// commands it watches goes on being served, and the server's memory
// stays bounded by the limit, not by what was fed. Both with and without
// event loops.
func TestMonitorSlowIsDropped(t *testing.T) {
	const limit = 1 << 20
	for _, loops := range []int{-1, 1} {
		t.Run(fmt.Sprintf("EventLoops=%d", loops), func(t *testing.T) {
			_, addr := servertest.Start(t, server.Config{EventLoops: loops, MaxOutputBuffer: limit})
			slow, c := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
			if v := slow.MustDo(t, "MONITOR"); v.Str != "OK" {
				t.Fatalf("MONITOR: %v", v)
			}
			clients := func() string {
				info := c.MustDo(t, "INFO", "clients").Str
				for _, l := range strings.Split(info, "\r\n") {
					if v, ok := strings.CutPrefix(l, "connected_clients:"); ok {
						return v
					}
				}
				return "?"
			}
			if n := clients(); n != "2" {
				t.Fatalf("connected_clients %s, want 2", n)
			}
			payload := strings.Repeat("x", 64<<10)
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			base, peak := ms.HeapAlloc, uint64(0)
			fed := 0
			deadline := time.Now().Add(30 * time.Second)
			for {
				if time.Now().After(deadline) {
					t.Fatalf("the slow monitor was not dropped after %d MiB fed", fed>>20)
				}
				for range 16 { // 1 MiB of lines
					if v := c.MustDo(t, "SET", "k", payload); v.Str != "OK" {
						t.Fatalf("SET: %v", v)
					}
					fed += len(payload)
				}
				runtime.GC()
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
				if clients() == "1" {
					break
				}
				if fed > 256<<20 {
					t.Fatalf("the slow monitor was not dropped after %d MiB fed", fed>>20)
				}
			}
			grown := int64(peak) - int64(base)
			t.Logf("the slow monitor was dropped after %d MiB fed; heap grew by %d KiB at most", fed>>20, grown>>10)
			// The limit, a batch being written, the value stored, slack.
			if grown > 4*limit+8<<20 {
				t.Fatalf("heap grew by %d MiB while feeding a monitor limited to %d MiB", grown>>20, limit>>20)
			}
			testwait.Until(t, 10*time.Second, "the monitor's connection closed", func() bool {
				ok, err := closedAfterData(slow)
				return ok && err == nil
			})
		})
	}
}

// TestMonitorClientListFlag: CLIENT LIST shows a monitor with flag O, as
// Redis does, and drops it after RESET.
func TestMonitorClientListFlag(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	m, o := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	m.MustDo(t, "MONITOR")
	id := m.MustDo(t, "CLIENT", "ID") // fed to itself after the reply
	if _, err := m.Read(); err != nil {
		t.Fatal(err)
	}
	list := o.MustDo(t, "CLIENT", "LIST", "ID", id.Str).Str
	if !strings.Contains(list, " flags=O ") {
		t.Fatalf("CLIENT LIST of a monitor: %q", list)
	}
	m.MustDo(t, "RESET")
	if list := o.MustDo(t, "CLIENT", "LIST", "ID", id.Str).Str; !strings.Contains(list, " flags=N ") {
		t.Fatalf("CLIENT LIST after RESET: %q", list)
	}
}

package commands

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cellserver/cellserver/resp"
)

// Clients counting in different shards add up in Stats: calls, limiter
// decisions, latency buckets, total_commands_processed and the most-limited
// prefixes; CONFIG RESETSTAT empties every shard.
func TestStatsShards(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4)) // four shards
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s, err := New(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Clock: func() time.Time { return time.Unix(0, now.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	run := func(c *resp.Conn, args ...string) string {
		c.Out = c.Out[:0]
		var a [][]byte
		for _, s := range args {
			a = append(a, []byte(s))
		}
		s.ServeRESP(c, a)
		return string(c.Out)
	}
	shards := map[uint16]bool{}
	for i := range 4 {
		c := new(resp.Conn)
		s.Open(c)
		defer s.Close(c)
		shards[c.Context().(*client).shard] = true
		for range 20 { // 16 allowed (burst 15), then 4 limited
			run(c, "CL.THROTTLE", "hot:"+strconv.Itoa(i), "15", "30", "60")
		}
	}
	if len(shards) != 4 {
		t.Fatalf("clients in shards %v, want 4 shards", shards)
	}
	var th CommandStats
	for _, cs := range s.Stats().Commands {
		if cs.Name == "cl.throttle" {
			th = cs
		}
	}
	if th.Calls != 80 || th.Allowed != 64 || th.Limited != 16 || th.Buckets[len(th.Buckets)-1] != 80 {
		t.Errorf("cl.throttle stats %+v, want 80 calls, 64 allowed, 16 limited, 80 in the buckets", th)
	}
	if n := s.stats.cmdsTotal.Load(); n != 80 {
		t.Errorf("commands processed %d, want 80", n)
	}
	now.Add(int64(time.Minute)) // the interval ends
	st := s.Stats()
	if got := fmt.Sprint(st.LimitedPrefix, st.LimitedDropped); got != "[{hot 16}] 0" {
		t.Errorf("limited prefixes, dropped: %s, want [{hot 16}] 0", got)
	}

	c := new(resp.Conn)
	s.Open(c)
	defer s.Close(c)
	if r := run(c, "CONFIG", "RESETSTAT"); r != "+OK\r\n" {
		t.Fatalf("CONFIG RESETSTAT: %q", r)
	}
	for _, cs := range s.Stats().Commands {
		if cs.Name != "config|resetstat" {
			t.Errorf("after CONFIG RESETSTAT: %+v", cs)
		}
	}
}

// The limited-prefix tracker adds its shards' tables up when an interval
// closes, counts what overflows a shard's table as dropped, and reports
// nothing before the first interval is over.
func TestPrefixTrackerShards(t *testing.T) {
	now := time.Unix(0, 0)
	pt := newPrefixTracker(':', 2, time.Minute, func() time.Time { return now }, 3)
	for i := range pt.capacity + 5 { // a full table in shard 0: five dropped
		pt.add(0, []byte(fmt.Sprintf("p%d:x", i)))
	}
	for range 3 {
		pt.add(1, []byte("p1:y"))
		pt.add(2, []byte("p1:z"))
		pt.add(2, []byte("email@example.com"))
	}
	pt.add(4, []byte("p2:x")) // shard 4 is shard 1
	if top, dropped := pt.top(); len(top) != 0 || dropped != 0 {
		t.Fatalf("before the interval ends: %v %d", top, dropped)
	}
	now = now.Add(time.Minute)
	if got := fmt.Sprint(pt.top()); got != "[{p1 7} {(none) 3}] 5" {
		t.Errorf("top, dropped = %s, want [{p1 7} {(none) 3}] 5", got)
	}
	pt.add(1, []byte("p3:x"))
	now = now.Add(time.Minute)
	if got := fmt.Sprint(pt.top()); got != "[{p3 1}] 0" {
		t.Errorf("next interval: top, dropped = %s, want [{p3 1}] 0", got)
	}
}

package commands_test

import (
	"context"
	"testing"
	"time"

	"github.com/cellserver/cellserver/cellservertest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/keyspace"
	"github.com/cellserver/cellserver/limiter"
	"github.com/cellserver/cellserver/persistence"
	"github.com/cellserver/cellserver/persistence/changelog"
	"github.com/cellserver/cellserver/persistence/pebblestore"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// TestReserveDump: DUMP's payload carries a key's reservations, for each
// limiter kind: it decodes (persistence.DecodeValue) to the key's kind
// with its reservations, ids, units, settled actual and deadlines as
// made, and the key's expiry (PEXPIRETIME) the last deadline. (There is
// no RESTORE: TestReservePersisted settles after a restart instead.)
func TestReserveDump(t *testing.T) {
	_, rdbs := resClients(t, 1)
	rdb := rdbs[0]
	ctx := context.Background()
	id0 := resT0.UnixMicro()
	deadline := resT0.Add(30 * time.Second).UnixNano()
	for _, c := range []struct {
		key  string
		kind keyspace.Kind
		args []any
	}{
		{"f", keyspace.KindFixed, []any{"FIXED", 10, "10s"}},
		{"s", keyspace.KindSliding, []any{"SLIDING", 10, "10s"}},
		{"l", keyspace.KindLog, []any{"SLIDINGLOG", 10, "10s"}},
		{"g", keyspace.KindGCRA, []any{"THROTTLE", 9, 10, 1}},
	} {
		for _, q := range []int64{4, 3} {
			args := append(append([]any{"CL.RESERVE", c.key}, c.args...), q, "30s")
			if r, err := rdb.Do(ctx, args...).Int64Slice(); err != nil || r[0] != 0 {
				t.Fatalf("%v: %v %v", args, r, err)
			}
		}
		if err := rdb.Do(ctx, "CL.SETTLE", c.key, id0, 1).Err(); err != nil {
			t.Fatalf("settle %s: %v", c.key, err)
		}
		p, err := rdb.Dump(ctx, c.key).Result()
		if err != nil || len(p) < 10 {
			t.Fatalf("DUMP %s: %q %v", c.key, p, err)
		}
		v, err := persistence.DecodeValue([]byte(p[:len(p)-10]))
		if err != nil {
			t.Fatalf("DUMP %s: decode: %v", c.key, err)
		}
		var res *limiter.Reservations
		switch o := v.Obj.(type) {
		case *limiter.Reservations:
			res = o
		case *limiter.Log:
			res = o.Res
		}
		if v.Kind != c.kind || res == nil || len(res.List) != 2 {
			t.Fatalf("DUMP %s decodes to kind %v with reservations %+v, want %v with 2", c.key, v.Kind, res, c.kind)
		}
		for i, want := range []struct{ id, reserved, actual int64 }{{id0, 4, 1}, {id0 + 1, 3, -1}} {
			r := res.List[i]
			if r.ID != want.id || r.Reserved != want.reserved || r.Actual != want.actual || r.Deadline != deadline {
				t.Errorf("DUMP %s: reservation %d is %+v, want id %d reserved %d actual %d deadline %d", c.key, i, r, want.id, want.reserved, want.actual, deadline)
			}
		}
		if res.LastID != id0+1 {
			t.Errorf("DUMP %s: last id %d, want %d", c.key, res.LastID, id0+1)
		}
		exp, err := rdb.Do(ctx, "PEXPIRETIME", c.key).Int64()
		if err != nil || v.Exp != exp || exp != deadline/1e6 {
			t.Errorf("DUMP %s: expiry %d, PEXPIRETIME %d (%v), want the last deadline %d", c.key, v.Exp, exp, err, deadline/1e6)
		}
	}
}

// TestReservePersisted: with a data directory, open reservations survive
// a restart: the one settled before answers the same after, the open one
// settles (giving back what it did not use), and ids go on from the last.
func TestReservePersisted(t *testing.T) {
	ctx := context.Background()
	clock := servertest.NewClock(resT0)
	s := cellservertest.Run(t, cellservertest.WithClock(clock.Now), cellservertest.WithConfig(func(c *server.Config) {
		c.DataDir, c.OpenStore, c.Fsync = t.TempDir(), changelog.Opener(pebblestore.OpenStore, changelog.Options{}), "always"
	}))
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2})
	defer rdb.Close()
	id0 := resT0.UnixMicro()
	for _, q := range []int64{5, 3} {
		if r, err := rdb.Do(ctx, "CL.RESERVE", "k", "FIXED", 10, "60s", q, "30s").Int64Slice(); err != nil || r[0] != 0 {
			t.Fatalf("reserve %d: %v %v", q, r, err)
		}
	}
	if r, err := rdb.Do(ctx, "CL.SETTLE", "k", id0, 2).Int64Slice(); err != nil || r[2] != 3 {
		t.Fatalf("settle before the restart: %v %v", r, err)
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if r, err := rdb.Do(ctx, "CL.SETTLE", "k", id0, 2).Int64Slice(); err != nil || r[0] != 5 || r[1] != 2 || r[2] != 3 {
		t.Fatalf("settle again after the restart: %v %v, want [5 2 3]", r, err)
	}
	if r, err := rdb.Do(ctx, "CL.SETTLE", "k", id0+1, 0).Int64Slice(); err != nil || r[0] != 3 || r[2] != 3 {
		t.Fatalf("settle the open one after the restart: %v %v, want [3 0 3]", r, err)
	}
	if r, err := rdb.Do(ctx, "CL.FIXED", "k", 10, "60s", 0).Int64Slice(); err != nil || r[2] != 8 {
		t.Fatalf("after the settles: %v %v, want remaining 8 (2 used)", r, err)
	}
	if r, err := rdb.Do(ctx, "CL.RESERVE", "k", "FIXED", 10, "60s", 1, "30s").Int64Slice(); err != nil || r[5] != id0+2 {
		t.Fatalf("a reservation after the restart: %v %v, want id %d", r, err, id0+2)
	}
}

// TestReserveMemory reserves N units one at a time on one key (N = 1,
// 100, 10000, the cap) and reads MEMORY USAGE before (the fixed-window
// state alone) and after: each open reservation adds
// limiter.ReservationBytes (48) times the growth of the list's capacity,
// plus 96 bytes once for the list's header (64) and its object slot (32). At the
// cap, all open, the next reservation is refused with an error, and
// inside CL.ALL nothing is reserved on the other key; with settled ones,
// a new reservation forgets them; past the deadline
// the key takes reservations again and its memory falls back.
func TestReserveMemory(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{1, 100, limiter.MaxReservations} {
		clock, rdbs := resClients(t, 1)
		// Every call on the key scans its reservations: 10000 pipelined
		// reservations take seconds under -race.
		rdb := redis.NewClient(&redis.Options{Addr: rdbs[0].Options().Addr, Protocol: 2, ReadTimeout: time.Minute})
		defer rdb.Close()
		if err := rdb.Do(ctx, "CL.FIXED", "m", 1000000, "60s", 1).Err(); err != nil {
			t.Fatal(err)
		}
		before, err := rdb.MemoryUsage(ctx, "m").Result()
		if err != nil {
			t.Fatal(err)
		}
		pipe := rdb.Pipeline()
		cmds := make([]*redis.Cmd, n)
		for i := range cmds {
			cmds[i] = pipe.Do(ctx, "CL.RESERVE", "m", "FIXED", 1000000, "60s", 1, "30s")
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("%d reservations: %v", n, err)
		}
		for i, c := range cmds {
			if r, err := c.Int64Slice(); err != nil || r[0] != 0 || r[5] != resT0.UnixMicro()+int64(i) {
				t.Fatalf("reservation %d: %v %v", i, r, err)
			}
		}
		after, err := rdb.MemoryUsage(ctx, "m").Result()
		if err != nil {
			t.Fatal(err)
		}
		d := after - before
		lo, hi := int64(96+n*limiter.ReservationBytes), int64(96+2*n*limiter.ReservationBytes)
		if d < lo || d > hi || (d-96)%limiter.ReservationBytes != 0 {
			t.Errorf("%d reservations: MEMORY USAGE %d -> %d (+%d), want 96 + 48 x capacity in [%d, %d]", n, before, after, d, lo, hi)
		}
		t.Logf("%d open reservations: MEMORY USAGE %d -> %d bytes: +%d, %.1f bytes per reservation (list capacity %d)",
			n, before, after, d, float64(d)/float64(n), (d-96)/limiter.ReservationBytes)
		if n < limiter.MaxReservations {
			continue
		}
		const full = "ERR too many open reservations on the key (at most 10000)"
		if err := rdb.Do(ctx, "CL.RESERVE", "m", "FIXED", 1000000, "60s", 1, "30s").Err(); err == nil || err.Error() != full {
			t.Fatalf("reservation %d: %v, want %q", n+1, err, full)
		}
		// Inside CL.ALL the full key refuses the whole call: the other
		// key is not created.
		if err := rdb.Do(ctx, "CL.ALL", "CL.RESERVE", "other", "FIXED", 10, "60s", 1, "30s", "CL.RESERVE", "m", "FIXED", 1000000, "60s", 1, "30s").Err(); err == nil || err.Error() != full {
			t.Fatalf("CL.ALL with the full key: %v, want %q", err, full)
		}
		if n, err := rdb.Exists(ctx, "other").Result(); err != nil || n != 0 {
			t.Fatalf("EXISTS other after the refused CL.ALL: %d %v, want 0", n, err)
		}
		// Two settled: the next reservation makes room by forgetting
		// both; a settle of either then finds nothing.
		first, second := resT0.UnixMicro(), resT0.UnixMicro()+7
		for _, id := range []int64{second, first} {
			if err := rdb.Do(ctx, "CL.CANCEL", "m", id).Err(); err != nil {
				t.Fatalf("cancel %d: %v", id, err)
			}
		}
		for i, gone := range []int64{first, second} {
			r, err := rdb.Do(ctx, "CL.RESERVE", "m", "FIXED", 1000000, "60s", 1, "30s").Int64Slice()
			if err != nil || r[0] != 0 || r[5] != resT0.UnixMicro()+int64(n+i) {
				t.Fatalf("reservation %d with a settled one: %v %v", n+1+i, r, err)
			}
			const none = "ERR no such reservation (unknown id, or its ttl ended)"
			if err := rdb.Do(ctx, "CL.CANCEL", "m", gone).Err(); err == nil || err.Error() != none {
				t.Fatalf("cancel of the forgotten %d: %v, want %q", gone, err, none)
			}
		}
		if err := rdb.Do(ctx, "CL.RESERVE", "m", "FIXED", 1000000, "60s", 1, "30s").Err(); err == nil || err.Error() != full {
			t.Fatalf("reservation %d, all open again: %v, want %q", n+3, err, full)
		}
		clock.Advance(30*time.Second + time.Millisecond)
		if r, err := rdb.Do(ctx, "CL.RESERVE", "m", "FIXED", 1000000, "60s", 1, "30s").Int64Slice(); err != nil || r[0] != 0 || r[5] != resT0.Add(30*time.Second+time.Millisecond).UnixMicro() {
			t.Fatalf("past the deadlines: %v %v, want admitted", r, err)
		}
		if late, err := rdb.MemoryUsage(ctx, "m").Result(); err != nil || late-before > 96+16*limiter.ReservationBytes {
			t.Errorf("one reservation left: MEMORY USAGE %d (%v), want at most %d", late, err, before+96+16*limiter.ReservationBytes)
		} else {
			t.Logf("past the deadlines, one reservation: MEMORY USAGE %d bytes", late)
		}
	}
}

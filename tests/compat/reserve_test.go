package compat

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// reservation is CL.RESERVE's reply: the limiter's five integers and the
// reservation's id (-1 when refused).
type reservation struct {
	limited, limit, remaining, retryAfter, resetAfter, id int64
}

func parseReservation(t *testing.T, v any) reservation {
	t.Helper()
	a, ok := v.([]any)
	if !ok || len(a) != 6 {
		t.Fatalf("CL.RESERVE reply %#v, want 6 integers", v)
	}
	var n [6]int64
	for i, e := range a {
		if n[i], ok = e.(int64); !ok {
			t.Fatalf("CL.RESERVE reply element %d is %T %v", i, e, e)
		}
	}
	return reservation{n[0], n[1], n[2], n[3], n[4], n[5]}
}

// TestReserveGoRedis drives reservations through go-redis's typed results
// (its default protocol, RESP3): CL.RESERVE's six integers, CL.SETTLE
// down and up and again (same answer), CL.CANCEL, CL.ALL reserving on two
// keys (all or none), and the error replies as go-redis errors.
func TestReserveGoRedis(t *testing.T) {
	clk, addr := startServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	const id0 = t0NS / 1000 // the first id of a key: t0 in µs

	r := parseReservation(t, rdb.Do(ctx, "CL.RESERVE", "tokens", "FIXED", 1000, "60s", 800, "30s").Val())
	if want := (reservation{0, 1000, 200, -1, 35, id0}); r != want {
		t.Fatalf("reserve 800 of 1000: %+v, want %+v", r, want)
	}
	// Settle down: 800 reserved, 120 used, 680 come back.
	got, err := rdb.Do(ctx, "CL.SETTLE", "tokens", r.id, 120).Int64Slice()
	if err != nil || len(got) != 3 || got[0] != 800 || got[1] != 120 || got[2] != 680 {
		t.Fatalf("settle 120: %v %v, want [800 120 680]", got, err)
	}
	// The same settle again answers the same and changes nothing.
	again, err := rdb.Do(ctx, "CL.SETTLE", "tokens", r.id, 120).Int64Slice()
	if err != nil || len(again) != 3 || again[0] != 800 || again[2] != 680 {
		t.Fatalf("second settle: %v %v", again, err)
	}
	if rem, err := rdb.Do(ctx, "CL.FIXED", "tokens", 1000, "60s", 0).Int64Slice(); err != nil || rem[2] != 880 {
		t.Fatalf("after settling 120: %v %v, want remaining 880", rem, err)
	}
	if err := rdb.Do(ctx, "CL.SETTLE", "tokens", r.id, 121).Err(); err == nil || err.Error() != "ERR reservation already settled with actual 120" {
		t.Fatalf("settle with another actual: %v", err)
	}
	// Settle up: 100 reserved, 1500 used, 1400 more taken past the limit.
	r2 := parseReservation(t, rdb.Do(ctx, "CL.RESERVE", "tokens", "FIXED", 1000, "60s", 100, "30s").Val())
	if r2.limited != 0 || r2.id != id0+1 || r2.remaining != 780 {
		t.Fatalf("second reservation: %+v", r2)
	}
	up, err := rdb.Do(ctx, "CL.SETTLE", "tokens", r2.id, 1500).Int64Slice()
	if err != nil || up[0] != 100 || up[1] != 1500 || up[2] != -1400 {
		t.Fatalf("settle up: %v %v, want [100 1500 -1400]", up, err)
	}
	// In debt (120 + 1500 > 1000): refused, id -1.
	if r3 := parseReservation(t, rdb.Do(ctx, "CL.RESERVE", "tokens", "FIXED", 1000, "60s", 1, "30s").Val()); r3.limited != 1 || r3.id != -1 || r3.remaining != 0 {
		t.Fatalf("reservation in debt: %+v, want limited with id -1", r3)
	}
	// A cancel gives everything back (GCRA).
	g := parseReservation(t, rdb.Do(ctx, "CL.RESERVE", "g", "THROTTLE", 9, 10, 1, 10, "30s").Val())
	if g.limited != 0 || g.remaining != 0 || g.id != id0 {
		t.Fatalf("reserve the whole GCRA burst: %+v", g)
	}
	if c, err := rdb.Do(ctx, "CL.CANCEL", "g", g.id).Int64Slice(); err != nil || c[0] != 10 || c[1] != 0 || c[2] != 10 {
		t.Fatalf("cancel: %v %v, want [10 0 10]", c, err)
	}
	if p, err := rdb.Do(ctx, "CL.THROTTLE", "g", 9, 10, 1, 0).Int64Slice(); err != nil || p[2] != 10 {
		t.Fatalf("after cancel: %v %v, want remaining 10", p, err)
	}

	// CL.ALL: both reserved, then neither (the second key is full).
	all, err := rdb.Do(ctx, "CL.ALL", "CL.RESERVE", "a1", "FIXED", 10, "60s", 3, "30s", "CL.RESERVE", "a2", "THROTTLE", 0, 1, 60, 1, "30s").Slice()
	if err != nil || len(all) != 2 {
		t.Fatalf("CL.ALL: %#v %v", all, err)
	}
	a1, a2 := parseReservation(t, all[0]), parseReservation(t, all[1])
	if a1.limited != 0 || a1.id != id0 || a2.limited != 0 || a2.id != id0 {
		t.Fatalf("CL.ALL reserved %+v %+v, want both with id %d", a1, a2, id0)
	}
	all, err = rdb.Do(ctx, "CL.ALL", "CL.RESERVE", "a1", "FIXED", 10, "60s", 3, "30s", "CL.RESERVE", "a2", "THROTTLE", 0, 1, 60, 1, "30s").Slice()
	if err != nil || len(all) != 2 {
		t.Fatalf("second CL.ALL: %#v %v", all, err)
	}
	b1, b2 := parseReservation(t, all[0]), parseReservation(t, all[1])
	if b1.limited != 0 || b1.id != -1 || b2.limited != 1 || b2.id != -1 {
		t.Fatalf("second CL.ALL: %+v %+v, want a1 admissible but not reserved, a2 limited, ids -1", b1, b2)
	}
	if p, err := rdb.Do(ctx, "CL.FIXED", "a1", 10, "60s", 0).Int64Slice(); err != nil || p[2] != 7 {
		t.Fatalf("a1 after the refused CL.ALL: %v %v, want remaining 7 (nothing taken)", p, err)
	}
	for _, k := range []string{"a1", "a2"} {
		if c, err := rdb.Do(ctx, "CL.CANCEL", k, id0).Int64Slice(); err != nil || c[0] != c[2] {
			t.Fatalf("cancel %s: %v %v", k, c, err)
		}
	}
	if p, err := rdb.Do(ctx, "CL.FIXED", "a1", 10, "60s", 0).Int64Slice(); err != nil || p[2] != 10 {
		t.Fatalf("a1 after cancel: %v %v, want remaining 10", p, err)
	}

	// Errors come back as go-redis errors with the server's text.
	for _, c := range []struct {
		args []any
		want string
	}{
		{[]any{"CL.SETTLE", "tokens", 42, 1}, "ERR no such reservation (unknown id, or its ttl ended)"},
		{[]any{"CL.SETTLE", "tokens", "x", 1}, "ERR reservation id must be a positive integer"},
		{[]any{"CL.SETTLE", "tokens", r.id, -1}, "ERR actual must be a non-negative integer"},
		{[]any{"CL.RESERVE", "tokens", "FIXED", 10, "60s", -1, "30s"}, "ERR quantity must not be negative for CL.RESERVE"},
		{[]any{"CL.RESERVE", "tokens", "GCRA", 1, 1, 1, 1}, "ERR reservation kind must be THROTTLE, FIXED, SLIDING or SLIDINGLOG: CL.RESERVE key THROTTLE|FIXED|SLIDING|SLIDINGLOG args... quantity ttl [MS]"},
	} {
		if err := rdb.Do(ctx, c.args...).Err(); err == nil || err.Error() != c.want {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	// Past its ttl the reservation is gone: settling it is an error.
	clk.Advance(30*1e9 + 1e6)
	if err := rdb.Do(ctx, "CL.SETTLE", "tokens", r.id, 120).Err(); err == nil || err.Error() != "ERR no such reservation (unknown id, or its ttl ended)" {
		t.Fatalf("settle after the ttl: %v", err)
	}
}

// TestReserveRedisCLI: the real redis-cli reserves, the id it prints is
// fed to a second redis-cli that settles, and a third settles again.
func TestReserveRedisCLI(t *testing.T) {
	cli, env := redisCLI(t)
	_, addr := startServer(t)
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) []string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, cli, append([]string{"-h", host, "-p", port}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v: %q", args, err, out)
		}
		return strings.Fields(string(out))
	}
	out := run("CL.RESERVE", "llm:user1", "THROTTLE", "999", "1000", "60", "400", "2m")
	if len(out) != 6 || out[0] != "0" || out[1] != "1000" || out[2] != "600" {
		t.Fatalf("CL.RESERVE printed %q", out)
	}
	id := out[5]
	if n, err := strconv.ParseInt(id, 10, 64); err != nil || n != t0NS/1000 {
		t.Fatalf("id %q, want %d", id, t0NS/1000)
	}
	want := []string{"400", "150", "250"}
	for range 2 { // the second settle answers the same
		if got := run("CL.SETTLE", "llm:user1", id, "150"); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("CL.SETTLE printed %q, want %q", got, want)
		}
	}
	if got := run("CL.THROTTLE", "llm:user1", "999", "1000", "60", "0"); len(got) != 5 || got[2] != "850" {
		t.Fatalf("CL.THROTTLE after the settle printed %q, want remaining 850", got)
	}
}

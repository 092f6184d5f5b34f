// Package clienttests runs the client module's Client (package client)
// against a cellserver in this process (internal/servertest), with a
// clock the tests step. It lives in the server's module because the
// server is needed; make test-client-oldest runs it again with the
// oldest go-redis the client module supports.
package clienttests

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// t0 is a multiple of 10 s since the epoch, so 10 s windows start at t0.
var t0 = time.Unix(1_700_000_000, 0)

func start(t testing.TB, proto int) (*client.Client, *servertest.Clock) {
	t.Helper()
	clk := servertest.NewClock(t0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
	t.Cleanup(func() { rdb.Close() })
	return client.New(rdb), clk
}

var ctx = context.Background()

func check(t *testing.T, name string, have client.Result, err error, want client.Result) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if have != want {
		t.Errorf("%s:\nhave %+v\nwant %+v", name, have, want)
	}
}

const s, ms = time.Second, time.Millisecond

// GCRA as redis-cell: emission interval T = period/count, burst tolerance
// (max_burst+1)·T; a request of q is allowed iff max(TAT, now) + q·T −
// (max_burst+1)·T <= now. remaining = floor((now − allow_at)/T), reset =
// new TAT − now, retry = allow_at − now; CL.THROTTLE rounds them to whole
// seconds (truncate, +1 if a whole ms is left), CL.PEEK MS to ms.
func TestThrottleAndPeek(t *testing.T) {
	c, clk := start(t, 3)
	r, err := c.Peek(ctx, "k", 4, client.PerSecond(1)) // no key: full, TAT = now
	check(t, "peek empty", r, err, client.Result{Allowed: true, Limit: 5, Remaining: 5})
	r, err = c.Throttle(ctx, "k", 4, client.PerSecond(1), 1) // TAT t0+1s
	check(t, "first", r, err, client.Result{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 1 * s})
	r, err = c.Throttle(ctx, "k", 4, client.PerSecond(1), 4) // TAT t0+5s
	check(t, "burst", r, err, client.Result{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 5 * s})
	r, err = c.Throttle(ctx, "k", 4, client.PerSecond(1), 1) // allow_at t0+1s
	check(t, "refused", r, err, client.Result{Limit: 5, RetryAfter: 1 * s, ResetAfter: 5 * s})
	r, err = c.Throttle(ctx, "k", 4, client.PerSecond(1), 6) // 6 > burst 5
	check(t, "never", r, err, client.Result{Limit: 5, RetryAfter: client.Never, ResetAfter: 5 * s})

	clk.Advance(1500 * ms) // now t0+1.5s; allow_at t0+1s: allowed, TAT t0+6s
	r, err = c.Throttle(ctx, "k", 4, client.PerSecond(1), 1)
	// reset 4.5 s: 4 s truncated, plus one for the 500 ms left over.
	check(t, "after 1.5s", r, err, client.Result{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 5 * s})
	r, err = c.Peek(ctx, "k", 4, client.PerSecond(1))
	check(t, "peek ms", r, err, client.Result{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 4500 * ms})
	r, err = c.Peek(ctx, "k", 4, client.PerSecond(1)) // peek wrote nothing
	check(t, "peek again", r, err, client.Result{Allowed: true, Limit: 5, Remaining: 0, ResetAfter: 4500 * ms})
	info, found, err := c.Info(ctx, "k")
	if err != nil || !found || info.Kind != "gcra" || !info.TAT.Equal(t0.Add(6*s)) || info.TATIn != 4500*ms {
		t.Errorf("info: %+v %v %v", info, found, err)
	}

	// 1 per 250 ms is sent as 4 per second: the same emission interval.
	r, err = c.Throttle(ctx, "q", 0, client.Rate{Count: 1, Period: 250 * ms}, 1)
	check(t, "sub-second rate", r, err, client.Result{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 1 * s})
	r, err = c.Peek(ctx, "q", 0, client.Rate{Count: 1, Period: 250 * ms})
	check(t, "sub-second peek", r, err, client.Result{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 250 * ms})
	if _, err := c.Throttle(ctx, "q", 0, client.Rate{Count: 3, Period: 700 * ms}, 1); !errors.Is(err, client.ErrRate) {
		t.Errorf("3 per 700ms: %v, want ErrRate", err)
	}
}

// Fixed windows of 10 s start at t0: reset and retry are the window's end.
func TestFixed(t *testing.T) {
	c, clk := start(t, 3)
	r, err := c.Fixed(ctx, "f", 3, 10*s, 1)
	check(t, "first", r, err, client.Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 10 * s})
	clk.Advance(2500 * ms)
	r, err = c.Fixed(ctx, "f", 3, 10*s, 2)
	check(t, "fill", r, err, client.Result{Allowed: true, Limit: 3, Remaining: 0, ResetAfter: 7500 * ms})
	r, err = c.Fixed(ctx, "f", 3, 10*s, 1)
	check(t, "refused", r, err, client.Result{Limit: 3, RetryAfter: 7500 * ms, ResetAfter: 7500 * ms})
	r, err = c.Fixed(ctx, "f", 3, 10*s, 4)
	check(t, "never", r, err, client.Result{Limit: 3, RetryAfter: client.Never, ResetAfter: 7500 * ms})
	info, found, err := c.Info(ctx, "f")
	if err != nil || !found || info.Kind != "fixed" || !info.WindowStart.Equal(t0) || info.Count != 3 || info.TTL != 7500*ms {
		t.Errorf("info: %+v %v %v", info, found, err)
	}
	clk.Advance(7500 * ms) // next window
	r, err = c.Fixed(ctx, "f", 3, 10*s, 1)
	check(t, "next window", r, err, client.Result{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: 10 * s})
	// A sub-second period is sent as a duration ("250ms").
	r, err = c.Fixed(ctx, "g", 1, 250*ms, 1)
	check(t, "250ms", r, err, client.Result{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 250 * ms})
}

// Sliding counter: estimate = prev·(P−e)/P + cur; reset is 2P−e with
// units in the current window.
func TestSliding(t *testing.T) {
	c, clk := start(t, 3)
	r, err := c.Sliding(ctx, "s", 10, 10*s, 10)
	check(t, "fill", r, err, client.Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 20 * s})
	clk.Advance(15 * s) // e = 5 s, prev 10 weighs 5
	r, err = c.Sliding(ctx, "s", 10, 10*s, 5)
	check(t, "half", r, err, client.Result{Allowed: true, Limit: 10, Remaining: 0, ResetAfter: 15 * s})
	// One more fits once 10·(10−e')/10 <= 4: e' = 6 s, 1 s from now.
	r, err = c.Sliding(ctx, "s", 10, 10*s, 1)
	check(t, "refused", r, err, client.Result{Limit: 10, RetryAfter: 1 * s, ResetAfter: 15 * s})
	info, _, err := c.Info(ctx, "s")
	if err != nil || info.Kind != "sliding" || info.Previous != 10 || info.Current != 5 || !info.WindowStart.Equal(t0.Add(10*s)) {
		t.Errorf("info: %+v %v", info, err)
	}
}

// Sliding log: exact; an entry leaves at T+period.
func TestSlidingLog(t *testing.T) {
	c, clk := start(t, 3)
	r, err := c.SlidingLog(ctx, "l", 2, 10*s, 1)
	check(t, "1", r, err, client.Result{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 10 * s})
	clk.Advance(3 * s)
	r, err = c.SlidingLog(ctx, "l", 2, 10*s, 1)
	check(t, "2", r, err, client.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 10 * s})
	clk.Advance(1 * s) // t0+4s: t0's entry leaves at t0+10s
	r, err = c.SlidingLog(ctx, "l", 2, 10*s, 1)
	check(t, "3", r, err, client.Result{Limit: 2, RetryAfter: 6 * s, ResetAfter: 9 * s})
	info, _, err := c.Info(ctx, "l")
	if err != nil || info.Kind != "slidinglog" || info.Entries != 2 || info.Units != 2 || !info.Oldest.Equal(t0) || !info.Newest.Equal(t0.Add(3*s)) {
		t.Errorf("info: %+v %v", info, err)
	}
	_, err = c.SlidingLog(ctx, "l", 2, 10*s, -1)
	var e *client.Error
	if !errors.As(err, &e) || !e.BadArgument() || e.Message != "quantity must not be negative for CL.SLIDINGLOG" {
		t.Errorf("negative quantity: %v", err)
	}
}

func TestAcquireRelease(t *testing.T) {
	c, clk := start(t, 3)
	la, r, err := c.Acquire(ctx, "j", 2, 30*s, "a")
	check(t, "a", r, err, client.Result{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 30 * s})
	clk.Advance(5 * s)
	_, r, err = c.Acquire(ctx, "j", 2, 30*s, "b")
	check(t, "b", r, err, client.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 30 * s})
	lc, r, err := c.Acquire(ctx, "j", 2, 30*s, "c") // a's lease ends at t0+30s
	check(t, "c refused", r, err, client.Result{Limit: 2, RetryAfter: 25 * s, ResetAfter: 30 * s})
	if ok, err := lc.Release(ctx); ok || err != nil {
		t.Errorf("zero lease release: %v %v", ok, err)
	}
	info, _, err := c.Info(ctx, "j")
	if err != nil || info.Kind != "concurrency" || info.Leases != 2 || len(info.Tokens) != 2 || info.Tokens[0] != "a" || info.Tokens[1] != "b" {
		t.Errorf("info: %+v %v", info, err)
	}
	if ok, err := la.Release(ctx); !ok || err != nil {
		t.Fatalf("release a: %v %v", ok, err)
	}
	if ok, err := la.Release(ctx); ok || err != nil {
		t.Errorf("release a twice: %v %v", ok, err)
	}
	_, r, err = c.Acquire(ctx, "j", 2, 30*s, "c")
	check(t, "c after release", r, err, client.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 30 * s})
	if ok, err := c.Release(ctx, "nokey", "x"); ok || err != nil {
		t.Errorf("release on missing key: %v %v", ok, err)
	}
}

func TestAllOrNothing(t *testing.T) {
	c, _ := start(t, 3)
	b := c.All().
		Throttle("global", 9, client.PerSecond(10), 1).
		Fixed("user", 1, 10*s, 1).
		Sliding("ip", 5, 10*s, 1).
		SlidingLog("log", 5, 10*s, 1).
		Acquire("conc", 5, 10*s, "tok")
	if b.Len() != 5 {
		t.Fatalf("Len %d", b.Len())
	}
	ok, rs, err := b.Do(ctx)
	if err != nil || !ok || len(rs) != 5 {
		t.Fatalf("first: %v %+v %v", ok, rs, err)
	}
	want := []client.Result{
		{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 100 * ms}, // TAT now+100ms (MS)
		{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 10 * s},
		{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 20 * s},
		{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 10 * s},
		{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 10 * s},
	}
	for i := range want {
		if rs[i] != want[i] {
			t.Errorf("first[%d]: have %+v want %+v", i, rs[i], want[i])
		}
	}
	// Same instant: user's fixed window is full, so nothing is charged.
	ok, rs, err = c.All().
		Throttle("global", 9, client.PerSecond(10), 1).
		Fixed("user", 1, 10*s, 1).
		Sliding("ip", 5, 10*s, 1).
		Do(ctx)
	if err != nil || ok || rs[1].Allowed || rs[1].RetryAfter != 10*s || !rs[0].Allowed || !rs[2].Allowed {
		t.Fatalf("second: %v %+v %v", ok, rs, err)
	}
	r, err := c.Peek(ctx, "global", 9, client.PerSecond(10)) // TAT still now+100ms
	check(t, "global unchanged", r, err, client.Result{Allowed: true, Limit: 10, Remaining: 9, ResetAfter: 100 * ms})
	info, _, err := c.Info(ctx, "ip")
	if err != nil || info.Current != 1 {
		t.Errorf("ip unchanged: %+v %v", info, err)
	}
	// Errors: repeated key (server), bad rate (client side).
	_, _, err = c.All().Fixed("a", 1, s, 1).Sliding("a", 1, s, 1).Do(ctx)
	var e *client.Error
	if !errors.As(err, &e) || e.Command != "CL.ALL" || e.Code != "ERR" || e.Message != "CL.ALL checks must use distinct keys" {
		t.Errorf("dup keys: %v", err)
	}
	if _, _, err := c.All().Throttle("x", 1, client.Rate{}, 1).Do(ctx); !errors.Is(err, client.ErrRate) {
		t.Errorf("bad rate: %v", err)
	}
}

// A Throttle check in a Batch is sent with MS: its durations are exact to
// the ms, where Client.Throttle rounds the same state up to whole seconds.
// CL.THROTTLE k 1 1 3: limit 2, T = 3 s, tolerance 6 s.
func TestAllThrottleMS(t *testing.T) {
	c, clk := start(t, 3)
	per3s := client.Rate{Count: 1, Period: 3 * s}
	one := func(name string, want client.Result, wantOK bool) {
		t.Helper()
		ok, rs, err := c.All().Throttle("g", 1, per3s, 1).Do(ctx)
		if err != nil || ok != wantOK || len(rs) != 1 {
			t.Fatalf("%s: %v %+v %v", name, ok, rs, err)
		}
		check(t, name, rs[0], nil, want)
	}
	one("t0", client.Result{Allowed: true, Limit: 2, Remaining: 1, ResetAfter: 3 * s}, true) // TAT t0+3s
	clk.Set(t0.Add(1234500 * time.Microsecond))
	// TAT t0+6s, 4.7655 s ahead: 4766 ms.
	one("t0+1.2345s", client.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 4766 * ms}, true)
	// Refused: allowed at t0+3s, 1.7655 s ahead: 1766 ms.
	one("refused", client.Result{Limit: 2, RetryAfter: 1766 * ms, ResetAfter: 4766 * ms}, false)
	r, err := c.Throttle(ctx, "g", 1, per3s, 1) // the same, standalone: whole seconds
	check(t, "standalone", r, err, client.Result{Limit: 2, RetryAfter: 2 * s, ResetAfter: 5 * s})
	r, err = c.Peek(ctx, "g", 1, per3s)
	check(t, "peek", r, err, client.Result{Allowed: true, Limit: 2, Remaining: 0, ResetAfter: 4766 * ms})
	// A sub-second rate goes as a count per second, with MS: 1 per 250 ms.
	ok, rs, err := c.All().Throttle("q", 0, client.Rate{Count: 1, Period: 250 * ms}, 1).Fixed("f", 5, 10*s, 1).Do(ctx)
	if err != nil || !ok || len(rs) != 2 {
		t.Fatalf("sub-second: %v %+v %v", ok, rs, err)
	}
	check(t, "sub-second", rs[0], nil, client.Result{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: 250 * ms})
	// The check after it is parsed as its own: the window ends at t0+10s,
	// 8.7655 s ahead, 8766 ms.
	check(t, "fixed after", rs[1], nil, client.Result{Allowed: true, Limit: 5, Remaining: 4, ResetAfter: 8766 * ms})
}

func TestServerErrors(t *testing.T) {
	c, _ := start(t, 3)
	if _, err := c.Throttle(ctx, "t", 1, client.PerSecond(1), 1); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		call       func() error
		cmd, code  string
		msg        string
		wrong, arg bool
	}{
		{"fixed limit 0", func() error { _, err := c.Fixed(ctx, "f", 0, s, 1); return err },
			"CL.FIXED", "ERR", "limit must be a positive integer", false, true},
		{"sliding on gcra key", func() error { _, err := c.Sliding(ctx, "t", 1, s, 1); return err },
			"CL.SLIDING", "WRONGTYPE", "Operation against a key holding the wrong kind of value", true, false},
		{"acquire limit", func() error { _, _, err := c.Acquire(ctx, "a", 10001, s, "x"); return err },
			"CL.ACQUIRE", "ERR", "limit must be between 1 and 10000 for CL.ACQUIRE", false, true},
		{"peek zero rate", func() error { _, err := c.Peek(ctx, "p", 1, client.Rate{Count: 0, Period: s}); return err },
			"CL.PEEK", "Cell", "error: Store error: Zero rates are not supported", false, true},
		{"release on gcra key", func() error { _, err := c.Release(ctx, "t", "x"); return err },
			"CL.RELEASE", "WRONGTYPE", "Operation against a key holding the wrong kind of value", true, false},
		{"throttle on fixed key", func() error {
			if _, err := c.Fixed(ctx, "fx", 1, s, 1); err != nil {
				return err
			}
			_, err := c.Throttle(ctx, "fx", 1, client.PerSecond(1), 1)
			return err
		}, "CL.THROTTLE", "WRONGTYPE", "Operation against a key holding the wrong kind of value", true, false},
	}
	for _, tc := range cases {
		err := tc.call()
		var e *client.Error
		if !errors.As(err, &e) {
			t.Errorf("%s: %v (%T), want *client.Error", tc.name, err, err)
			continue
		}
		if e.Command != tc.cmd || e.Code != tc.code || e.Message != tc.msg || e.WrongType() != tc.wrong || e.BadArgument() != tc.arg || !client.IsServerError(err) {
			t.Errorf("%s: %+v", tc.name, e)
		}
	}
	if _, found, err := c.Info(ctx, "missing"); found || err != nil {
		t.Errorf("info missing: %v %v", found, err)
	}
}

func TestConnectionError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	c := client.New(rdb)
	_, err = c.Throttle(ctx, "k", 1, client.PerSecond(1), 1)
	var e *client.Error
	var ne net.Error
	var oe *net.OpError
	if err == nil || errors.As(err, &e) || client.IsServerError(err) || !(errors.As(err, &ne) || errors.As(err, &oe)) {
		t.Errorf("connection refused: %v (%T)", err, err)
	}
}

// RESP2 sends CL.INFO as a flat array, RESP3 as a map: both decode alike.
func TestInfoRESP2(t *testing.T) {
	c, _ := start(t, 2)
	if _, err := c.Fixed(ctx, "f", 3, 10*s, 2); err != nil {
		t.Fatal(err)
	}
	info, found, err := c.Info(ctx, "f")
	if err != nil || !found || info.Kind != "fixed" || info.Count != 2 || !info.WindowStart.Equal(t0) || info.TTL != 10*s {
		t.Errorf("info: %+v %v %v", info, found, err)
	}
	if _, found, err := c.Info(ctx, "missing"); found || err != nil {
		t.Errorf("missing: %v %v", found, err)
	}
}

// A cancelled context is the caller's error, not the server's.
func TestContextError(t *testing.T) {
	c, _ := start(t, 3)
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err := c.Fixed(cctx, "f", 1, s, 1)
	if !errors.Is(err, context.Canceled) || client.IsServerError(err) {
		t.Errorf("cancelled: %v (%T)", err, err)
	}
}

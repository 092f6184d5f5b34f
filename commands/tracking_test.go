package commands_test

import (
	"fmt"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/resptest"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/server"
)

// invalidation is the push frame that invalidates key.
func invalidation(key string) string {
	return ">2\r\n$10\r\ninvalidate\r\n*1\r\n$" + strconv.Itoa(len(key)) + "\r\n" + key + "\r\n"
}

// trackCase is one change by another client to a key the tracking client
// read (k), or to another key.
type trackCase struct {
	name    string
	setup   [][]string // by the other client, before the read
	read    []string   // by the tracking client (default GET k)
	change  [][]string // by the other client
	advance time.Duration
	sweep   bool
	want    string // the push expected before the tracking client's PONG
}

// TestTrackingInvalidations: a RESP3 client tracking k (default mode)
// gets exactly one invalidation when another client changes k by any
// means (writes, limiter calls, DEL, EXPIRE, expiry with an injected
// clock, FLUSHALL's null), and none for other keys, reads or refused
// limiter calls; in both serving modes.
func TestTrackingInvalidations(t *testing.T) {
	throttle := []string{"CL.THROTTLE", "k", "0", "1", "60"}
	flushed := ">2\r\n$10\r\ninvalidate\r\n_\r\n"
	cases := []trackCase{
		{name: "SET", change: [][]string{{"SET", "k", "2"}}, want: invalidation("k")},
		{name: "SET twice: one invalidation", change: [][]string{{"SET", "k", "2"}, {"SET", "k", "3"}}, want: invalidation("k")},
		{name: "CL.THROTTLE", setup: [][]string{{"DEL", "k"}}, read: []string{"CL.INFO", "k"}, change: [][]string{throttle}, want: invalidation("k")},
		{name: "CL.THROTTLE after CL.PEEK", setup: [][]string{{"DEL", "k"}}, read: []string{"CL.PEEK", "k", "5", "1", "60"}, change: [][]string{{"CL.THROTTLE", "k", "5", "1", "60"}}, want: invalidation("k")},
		{name: "CL.FIXED", setup: [][]string{{"DEL", "k"}}, read: []string{"EXISTS", "k"}, change: [][]string{{"CL.FIXED", "k", "5", "1m"}}, want: invalidation("k")},
		{name: "DEL", read: []string{"STRLEN", "k"}, change: [][]string{{"DEL", "k"}}, want: invalidation("k")},
		{name: "EXPIRE", read: []string{"TTL", "k"}, change: [][]string{{"EXPIRE", "k", "100"}}, want: invalidation("k")},
		{name: "expiry removed by the sweep", setup: [][]string{{"SET", "k", "v", "PX", "1000"}}, read: []string{"PTTL", "k"}, advance: 2 * time.Second, sweep: true, want: invalidation("k")},
		{name: "FLUSHALL", change: [][]string{{"FLUSHALL"}}, want: flushed},
		{name: "FLUSHDB of another database", change: [][]string{{"SELECT", "2"}, {"FLUSHDB"}, {"SELECT", "0"}}, want: flushed},
		{name: "another key", change: [][]string{{"SET", "k2", "x"}, {"DEL", "k2"}}},
		{name: "reads", change: [][]string{{"GET", "k"}, {"TTL", "k"}, {"TYPE", "k"}, {"EXISTS", "k"}}},
		{name: "CL.THROTTLE refused", setup: [][]string{{"DEL", "k"}, throttle}, read: []string{"CL.INFO", "k"}, change: [][]string{throttle}},
		{name: "DEL of an absent key", setup: [][]string{{"DEL", "k"}}, change: [][]string{{"DEL", "k"}}},
	}
	for _, loops := range []int{-1, 1} {
		t.Run(fmt.Sprintf("EventLoops=%d", loops), func(t *testing.T) {
			clk := servertest.NewClock(goldenT0)
			srv, addr := servertest.Start(t, server.Config{Clock: clk.Now, EventLoops: loops})
			a, b := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
			a.MustDo(t, "HELLO", "3")
			if got := a.MustDo(t, "CLIENT", "TRACKING", "on").Str; got != "OK" {
				t.Fatalf("CLIENT TRACKING on: %q", got)
			}
			for _, tc := range cases {
				b.MustDo(t, "SET", "k", "1")
				for _, cmd := range tc.setup {
					b.MustDo(t, cmd...)
				}
				// Whatever the setup invalidated arrives before PONG.
				drainPushes(t, a)
				read := tc.read
				if read == nil {
					read = []string{"GET", "k"}
				}
				a.MustDo(t, read...)
				for _, cmd := range tc.change {
					b.MustDo(t, cmd...)
				}
				clk.Advance(tc.advance)
				if tc.sweep {
					srv.Commands().SweepOnce()
				}
				var got string
				if v := a.MustDo(t, "PING"); string(v.Encode(nil)) != "+PONG\r\n" {
					got = string(v.Encode(nil))
					pong, err := a.Read()
					if err != nil {
						t.Fatal(err)
					}
					if string(pong.Encode(nil)) != "+PONG\r\n" {
						t.Errorf("%s: a second push %q", tc.name, pong.Encode(nil))
					}
				}
				if got != tc.want {
					t.Errorf("%s: pushes %q, want %q", tc.name, got, tc.want)
				}
				// Exactly one: nothing more is pending.
				if v := a.MustDo(t, "PING"); string(v.Encode(nil)) != "+PONG\r\n" {
					t.Errorf("%s: a second push %q", tc.name, v.Encode(nil))
				}
			}
			t.Logf("%d cases", len(cases))
		})
	}
}

// drainPushes reads the pushes pending for c, up to a PING's reply.
func drainPushes(t *testing.T, c *resptest.Conn) {
	t.Helper()
	if err := c.Send("PING"); err != nil {
		t.Fatal(err)
	}
	for {
		v, err := c.Read()
		if err != nil {
			t.Fatal(err)
		}
		if string(v.Encode(nil)) == "+PONG\r\n" {
			return
		}
	}
}

// TestTrackingPushToIdleClient: an invalidation reaches a tracking client
// that sends nothing more (it is written by the other client's change, not
// with the tracking client's next reply), in both serving modes.
func TestTrackingPushToIdleClient(t *testing.T) {
	for _, loops := range []int{-1, 1, 2} {
		t.Run(fmt.Sprintf("EventLoops=%d", loops), func(t *testing.T) {
			_, addr := servertest.Start(t, server.Config{EventLoops: loops})
			a, b := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
			a.MustDo(t, "HELLO", "3")
			a.MustDo(t, "CLIENT", "TRACKING", "on")
			const n = 100
			for i := range n {
				key := "key" + strconv.Itoa(i)
				a.MustDo(t, "GET", key)
				b.MustDo(t, "CL.THROTTLE", key, "5", "1", "60")
				v, err := a.Read()
				if err != nil {
					t.Fatalf("key %d: %v", i, err)
				}
				if got := string(v.Encode(nil)); got != invalidation(key) {
					t.Fatalf("key %d: %q, want %q", i, got, invalidation(key))
				}
			}
			t.Logf("%d invalidations read without a command", n)
		})
	}
}

// TestTrackingTableCap: past tracking-table-max-keys the table forgets
// keys, sending their invalidations, so it never holds more; INFO and
// CONFIG GET show the figures.
func TestTrackingTableCap(t *testing.T) {
	const max = 3
	cs, err := commands.New(commands.Config{TrackingTableMaxKeys: max})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := resp.NewServer(resp.Config{}, cs)
	go rs.Serve(ln)
	t.Cleanup(func() { rs.Close() })
	a := resptest.MustDial(t, ln.Addr().String())
	a.MustDo(t, "HELLO", "3")
	a.MustDo(t, "CLIENT", "TRACKING", "on")
	const reads = 10
	pushes := 0
	for i := range reads {
		if err := a.Send("GET", "k"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		for {
			v, err := a.Read()
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Encode(nil)) > 0 && v.Encode(nil)[0] == '>' {
				pushes++
				continue
			}
			break
		}
	}
	drainPushes(t, a) // evictions of the last read come after its reply
	info := a.MustDo(t, "INFO", "stats").Str
	want := "tracking_total_keys:" + strconv.Itoa(max)
	if !containsLine(info, want) {
		t.Errorf("INFO stats lacks %q:\n%s", want, info)
	}
	got := string(a.MustDo(t, "CONFIG", "GET", "tracking-table-max-keys").Encode(nil))
	if wantCfg := "%1\r\n$23\r\ntracking-table-max-keys\r\n$1\r\n3\r\n"; got != wantCfg {
		t.Errorf("CONFIG GET: %q, want %q", got, wantCfg)
	}
	clients := a.MustDo(t, "INFO", "clients").Str
	if !containsLine(clients, "tracking_clients:1") {
		t.Errorf("INFO clients lacks tracking_clients:1:\n%s", clients)
	}
	if pushes+1 < reads-max { // the last read's come with drainPushes
		t.Errorf("%d invalidations for %d reads, want about %d", pushes, reads, reads-max)
	}
	t.Logf("%d reads, table capped at %d keys, %d invalidations seen", reads, max, pushes)
}

func containsLine(s, line string) bool {
	for _, l := range splitLines(s) {
		if l == line {
			return true
		}
	}
	return false
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			l := s[start:i]
			if len(l) > 0 && l[len(l)-1] == '\r' {
				l = l[:len(l)-1]
			}
			out = append(out, l)
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// TestTrackingRedirect: REDIRECT sends a client's invalidations to another
// RESP3 connection (Redis 7.0.15's frames); once that one has gone, the
// client gets tracking-redir-broken and TRACKINGINFO says broken_redirect;
// an unknown id and two REDIRECTs are refused (a RESP2 target:
// TestTrackingRedirectRESP2).
func TestTrackingRedirect(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	a, b, tg := resptest.MustDial(t, addr), resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	tg.MustDo(t, "HELLO", "3")
	tid := tg.MustDo(t, "CLIENT", "ID").Str
	a.MustDo(t, "HELLO", "3")
	wantReply := func(c *resptest.Conn, want string, args ...string) {
		t.Helper()
		if got := string(c.MustDo(t, args...).Encode(nil)); got != want {
			t.Fatalf("%q: %q, want %q", args, got, want)
		}
	}
	wantReply(a, "-ERR The client ID you want redirect to does not exist\r\n", "CLIENT", "TRACKING", "on", "REDIRECT", "999999")
	wantReply(a, "-ERR A client can only redirect to a single other client\r\n", "CLIENT", "TRACKING", "on", "REDIRECT", tid, "REDIRECT", tid)
	wantReply(a, "+OK\r\n", "CLIENT", "TRACKING", "on", "REDIRECT", tid)
	wantReply(a, ":"+tid+"\r\n", "CLIENT", "GETREDIR")
	wantReply(a, "_\r\n", "GET", "rk")
	wantReply(b, "+OK\r\n", "SET", "rk", "1")
	v, err := tg.Read()
	if err != nil || string(v.Encode(nil)) != invalidation("rk") {
		t.Fatalf("target got %q, %v; want %q", v.Encode(nil), err, invalidation("rk"))
	}
	wantReply(a, "+PONG\r\n", "PING") // nothing for a itself
	wantReply(a, "$1\r\n1\r\n", "GET", "rk")
	tg.C.Close()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Contains(b.MustDo(t, "CLIENT", "LIST", "ID", tid).Str, "id="+tid+" ") {
		if time.Now().After(deadline) {
			t.Fatal("the target's connection is still listed")
		}
		runtime.Gosched()
	}
	wantReply(b, "+OK\r\n", "SET", "rk", "2")
	broken := ">2\r\n$21\r\ntracking-redir-broken\r\n:" + tid + "\r\n"
	wantReply(a, broken, "PING")
	if v, err := a.Read(); err != nil || v.Str != "PONG" {
		t.Fatalf("after the push: %q, %v; want PONG", v.Encode(nil), err)
	}
	info := string(a.MustDo(t, "CLIENT", "TRACKINGINFO").Encode(nil))
	if want := "%3\r\n$5\r\nflags\r\n~2\r\n$2\r\non\r\n$15\r\nbroken_redirect\r\n$8\r\nredirect\r\n:" + tid + "\r\n$8\r\nprefixes\r\n*0\r\n"; info != want {
		t.Errorf("TRACKINGINFO %q, want %q", info, want)
	}
}

// TestTrackingEviction: a tracked key evicted under maxmemory
// (allkeys-lru) is invalidated; the other client's writes of keys nobody
// read send nothing. Presence is checked through the keyspace, which does
// not refresh the key's LRU clock as a read would.
func TestTrackingEviction(t *testing.T) {
	clk := servertest.NewClock(goldenT0)
	srv, addr := servertest.Start(t, server.Config{Clock: clk.Now, MaxMemory: 300, MaxMemoryPolicy: "allkeys-lru"})
	ks := srv.Commands().Keyspace()
	a, b := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	present := func(key string) bool { return keyPresent(ks, clk, key) }
	a.MustDo(t, "HELLO", "3")
	a.MustDo(t, "CLIENT", "TRACKING", "on")
	b.MustDo(t, "SET", "k", "v")
	a.MustDo(t, "GET", "k")
	fills := 0
	for ; present("k"); fills++ {
		if fills == 1000 {
			t.Fatal("k was not evicted after 1000 writes")
		}
		clk.Advance(time.Second)
		b.MustDo(t, "SET", "fill:"+strconv.Itoa(fills), strings.Repeat("x", 100))
	}
	if got := string(a.MustDo(t, "PING").Encode(nil)); got != invalidation("k") {
		t.Fatalf("after k was evicted: %q, want %q", got, invalidation("k"))
	}
	if v, err := a.Read(); err != nil || v.Str != "PONG" {
		t.Fatalf("after the push: %q, %v; want only PONG", v.Encode(nil), err)
	}
	t.Logf("k evicted after %d writes", fills)
}

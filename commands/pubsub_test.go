package commands_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/commands"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/resp"
	"github.com/cellserver/cellserver/server"
)

// TestPubsubConcurrent: publishers send numbered messages to channels
// while subscribers (by channel and by pattern, RESP2 and RESP3) read
// them; every subscriber gets every message of its channels exactly once
// and, for each publisher, in publish order, and the publishers' PUBLISH
// replies add up to the messages delivered. In both serving modes, under
// -race.
func TestPubsubConcurrent(t *testing.T) {
	const (
		publishers = 4
		perPub     = 300
		channels   = 2
	)
	for _, loops := range []int{-1, 1} {
		t.Run(fmt.Sprintf("EventLoops=%d", loops), func(t *testing.T) {
			_, addr := servertest.Start(t, server.Config{EventLoops: loops})
			type sub struct {
				c       *rawConn
				resp3   bool
				pattern string // "" : channel subscriber of ch<i>
				ch      int
			}
			var subs []*sub
			for i := 0; i < 6; i++ {
				s := &sub{c: dialRaw(t, addr), resp3: i%2 == 1, ch: i % channels}
				if i >= 4 {
					s.pattern = "ch*" // every channel
				}
				if s.resp3 {
					s.c.mustDo(t, "HELLO", "3")
				}
				if s.pattern != "" {
					s.c.mustDo(t, "PSUBSCRIBE", s.pattern)
				} else {
					s.c.mustDo(t, "SUBSCRIBE", "ch"+strconv.Itoa(s.ch))
				}
				subs = append(subs, s)
			}
			var wg sync.WaitGroup
			sums := make([]int64, publishers)
			errs := make(chan error, publishers+len(subs))
			for p := 0; p < publishers; p++ {
				wg.Add(1)
				go func(p int) {
					defer wg.Done()
					c := dialRaw(t, addr)
					for i := 0; i < perPub; i++ {
						ch := "ch" + strconv.Itoa(i%channels)
						v, err := c.do("PUBLISH", ch, fmt.Sprintf("%d:%d", p, i))
						if err != nil || v.kind != ':' {
							errs <- fmt.Errorf("PUBLISH: %v %v", v, err)
							return
						}
						n, _ := strconv.ParseInt(v.str, 10, 64)
						sums[p] += n
					}
				}(p)
			}
			var received sync.Map // sub index -> count
			for si, s := range subs {
				wg.Add(1)
				go func(si int, s *sub) {
					defer wg.Done()
					want := perPub * publishers / channels
					if s.pattern != "" {
						want = perPub * publishers
					}
					next := make([]int, publishers) // per publisher: the next i expected
					step := 1
					if s.pattern == "" {
						step = channels // publishers alternate channels
						for p := range next {
							next[p] = s.ch
						}
					}
					for got := 0; got < want; got++ {
						v, err := s.c.read()
						if err != nil {
							errs <- fmt.Errorf("sub %d after %d messages: %v", si, got, err)
							return
						}
						kind := byte('*')
						if s.resp3 {
							kind = '>'
						}
						e := v.elems
						if v.kind != kind || len(e) < 3 {
							errs <- fmt.Errorf("sub %d: %v", si, v)
							return
						}
						if s.pattern != "" && (e[0].str != "pmessage" || e[1].str != s.pattern || len(e) != 4) ||
							s.pattern == "" && (e[0].str != "message" || e[1].str != "ch"+strconv.Itoa(s.ch)) {
							errs <- fmt.Errorf("sub %d: %v", si, v)
							return
						}
						var p, i int
						fmt.Sscanf(e[len(e)-1].str, "%d:%d", &p, &i)
						if i != next[p] {
							errs <- fmt.Errorf("sub %d: publisher %d's message %d arrived when %d was due", si, p, i, next[p])
							return
						}
						next[p] = i + step
					}
					received.Store(si, want)
				}(si, s)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			var total, delivered int64
			for _, n := range sums {
				total += n
			}
			received.Range(func(_, v any) bool { delivered += int64(v.(int)); return true })
			if total != delivered {
				t.Fatalf("PUBLISH replies add up to %d, subscribers read %d", total, delivered)
			}
			t.Logf("%d publishers x %d messages; %d subscribers read %d messages, each checked for order",
				publishers, perPub, len(subs), delivered)
		})
	}
}

// TestPubsubSlowSubscriber: a subscriber that never reads is closed once
// its queued messages pass the output buffer limit, while the publisher
// goes on being answered; the others still get their messages. Both with
// and without event loops (a loop's connection waiting for EPOLLOUT takes
// its pushes into its Out, which is checked against the limit too).
func TestPubsubSlowSubscriber(t *testing.T) {
	for _, loops := range []int{-1, 1} {
		t.Run(fmt.Sprintf("EventLoops=%d", loops), func(t *testing.T) {
			_, addr := servertest.Start(t, server.Config{EventLoops: loops, MaxOutputBuffer: 1 << 20})
			slow, fast, pub := dialRaw(t, addr), dialRaw(t, addr), dialRaw(t, addr)
			slow.mustDo(t, "SUBSCRIBE", "ch")
			fast.mustDo(t, "SUBSCRIBE", "ch")
			payload := strings.Repeat("x", 64<<10)
			// 64 MiB in all, far more than the socket buffers and the
			// limit: the slow subscriber must be dropped for PUBLISH to
			// go on.
			sent := 0
			deadline := time.Now().Add(30 * time.Second)
			for i := 0; ; i++ {
				if time.Now().After(deadline) {
					t.Fatal("the slow subscriber was never dropped")
				}
				v := pub.mustDo(t, "PUBLISH", "ch", payload)
				sent++
				if _, err := fast.read(); err != nil {
					t.Fatal(err)
				}
				if v.str == "1" {
					break // only the fast subscriber is left
				}
				if v.str != "2" || i > 1024 {
					t.Fatalf("PUBLISH %d: %v", i, v)
				}
			}
			if ok, err := slow.closedAfterData(); err != nil || !ok {
				t.Fatalf("slow subscriber: closed %v, %v", ok, err)
			}
			t.Logf("the slow subscriber was closed after %d messages of 64 KiB", sent)
		})
	}
}

// closedAfterData reads until the server closes the connection.
func (c *rawConn) closedAfterData() (bool, error) {
	c.nc.SetReadDeadline(time.Now().Add(respTimeout))
	_, err := io.Copy(io.Discard, c.r)
	if err == nil {
		return true, nil // EOF
	}
	if strings.Contains(err.Error(), "reset") {
		return true, nil
	}
	return false, err
}

// TestPubsubClientListAndInfo: CLIENT LIST shows flag P with sub= and
// psub= counts, CLIENT LIST TYPE pubsub|normal separates the clients, and
// INFO counts channels and patterns; all go back once unsubscribed and
// once the subscriber's connection ends.
func TestPubsubClientListAndInfo(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	s, o := dialRaw(t, addr), dialRaw(t, addr)
	sid := s.mustDo(t, "CLIENT", "ID").str
	s.mustDo(t, "SUBSCRIBE", "a", "b")
	s.read()
	s.mustDo(t, "PSUBSCRIBE", "p*")
	line := o.mustDo(t, "CLIENT", "LIST", "ID", sid).str
	if !strings.Contains(line, " flags=P db=0 sub=2 psub=1 ssub=0 ") {
		t.Fatalf("CLIENT LIST: %s", line)
	}
	if l := o.mustDo(t, "CLIENT", "LIST", "TYPE", "pubsub").str; !strings.HasPrefix(l, "id="+sid+" ") || strings.Count(l, "\n") != 1 {
		t.Fatalf("TYPE pubsub: %q", l)
	}
	if l := o.mustDo(t, "CLIENT", "LIST", "TYPE", "normal").str; strings.Contains(l, "id="+sid+" ") || strings.Count(l, "\n") != 1 {
		t.Fatalf("TYPE normal: %q", l)
	}
	info := o.mustDo(t, "INFO", "stats").str
	if !strings.Contains(info, "\r\npubsub_channels:2\r\npubsub_patterns:1\r\n") {
		t.Fatalf("INFO stats: %s", info)
	}
	s.nc.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(o.mustDo(t, "INFO", "stats").str, "\r\npubsub_channels:0\r\npubsub_patterns:0\r\n") {
		if time.Now().After(deadline) {
			t.Fatal("subscriptions outlive the connection")
		}
		runtime.Gosched()
	}
}

// TestTrackingRedirectRESP2: a RESP2 REDIRECT target subscribed to
// __redis__:invalidate gets invalidations as messages of that channel,
// flushes with a null payload, as Redis 7.0.15 sends them.
func TestTrackingRedirectRESP2(t *testing.T) {
	_, addr := servertest.Start(t, server.Config{})
	a, b, tg := dialRaw(t, addr), dialRaw(t, addr), dialRaw(t, addr)
	tid := tg.mustDo(t, "CLIENT", "ID").str
	tg.mustDo(t, "SUBSCRIBE", "__redis__:invalidate")
	if v := a.mustDo(t, "CLIENT", "TRACKING", "on", "REDIRECT", tid); v.str != "OK" {
		t.Fatalf("CLIENT TRACKING: %v", v)
	}
	a.mustDo(t, "GET", "k")
	b.mustDo(t, "SET", "k", "1")
	want := "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$1\r\nk\r\n"
	if v, err := tg.read(); err != nil || string(v.encode(nil)) != want {
		t.Fatalf("target got %q, %v; want %q", v.encode(nil), err, want)
	}
	b.mustDo(t, "FLUSHALL")
	want = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n"
	if v, err := tg.read(); err != nil || string(v.encode(nil)) != want {
		t.Fatalf("target got %q, %v; want %q", v.encode(nil), err, want)
	}
}

// startWithHooks runs a commands.Server with cfg behind a resp.Server on
// 127.0.0.1 (servertest.Start builds the commands.Config itself).
func startWithHooks(t *testing.T, cfg commands.Config) string {
	t.Helper()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cmds, err := commands.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rs := resp.NewServer(resp.Config{}, cmds)
	cmds.SetNetwork(rs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { rs.Serve(ln); close(done) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rs.Shutdown(ctx)
		<-done
	})
	return ln.Addr().String()
}

// waitClosed fails unless the server closes c within respTimeout.
func waitClosed(t *testing.T, name string, c *rawConn) {
	t.Helper()
	if ok, err := c.closedAfterData(); err != nil || !ok {
		t.Fatalf("%s: not closed (%v)", name, err)
	}
}

// TestClientKill: each filter of CLIENT KILL selects the clients it
// names (ID, ADDR, LADDR, TYPE normal|pubsub, USER, MAXAGE), SKIPME
// spares the caller by default and not with "no", the old form kills the
// caller after its +OK, and TYPE master|replica|slave go to
// Config.KillReplicationLinks.
func TestClientKill(t *testing.T) {
	var kinds []string
	var mu sync.Mutex
	addr := startWithHooks(t, commands.Config{KillReplicationLinks: func(kind string) int {
		mu.Lock()
		defer mu.Unlock()
		kinds = append(kinds, kind)
		return 2
	}})
	me := dialRaw(t, addr)
	do := func(want string, args ...string) {
		t.Helper()
		want += "\r\n"
		if got := string(me.mustDo(t, args...).encode(nil)); got != want {
			t.Fatalf("%q: %q, want %q", args, got, want)
		}
	}
	field := func(c *rawConn, name string) string {
		for _, f := range strings.Fields(c.mustDo(t, "CLIENT", "INFO").str) {
			if v, ok := strings.CutPrefix(f, name+"="); ok {
				return v
			}
		}
		t.Fatalf("CLIENT INFO has no %s", name)
		return ""
	}

	v := dialRaw(t, addr)
	do(":1", "CLIENT", "KILL", "ID", field(v, "id"))
	waitClosed(t, "ID", v)
	do(":0", "CLIENT", "KILL", "ID", field(me, "id")) // SKIPME yes by default

	v = dialRaw(t, addr)
	do("+OK", "CLIENT", "KILL", field(v, "addr")) // old form
	waitClosed(t, "old form", v)
	do("-ERR No such client", "CLIENT", "KILL", "127.0.0.1:1")

	v = dialRaw(t, addr)
	do(":1", "CLIENT", "KILL", "ADDR", field(v, "addr"))
	waitClosed(t, "ADDR", v)

	v, w := dialRaw(t, addr), dialRaw(t, addr)
	field(w, "id") // w is served (registered) before the kill counts it
	do(":2", "CLIENT", "KILL", "LADDR", field(v, "laddr"))
	waitClosed(t, "LADDR", v)
	waitClosed(t, "LADDR", w)

	n, ps := dialRaw(t, addr), dialRaw(t, addr)
	ps.mustDo(t, "SUBSCRIBE", "x")
	n.mustDo(t, "PING")
	do(":1", "CLIENT", "KILL", "TYPE", "pubsub")
	waitClosed(t, "TYPE pubsub", ps)
	do(":1", "CLIENT", "KILL", "TYPE", "normal")
	waitClosed(t, "TYPE normal", n)

	v = dialRaw(t, addr)
	v.mustDo(t, "PING")
	do(":0", "CLIENT", "KILL", "MAXAGE", "1000000")
	do(":1", "CLIENT", "KILL", "USER", "default")
	waitClosed(t, "USER", v)

	do(":2", "CLIENT", "KILL", "TYPE", "master")
	do(":2", "CLIENT", "KILL", "TYPE", "replica")
	do(":2", "CLIENT", "KILL", "TYPE", "SLAVE")
	do(":0", "CLIENT", "KILL", "TYPE", "master", "ID", "5") // links have no id
	mu.Lock()
	if got := strings.Join(kinds, ","); got != "master,replica,replica" {
		t.Fatalf("KillReplicationLinks got %s", got)
	}
	mu.Unlock()

	do(":1", "CLIENT", "KILL", "ID", field(me, "id"), "SKIPME", "no")
	waitClosed(t, "SKIPME no", me)
}

// TestClientKillInMulti: Sentinel's failover transaction (here without
// SLAVEOF and CONFIG REWRITE): the CLIENT KILLs are queued, EXEC runs
// them, every other normal and subscribed client is closed, and the
// caller keeps its connection and gets the EXEC reply. In RESP2 and
// RESP3, in both serving modes.
func TestClientKillInMulti(t *testing.T) {
	for _, loops := range []int{-1, 1} {
		for _, proto := range []string{"2", "3"} {
			t.Run(fmt.Sprintf("EventLoops=%d/RESP%s", loops, proto), func(t *testing.T) {
				_, addr := servertest.Start(t, server.Config{EventLoops: loops})
				me := dialRaw(t, addr)
				me.mustDo(t, "HELLO", proto)
				var normal, pubsub []*rawConn
				for i := 0; i < 3; i++ {
					c := dialRaw(t, addr)
					c.mustDo(t, "PING")
					normal = append(normal, c)
					p := dialRaw(t, addr)
					p.mustDo(t, "HELLO", proto)
					p.mustDo(t, "SUBSCRIBE", "__sentinel__:hello")
					pubsub = append(pubsub, p)
				}
				for _, cmd := range [][]string{{"MULTI"}, {"CLIENT", "KILL", "TYPE", "normal"}, {"CLIENT", "KILL", "TYPE", "pubsub"}} {
					me.mustDo(t, cmd...)
				}
				want := "*2\r\n:3\r\n:3\r\n"
				if got := string(me.mustDo(t, "EXEC").encode(nil)); got != want {
					t.Fatalf("EXEC: %q, want %q", got, want)
				}
				for i := range normal {
					waitClosed(t, "normal", normal[i])
					waitClosed(t, "pubsub", pubsub[i])
				}
				if got := me.mustDo(t, "PING").str; got != "PONG" {
					t.Fatalf("the caller after EXEC: %q", got)
				}
			})
		}
	}
}

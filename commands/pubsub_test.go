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
	"github.com/cellserver/cellserver/internal/resptest"
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
				c       *resptest.Conn
				resp3   bool
				pattern string // "" : channel subscriber of ch<i>
				ch      int
			}
			var subs []*sub
			for i := 0; i < 6; i++ {
				s := &sub{c: resptest.MustDial(t, addr), resp3: i%2 == 1, ch: i % channels}
				if i >= 4 {
					s.pattern = "ch*" // every channel
				}
				if s.resp3 {
					s.c.MustDo(t, "HELLO", "3")
				}
				if s.pattern != "" {
					s.c.MustDo(t, "PSUBSCRIBE", s.pattern)
				} else {
					s.c.MustDo(t, "SUBSCRIBE", "ch"+strconv.Itoa(s.ch))
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
					c := resptest.MustDial(t, addr)
					for i := 0; i < perPub; i++ {
						ch := "ch" + strconv.Itoa(i%channels)
						v, err := c.Do("PUBLISH", ch, fmt.Sprintf("%d:%d", p, i))
						if err != nil || v.Kind != ':' {
							errs <- fmt.Errorf("PUBLISH: %v %v", v, err)
							return
						}
						n, _ := strconv.ParseInt(v.Str, 10, 64)
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
						v, err := s.c.Read()
						if err != nil {
							errs <- fmt.Errorf("sub %d after %d messages: %v", si, got, err)
							return
						}
						kind := byte('*')
						if s.resp3 {
							kind = '>'
						}
						e := v.Elems
						if v.Kind != kind || len(e) < 3 {
							errs <- fmt.Errorf("sub %d: %v", si, v)
							return
						}
						if s.pattern != "" && (e[0].Str != "pmessage" || e[1].Str != s.pattern || len(e) != 4) ||
							s.pattern == "" && (e[0].Str != "message" || e[1].Str != "ch"+strconv.Itoa(s.ch)) {
							errs <- fmt.Errorf("sub %d: %v", si, v)
							return
						}
						var p, i int
						fmt.Sscanf(e[len(e)-1].Str, "%d:%d", &p, &i)
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
			slow, fast, pub := resptest.MustDial(t, addr), resptest.MustDial(t, addr), resptest.MustDial(t, addr)
			slow.MustDo(t, "SUBSCRIBE", "ch")
			fast.MustDo(t, "SUBSCRIBE", "ch")
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
				v := pub.MustDo(t, "PUBLISH", "ch", payload)
				sent++
				if _, err := fast.Read(); err != nil {
					t.Fatal(err)
				}
				if v.Str == "1" {
					break // only the fast subscriber is left
				}
				if v.Str != "2" || i > 1024 {
					t.Fatalf("PUBLISH %d: %v", i, v)
				}
			}
			if ok, err := closedAfterData(slow); err != nil || !ok {
				t.Fatalf("slow subscriber: closed %v, %v", ok, err)
			}
			t.Logf("the slow subscriber was closed after %d messages of 64 KiB", sent)
		})
	}
}

// closedAfterData reads until the server closes the connection.
func closedAfterData(c *resptest.Conn) (bool, error) {
	c.C.SetReadDeadline(time.Now().Add(resptest.Timeout))
	_, err := io.Copy(io.Discard, c.R)
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
	s, o := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	sid := s.MustDo(t, "CLIENT", "ID").Str
	s.MustDo(t, "SUBSCRIBE", "a", "b")
	s.Read()
	s.MustDo(t, "PSUBSCRIBE", "p*")
	line := o.MustDo(t, "CLIENT", "LIST", "ID", sid).Str
	if !strings.Contains(line, " flags=P db=0 sub=2 psub=1 ssub=0 ") {
		t.Fatalf("CLIENT LIST: %s", line)
	}
	if l := o.MustDo(t, "CLIENT", "LIST", "TYPE", "pubsub").Str; !strings.HasPrefix(l, "id="+sid+" ") || strings.Count(l, "\n") != 1 {
		t.Fatalf("TYPE pubsub: %q", l)
	}
	if l := o.MustDo(t, "CLIENT", "LIST", "TYPE", "normal").Str; strings.Contains(l, "id="+sid+" ") || strings.Count(l, "\n") != 1 {
		t.Fatalf("TYPE normal: %q", l)
	}
	info := o.MustDo(t, "INFO", "stats").Str
	if !strings.Contains(info, "\r\npubsub_channels:2\r\npubsub_patterns:1\r\n") {
		t.Fatalf("INFO stats: %s", info)
	}
	s.C.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(o.MustDo(t, "INFO", "stats").Str, "\r\npubsub_channels:0\r\npubsub_patterns:0\r\n") {
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
	a, b, tg := resptest.MustDial(t, addr), resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	tid := tg.MustDo(t, "CLIENT", "ID").Str
	tg.MustDo(t, "SUBSCRIBE", "__redis__:invalidate")
	if v := a.MustDo(t, "CLIENT", "TRACKING", "on", "REDIRECT", tid); v.Str != "OK" {
		t.Fatalf("CLIENT TRACKING: %v", v)
	}
	a.MustDo(t, "GET", "k")
	b.MustDo(t, "SET", "k", "1")
	want := "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$1\r\nk\r\n"
	if v, err := tg.Read(); err != nil || string(v.Encode(nil)) != want {
		t.Fatalf("target got %q, %v; want %q", v.Encode(nil), err, want)
	}
	b.MustDo(t, "FLUSHALL")
	want = "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n$-1\r\n"
	if v, err := tg.Read(); err != nil || string(v.Encode(nil)) != want {
		t.Fatalf("target got %q, %v; want %q", v.Encode(nil), err, want)
	}
}

// startWithHooks runs a commands.Service with cfg behind a resp.Server on
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

// waitClosed fails unless the server closes c within resptest.Timeout.
func waitClosed(t *testing.T, name string, c *resptest.Conn) {
	t.Helper()
	if ok, err := closedAfterData(c); err != nil || !ok {
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
	me := resptest.MustDial(t, addr)
	do := func(want string, args ...string) {
		t.Helper()
		want += "\r\n"
		if got := string(me.MustDo(t, args...).Encode(nil)); got != want {
			t.Fatalf("%q: %q, want %q", args, got, want)
		}
	}
	field := func(c *resptest.Conn, name string) string {
		for _, f := range strings.Fields(c.MustDo(t, "CLIENT", "INFO").Str) {
			if v, ok := strings.CutPrefix(f, name+"="); ok {
				return v
			}
		}
		t.Fatalf("CLIENT INFO has no %s", name)
		return ""
	}

	v := resptest.MustDial(t, addr)
	do(":1", "CLIENT", "KILL", "ID", field(v, "id"))
	waitClosed(t, "ID", v)
	do(":0", "CLIENT", "KILL", "ID", field(me, "id")) // SKIPME yes by default

	v = resptest.MustDial(t, addr)
	do("+OK", "CLIENT", "KILL", field(v, "addr")) // old form
	waitClosed(t, "old form", v)
	do("-ERR No such client", "CLIENT", "KILL", "127.0.0.1:1")

	v = resptest.MustDial(t, addr)
	do(":1", "CLIENT", "KILL", "ADDR", field(v, "addr"))
	waitClosed(t, "ADDR", v)

	v, w := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	field(w, "id") // w is served (registered) before the kill counts it
	do(":2", "CLIENT", "KILL", "LADDR", field(v, "laddr"))
	waitClosed(t, "LADDR", v)
	waitClosed(t, "LADDR", w)

	n, ps := resptest.MustDial(t, addr), resptest.MustDial(t, addr)
	ps.MustDo(t, "SUBSCRIBE", "x")
	n.MustDo(t, "PING")
	do(":1", "CLIENT", "KILL", "TYPE", "pubsub")
	waitClosed(t, "TYPE pubsub", ps)
	do(":1", "CLIENT", "KILL", "TYPE", "normal")
	waitClosed(t, "TYPE normal", n)

	v = resptest.MustDial(t, addr)
	v.MustDo(t, "PING")
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
				me := resptest.MustDial(t, addr)
				me.MustDo(t, "HELLO", proto)
				var normal, pubsub []*resptest.Conn
				for i := 0; i < 3; i++ {
					c := resptest.MustDial(t, addr)
					c.MustDo(t, "PING")
					normal = append(normal, c)
					p := resptest.MustDial(t, addr)
					p.MustDo(t, "HELLO", proto)
					p.MustDo(t, "SUBSCRIBE", "__sentinel__:hello")
					pubsub = append(pubsub, p)
				}
				for _, cmd := range [][]string{{"MULTI"}, {"CLIENT", "KILL", "TYPE", "normal"}, {"CLIENT", "KILL", "TYPE", "pubsub"}} {
					me.MustDo(t, cmd...)
				}
				want := "*2\r\n:3\r\n:3\r\n"
				if got := string(me.MustDo(t, "EXEC").Encode(nil)); got != want {
					t.Fatalf("EXEC: %q, want %q", got, want)
				}
				for i := range normal {
					waitClosed(t, "normal", normal[i])
					waitClosed(t, "pubsub", pubsub[i])
				}
				if got := me.MustDo(t, "PING").Str; got != "PONG" {
					t.Fatalf("the caller after EXEC: %q", got)
				}
			})
		}
	}
}

package cluster

import (
	"bufio"
	"fmt"
	"github.com/cellserver/cellserver/internal/topotest"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cellserver/cellserver/internal/testwait"
)

// peer is a fake node: it accepts links, answers the handshake and
// records every command after it.
type peer struct {
	t  *testing.T
	ln net.Listener

	mu    sync.Mutex
	cmds  [][]string // every command, handshake included
	conns []net.Conn
	// stall, when set, makes the peer stop reading after the handshake
	// until it is closed.
	stall chan struct{}
}

func newPeer(t *testing.T) *peer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &peer{t: t, ln: ln}
	t.Cleanup(func() { p.close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
			go p.serve(c)
		}
	}()
	return p
}

func (p *peer) close() {
	p.ln.Close()
	p.dropConns()
}

// dropConns closes every accepted connection (the node restarts).
func (p *peer) dropConns() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *peer) node(id string) Node {
	a := p.ln.Addr().(*net.TCPAddr)
	return Node{ID: topotest.ID(id), IP: "127.0.0.1", Port: a.Port}
}

func (p *peer) serve(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		args, err := readCommand(br)
		if err != nil {
			return
		}
		p.mu.Lock()
		p.cmds = append(p.cmds, args)
		stall := p.stall
		p.mu.Unlock()
		var reply string
		switch strings.ToUpper(args[0]) {
		case "AUTH":
			reply = "+OK\r\n"
		case "PING":
			reply = "+PONG\r\n"
		default:
			reply = ":0\r\n"
		}
		if _, err := io.WriteString(c, reply); err != nil {
			return
		}
		if stall != nil && args[0] == "PING" {
			<-stall // reads no more meanwhile: the link's socket buffers fill
		}
	}
}

func readCommand(br *bufio.Reader) ([]string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || line[0] != '*' {
		return nil, fmt.Errorf("bad command line %q", line)
	}
	args := make([]string, n)
	for i := range args {
		h, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		l, _ := strconv.Atoi(strings.TrimSpace(h[1:]))
		b := make([]byte, l+2)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:l])
	}
	return args, nil
}

// published returns the CELLCLUSTER commands received, as "SUB channel
// message".
func (p *peer) published() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.cmds {
		if len(c) == 4 && c[0] == "CELLCLUSTER" {
			out = append(out, c[1]+" "+c[2]+" "+c[3])
		}
	}
	return out
}

func (p *peer) commands(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.cmds {
		if c[0] == name {
			n++
		}
	}
	return n
}

// install makes a State whose topology is shard 0: me (master) and
// shardPeers (replicas), shard 1: others[0] (master) and the rest of
// others (replicas).
func install(t *testing.T, s *State, me Node, shardPeers, others []Node) {
	t.Helper()
	js := fmt.Sprintf(`[{"slot_ranges":[{"start":0,"end":8191}],"master":%s,"replicas":%s},`+
		`{"slot_ranges":[{"start":8192,"end":16383}],"master":%s,"replicas":%s}]`,
		nodeJSON(me), nodesJSON(shardPeers), nodeJSON(others[0]), nodesJSON(others[1:]))
	top, err := Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Install(top); err != nil {
		t.Fatal(err)
	}
}

func nodeJSON(n Node) string {
	return fmt.Sprintf(`{"id":%q,"ip":%q,"port":%d}`, n.ID, n.IP, n.Port)
}

func nodesJSON(ns []Node) string {
	var parts []string
	for _, n := range ns {
		parts = append(parts, nodeJSON(n))
	}
	return "[" + strings.Join(parts, ",") + "]"
}

func linkOf(b *Bus, id string) LinkStats {
	for _, l := range b.Links() {
		if l.ID == topotest.ID(id) {
			return l
		}
	}
	return LinkStats{}
}

func waitUp(t *testing.T, b *Bus, ids ...string) {
	t.Helper()
	testwait.For(t, 10*time.Second, "links up", func() (bool, string) {
		for _, id := range ids {
			if !linkOf(b, id).Up {
				return false, fmt.Sprint(b.Links())
			}
		}
		return true, ""
	})
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// TestBusForwards: PUBLISH goes to every other node, SPUBLISH to the
// other nodes of this node's shard only, each in publishing order, with
// AUTH user password first; the counts add up.
func TestBusForwards(t *testing.T) {
	replica, other1, other2 := newPeer(t), newPeer(t), newPeer(t)
	s, err := New(Config{NodeID: topotest.ID("me")})
	if err != nil {
		t.Fatal(err)
	}
	me := Node{ID: topotest.ID("me"), IP: "127.0.0.1", Port: 1}
	install(t, s, me, []Node{replica.node("r")}, []Node{other1.node("o1"), other2.node("o2")})
	b := NewBus(BusConfig{State: s, User: "u", Password: "pw", Logger: quietLogger()})
	b.Start()
	defer b.Close()
	waitUp(t, b, "r", "o1", "o2")

	const n = 500
	var wantAll []string
	for i := range n {
		msg := []byte(fmt.Sprintf("m%d", i))
		b.Publish([]byte("ch"), msg)
		wantAll = append(wantAll, "PUBLISH ch "+string(msg))
		if i%2 == 0 {
			b.SPublish([]byte("sch"), msg)
			wantAll = append(wantAll, "SPUBLISH sch "+string(msg))
		}
	}
	var wantOthers []string
	for _, w := range wantAll {
		if strings.HasPrefix(w, "PUBLISH ") {
			wantOthers = append(wantOthers, w)
		}
	}
	for _, c := range []struct {
		p    *peer
		want []string
	}{{replica, wantAll}, {other1, wantOthers}, {other2, wantOthers}} {
		testwait.For(t, 10*time.Second, "messages forwarded", func() (bool, string) {
			got := c.p.published()
			return len(got) >= len(c.want), fmt.Sprintf("%d of %d", len(got), len(c.want))
		})
		got := c.p.published()
		if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
			t.Fatalf("peer got %d commands, want %d in order; first got %q", len(got), len(c.want), got[:min(3, len(got))])
		}
		if a := c.p.commands("AUTH"); a != 1 {
			t.Errorf("AUTH sent %d times", a)
		}
	}
	if l := linkOf(b, "r"); l.Forwarded != int64(n+n/2) || l.Dropped != 0 {
		t.Errorf("replica link: %+v", l)
	}
	if l := linkOf(b, "o1"); l.Forwarded != n || l.Dropped != 0 {
		t.Errorf("other link: %+v", l)
	}
	// A message longer than MaxMessage is not forwarded: dropped, counted.
	b.cfg.MaxMessage = 4
	b.Publish([]byte("ch"), []byte("too long"))
	if l := linkOf(b, "o1"); l.Dropped != 1 {
		t.Errorf("after a too long message: %+v", l)
	}
}

// TestBusReconnectsAndFollowsTopology: a link whose connection drops
// reconnects (messages published meanwhile are dropped, counted), and a
// topology without a node closes its link.
func TestBusReconnectsAndFollowsTopology(t *testing.T) {
	p1, p2 := newPeer(t), newPeer(t)
	s, err := New(Config{NodeID: topotest.ID("me")})
	if err != nil {
		t.Fatal(err)
	}
	me := Node{ID: topotest.ID("me"), IP: "127.0.0.1", Port: 1}
	install(t, s, me, nil, []Node{p1.node("p1"), p2.node("p2")})
	b := NewBus(BusConfig{State: s, Logger: quietLogger()})
	b.Start()
	defer b.Close()
	waitUp(t, b, "p1", "p2")
	if a := p1.commands("AUTH"); a != 0 {
		t.Errorf("AUTH sent without a password")
	}
	b.Publish([]byte("ch"), []byte("before"))
	testwait.For(t, 10*time.Second, "first message", func() (bool, string) { return len(p1.published()) == 1, "" })

	p1.dropConns()
	testwait.For(t, 10*time.Second, "link to p1 down", func() (bool, string) { return !linkOf(b, "p1").Up, "" })
	b.Publish([]byte("ch"), []byte("while down"))
	if l := linkOf(b, "p1"); l.Dropped != 1 {
		t.Errorf("p1 link while down: %+v", l)
	}
	waitUp(t, b, "p1")
	b.Publish([]byte("ch"), []byte("after"))
	testwait.For(t, 10*time.Second, "message after the reconnection", func() (bool, string) {
		got := p1.published()
		return len(got) == 2 && got[1] == "PUBLISH ch after", fmt.Sprint(got)
	})
	if got := p2.published(); len(got) != 3 {
		t.Errorf("p2 (never down) got %v", got)
	}

	// p2 leaves the topology (its slots go to p1): its link closes.
	top, err := Parse([]byte(fmt.Sprintf(`[{"slot_ranges":[{"start":0,"end":8191}],"master":%s,"replicas":[]},`+
		`{"slot_ranges":[{"start":8192,"end":16383}],"master":%s,"replicas":[]}]`, nodeJSON(me), nodeJSON(p1.node("p1")))))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Install(top); err != nil {
		t.Fatal(err)
	}
	if ls := b.Links(); len(ls) != 1 || ls[0].ID != topotest.ID("p1") {
		t.Fatalf("links after p2 left: %+v", ls)
	}
	b.Publish([]byte("ch"), []byte("p2 gone"))
	testwait.For(t, 10*time.Second, "p1 gets it", func() (bool, string) { return len(p1.published()) == 3, "" })
	if got := p2.published(); len(got) != 3 {
		t.Errorf("p2 got a message after leaving the topology: %v", got)
	}
}

// TestBusQueueBound: a peer that stops reading makes the link's queue
// fill; past QueueLimit bytes messages are dropped and counted, never
// queued, and forwarded + dropped is every message published.
func TestBusQueueBound(t *testing.T) {
	p := newPeer(t)
	release := make(chan struct{})
	p.stall = release
	s, err := New(Config{NodeID: topotest.ID("me")})
	if err != nil {
		t.Fatal(err)
	}
	install(t, s, Node{ID: topotest.ID("me"), IP: "127.0.0.1", Port: 1}, nil, []Node{p.node("p")})
	const limit = 64 << 10
	b := NewBus(BusConfig{State: s, QueueLimit: limit, Logger: quietLogger()})
	b.Start()
	defer b.Close()
	waitUp(t, b, "p")
	msg := []byte(strings.Repeat("x", 1000))
	published := 0
	// The socket buffers (a few MB on loopback) fill first, then the
	// queue: publish until messages are dropped.
	for linkOf(b, "p").Dropped < 100 && published < 1_000_000 {
		b.Publish([]byte("ch"), msg)
		published++
		if q := linkOf(b, "p").QueuedBytes; q > limit {
			t.Fatalf("queued %d bytes, over the limit of %d", q, limit)
		}
	}
	l := linkOf(b, "p")
	if l.Dropped < 100 {
		t.Fatalf("nothing dropped after %d messages: %+v", published, l)
	}
	t.Logf("%d published: %d forwarded (in socket buffers), %d dropped, %d bytes queued", published, l.Forwarded, l.Dropped, l.QueuedBytes)
	// The peer reads again: everything not dropped arrives, in order.
	close(release)
	testwait.For(t, 20*time.Second, "forwarded + dropped = published", func() (bool, string) {
		l := linkOf(b, "p")
		return l.Forwarded+l.Dropped == int64(published) && len(p.published()) == int(l.Forwarded), fmt.Sprintf("%+v, peer got %d", l, len(p.published()))
	})
}

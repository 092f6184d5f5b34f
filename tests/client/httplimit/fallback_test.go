package httplimittests

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cellservertest"
	"github.com/cellserver/cellserver/client/httplimit"
	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/internal/topotest"
	"github.com/cellserver/cellserver/server"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// go-redis logs every failed dial; the tests here fail dials on purpose.
func init() { redis.SetLogger(quietLogger{}) }

// deadAddr returns the address of a listener already closed: dials are
// refused.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// proxy forwards connections to a backend while up; down, it closes them.
type proxy struct {
	ln      net.Listener
	backend string
	mu      sync.Mutex // guards up, conns
	up      bool
	conns   map[net.Conn]bool
}

func newProxy(t *testing.T, backend string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, backend: backend, up: true, conns: map[net.Conn]bool{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if !p.up {
				p.mu.Unlock()
				c.Close()
				continue
			}
			b, err := net.Dial("tcp", backend)
			if err != nil {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.conns[c], p.conns[b] = true, true
			p.mu.Unlock()
			go func() { io.Copy(b, c); b.Close() }()
			go func() { io.Copy(c, b); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.set(false) })
	return p
}

func (p *proxy) set(up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = up
	if !up {
		for c := range p.conns {
			c.Close()
		}
		clear(p.conns)
	}
}

// The breaker recovers by itself once cellserver answers a probe, and the
// Local fallback's state is dropped then.
func TestBreakerRecovery(t *testing.T) {
	clk := startServer(t)
	p := newProxy(t, clk.Addr())
	e := envOn(t, p.ln.Addr().String(), clk)
	e.build(httplimit.Options{Limits: []httplimit.Limit{perIP(10, 10*s, httplimit.GCRA)}, OnError: httplimit.Local, LocalShare: 0.3})

	want(t, "up", e.do(ipA), 200, "RateLimit", `"per-ip";r=9;t=1`)
	p.set(false)
	want(t, "down", e.do(ipA), 200, "RateLimit", `"per-ip";r=2;t=4`)
	if d := e.last(); d.Source != httplimit.SourceLocal || d.Err == nil {
		t.Errorf("decision %+v", d)
	}
	want(t, "down, no call", e.do(ipA), 200, "RateLimit", `"per-ip";r=1;t=7`)
	p.set(true)
	want(t, "up again, before the probe", e.do(ipA), 200, "RateLimit", `"per-ip";r=0;t=10`)
	if st := e.m.Stats(); st.RoundTrips != 2 || st.FallbackLocal != 3 || st.LocalKeys != 1 {
		t.Fatalf("stats %+v", st)
	}
	clk.Advance(1 * s)
	want(t, "probe", e.do(ipA), 200, "RateLimit", `"per-ip";r=9;t=1`) // server: TAT t0+1s passed
	if d := e.last(); d.Source != httplimit.SourceServer || d.Outcome != httplimit.Allowed {
		t.Errorf("decision %+v", d)
	}
	st := e.m.Stats()
	if st.Probes != 1 || st.Recoveries != 1 || st.RoundTrips != 3 || st.LocalKeys != 0 {
		t.Errorf("stats %+v", st)
	}
	want(t, "after", e.do(ipA), 200, "RateLimit", `"per-ip";r=8;t=2`)
	if st := e.m.Stats(); st.RoundTrips != 4 || st.Probes != 1 {
		t.Errorf("stats %+v", st)
	}
}

// In a cluster, keys of several limits in different slots get CROSSSLOT,
// reported as ErrCrossSlot; a hash tag in Prefix puts them together.
func TestCrossSlot(t *testing.T) {
	srv := startServer(t, cellservertest.WithConfig(func(c *server.Config) { c.ClusterEnabled, c.ClusterNodeID = true, topotest.ID("node-1") }))
	addr := srv.Addr()
	host, port, _ := net.SplitHostPort(addr)
	pn, _ := strconv.Atoi(port)
	shards := []cluster.Shard{{SlotRanges: []cluster.SlotRange{{Start: 0, End: 16383}},
		Master: cluster.Node{ID: srv.Server().Cluster().MyID(), IP: host, Port: pn}, Replicas: []cluster.Node{}}}
	cfg, _ := json.Marshal(shards)
	e := envOn(t, addr, srv)
	if err := e.rdb.Do(bg, "CELLCLUSTER", "CONFIG", string(cfg)).Err(); err != nil {
		t.Fatal(err)
	}
	limits := []httplimit.Limit{perIP(5, 10*s, httplimit.GCRA), {Name: "global", Quota: 100, Window: 10 * s, Key: httplimit.Global()}}
	e.build(httplimit.Options{Limits: limits})
	want(t, "crossslot", e.do(ipA), 200)
	if d := e.last(); d.Outcome != httplimit.Error || !errors.Is(d.Err, httplimit.ErrCrossSlot) {
		t.Errorf("decision %+v", d)
	}
	t.Logf("CROSSSLOT reported as: %v", e.last().Err)
	e.build(httplimit.Options{Limits: limits, Prefix: "{rl}:"})
	want(t, "hash tag", e.do(ipA), 200, "RateLimit", `"per-ip";r=4;t=2, "global";r=99;t=1`)
}

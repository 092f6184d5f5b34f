package httplimittests

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/client/httplimit"
	"github.com/cellserver/cellserver/internal/servertest"
)

// silentAddr returns the address of a listener that accepts connections
// and never reads or writes: a server that hangs.
func silentAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

// envAt is an env with a manual clock at t0 whose go-redis client
// (default options: no ContextTimeoutEnabled) talks to addr, where no
// cellserver answers.
func envAt(t *testing.T, addr string, o httplimit.Options) *env {
	if o.Deadline == 0 {
		o.Deadline = httplimit.DefaultDeadline // no server involved: nothing to wait for
	}
	e := envOn(t, addr, servertest.NewClock(t0))
	e.build(o)
	return e
}

func TestFallbackOpen(t *testing.T) {
	e := envAt(t, deadAddr(t), httplimit.Options{Limits: []httplimit.Limit{perIP(5, 10*s, httplimit.GCRA)}})
	want(t, "1st", e.do(ipA), 200, "RateLimit-Policy", `"per-ip";q=5;w=10`, "RateLimit", "", "Retry-After", "")
	if d := e.last(); d.Outcome != httplimit.Fallback || d.Source != httplimit.SourceOpen || d.Err == nil || d.Refused {
		t.Errorf("decision %+v", d)
	}
	for range 5 {
		want(t, "breaker open", e.do(ipA), 200)
	}
	if d := e.last(); d.Outcome != httplimit.Fallback || d.Err != nil {
		t.Errorf("decision without a call %+v", d)
	}
	st := e.m.Stats()
	if st.RoundTrips != 1 || st.Unanswered != 1 || st.FallbackOpen != 6 || st.Allowed != 0 {
		t.Errorf("stats %+v", st)
	}
	e.clk.Advance(1 * s) // the probe interval: one request tries again
	e.do(ipA)
	if st := e.m.Stats(); st.RoundTrips != 2 || st.Probes != 1 || st.Unanswered != 2 {
		t.Errorf("after the probe: %+v", st)
	}
}

func TestFallbackClosed(t *testing.T) {
	e := envAt(t, deadAddr(t), httplimit.Options{Limits: []httplimit.Limit{perIP(5, 10*s, httplimit.GCRA)}, OnError: httplimit.Closed, ProbeInterval: 3 * s})
	w := e.do(ipA)
	want(t, "1st", w, 503, "Retry-After", "3", "RateLimit-Policy", `"per-ip";q=5;w=10`, "Content-Type", "application/json")
	if b := w.Body.String(); b != `{"error":"rate limiter unavailable","retry_after":3}`+"\n" {
		t.Errorf("503 body %q", b)
	}
	e.clk.Advance(2500 * ms)
	want(t, "before the probe", e.do(ipA), 503, "Retry-After", "1")
	if d := e.last(); d.Outcome != httplimit.Fallback || d.Source != httplimit.SourceClosed || !d.Refused || d.RetryAfter != 500*ms {
		t.Errorf("decision %+v", d)
	}
	if st := e.m.Stats(); st.RoundTrips != 1 || st.FallbackClosed != 2 {
		t.Errorf("stats %+v", st)
	}
}

// httplimit.Local: at one instant each key admits exactly its share (30% of 10),
// whatever the algorithm, all or nothing across limits.
func TestFallbackLocal(t *testing.T) {
	for _, alg := range []httplimit.Algorithm{httplimit.GCRA, httplimit.Fixed, httplimit.Sliding, httplimit.SlidingLog} {
		t.Run(alg.String(), func(t *testing.T) {
			global := httplimit.Limit{Name: "global", Quota: 50, Window: 10 * s, Algorithm: alg, Key: httplimit.Global()}
			e := envAt(t, deadAddr(t), httplimit.Options{Limits: []httplimit.Limit{perIP(10, 10*s, alg), global}, OnError: httplimit.Local, LocalShare: 0.3})
			admitted := map[string]int{}
			for i := range 40 {
				ip := []string{ipA, ipB}[i%2]
				if w := e.do(ip); w.Code == 200 {
					admitted[ip]++
				} else if w.Code != 429 || w.Header().Get("Retry-After") == "" {
					t.Fatalf("request %d: %d %v", i, w.Code, w.Header())
				}
			}
			// per-ip admits 3 per key; global (15 locally) is not reached.
			if admitted[ipA] != 3 || admitted[ipB] != 3 {
				t.Errorf("admitted %v, want 3 each", admitted)
			}
			st := e.m.Stats()
			if st.FallbackLocal != 40 || st.LocalLimited != 34 || st.RoundTrips != 1 {
				t.Errorf("stats %+v", st)
			}
			d := e.last()
			if d.Outcome != httplimit.Fallback || d.Source != httplimit.SourceLocal || !d.Refused || d.Limit != "per-ip" || d.Results[1].Remaining != 15-6-1 { // as if charged: nothing was
				t.Errorf("decision %+v", d)
			}
		})
	}
	// Headers of a local decision: httplimit.GCRA 3 per 10 s locally.
	e := envAt(t, deadAddr(t), httplimit.Options{Limits: []httplimit.Limit{perIP(10, 10*s, httplimit.GCRA)}, OnError: httplimit.Local, LocalShare: 0.3})
	want(t, "local", e.do(ipA), 200, "RateLimit-Policy", `"per-ip";q=10;w=10`, "RateLimit", `"per-ip";r=2;t=4`)
	// A share below one unit still admits one.
	e.build(httplimit.Options{Limits: []httplimit.Limit{perIP(5, 10*s, httplimit.Fixed)}, OnError: httplimit.Local, LocalShare: 0.01, Deadline: httplimit.DefaultDeadline})
	want(t, "min 1", e.do(ipA), 200, "RateLimit", `"per-ip";r=0;t=10`)
	want(t, "min 1, 2nd", e.do(ipA), 429)
}

// The deadline holds against a server that accepts and never answers,
// although the go-redis client ignores context deadlines on its socket
// (its ReadTimeout is 3 s); the breaker then spares the other requests
// the wait, and lets one probe at a time through.
func TestDeadlineSilentServer(t *testing.T) {
	for _, cte := range []bool{false, true} {
		t.Run("ContextTimeoutEnabled="+strconv.FormatBool(cte), func(t *testing.T) { testDeadlineSilentServer(t, cte) })
	}
}

func testDeadlineSilentServer(t *testing.T, contextTimeout bool) {
	const deadline = 50 * ms
	rdb := redis.NewClient(&redis.Options{Addr: silentAddr(t), ContextTimeoutEnabled: contextTimeout})
	t.Cleanup(func() { rdb.Close() })
	e := &env{t: t, c: client.New(rdb), rdb: rdb, clk: servertest.NewClock(t0)}
	e.build(httplimit.Options{Limits: []httplimit.Limit{perIP(5, 10*s, httplimit.GCRA)}, Deadline: deadline})
	start := time.Now()
	want(t, "1st", e.do(ipA), 200)
	took := time.Since(start)
	t.Logf("1st request waited %v (deadline %v)", took, deadline)
	if took > deadline+time.Second {
		t.Errorf("waited %v, want < deadline+1s", took)
	}
	if d := e.last(); d.Outcome != httplimit.Fallback || !strings.Contains(d.Err.Error(), "no answer within 50ms") {
		t.Errorf("decision %+v", d)
	}
	e.clk.Advance(1 * s)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want(t, "concurrent", e.do(ipA), 200)
		}()
	}
	wg.Wait()
	st := e.m.Stats()
	if st.RoundTrips != 2 || st.Probes != 1 || st.FallbackOpen != 21 || st.Unanswered != 2 {
		t.Errorf("stats %+v", st)
	}
}

// A refused dial costs go-redis about 1.5 s of retries (5 attempts with
// backoff); the deadline holds there too, in both modes.
func TestDeadlineDeadAddress(t *testing.T) {
	addr := deadAddr(t)
	for _, cte := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: cte})
		t.Cleanup(func() { rdb.Close() })
		e := &env{t: t, c: client.New(rdb), rdb: rdb, clk: servertest.NewClock(t0)}
		e.build(httplimit.Options{Limits: []httplimit.Limit{perIP(5, 10*s, httplimit.GCRA)}, Deadline: 50 * ms, OnError: httplimit.Closed})
		start := time.Now()
		want(t, "dead", e.do(ipA), 503)
		took := time.Since(start)
		t.Logf("ContextTimeoutEnabled=%v: waited %v", cte, took)
		if took > 50*ms+time.Second {
			t.Errorf("ContextTimeoutEnabled=%v: waited %v, want < deadline+1s", cte, took)
		}
	}
}

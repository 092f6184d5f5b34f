// Package httplimittests runs the client module's HTTP middleware
// (package client/httplimit) against a cellserver in this process, as
// tests/client does for the client itself.
package httplimittests

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cellservertest"
	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/client/httplimit"
	"github.com/cellserver/cellserver/internal/servertest"
)

// t0 is a multiple of 10 s since the epoch, so 10 s windows start at t0.
var t0 = time.Unix(1_700_000_000, 0)

const s, ms = time.Second, time.Millisecond

var bg = context.Background()

// clock is the time shared by the middleware (Options.Clock) and, when
// there is one, the server: a *cellservertest.Server or a
// *servertest.Clock.
type clock interface {
	Now() time.Time
	Advance(time.Duration)
}

// env is a middleware over an in-process cellserver sharing one clock.
type env struct {
	t     *testing.T
	m     *httplimit.Middleware
	c     *client.Client
	rdb   *redis.Client
	clk   clock
	h     http.Handler
	mu    sync.Mutex
	hooks []httplimit.Decision
}

// startServer runs a cellserver whose clock starts at t0.
func startServer(t *testing.T, opts ...cellservertest.Option) *cellservertest.Server {
	t.Helper()
	srv := cellservertest.Run(t, opts...)
	srv.SetTime(t0)
	return srv
}

func newEnv(t *testing.T, o httplimit.Options) *env {
	t.Helper()
	srv := startServer(t)
	e := envOn(t, srv.Addr(), srv)
	e.build(o)
	return e
}

// envOn is an env without a middleware yet, whose go-redis client (default
// options: no ContextTimeoutEnabled) talks to addr.
func envOn(t *testing.T, addr string, clk clock) *env {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	return &env{t: t, c: client.New(rdb), rdb: rdb, clk: clk}
}

// build (re)creates the middleware with o, the env's clock and a hook
// recording decisions.
func (e *env) build(o httplimit.Options) {
	e.t.Helper()
	o.Clock = e.clk.Now
	if o.Deadline == 0 {
		o.Deadline = 2 * s // generous: the tests here are about decisions, not time
	}
	o.OnDecision = func(r *http.Request, d httplimit.Decision) {
		e.mu.Lock()
		e.hooks = append(e.hooks, d)
		e.mu.Unlock()
	}
	m, err := httplimit.New(e.c, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.m = m
	e.h = m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}))
}

// last returns the last decision the hook saw.
func (e *env) last() httplimit.Decision {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.hooks) == 0 {
		e.t.Fatal("no decision")
	}
	return e.hooks[len(e.hooks)-1]
}

// do sends a GET from peer (host:port) with extra headers (name, value...).
func (e *env) do(peer string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("GET", "/x", nil)
	r.RemoteAddr = peer
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

// want checks the status and the headers named in kv (name, value; "" for
// absent).
func want(t *testing.T, step string, w *httptest.ResponseRecorder, code int, kv ...string) {
	t.Helper()
	if w.Code != code {
		t.Errorf("%s: status %d, want %d (body %q)", step, w.Code, code, w.Body.String())
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if have := w.Header().Get(kv[i]); have != kv[i+1] {
			t.Errorf("%s: %s: %q, want %q", step, kv[i], have, kv[i+1])
		}
	}
}

const ipA, ipB = "192.0.2.1:1000", "192.0.2.2:1000"

func perIP(q int64, w time.Duration, a httplimit.Algorithm) httplimit.Limit {
	return httplimit.Limit{Name: "per-ip", Quota: q, Window: w, Algorithm: a, Key: httplimit.ClientIP()}
}

// GCRA 5 per 10 s: emission interval 2 s. Header values at explicit
// instants, then the 429 and its body.
func TestHeadersGCRA(t *testing.T) {
	e := newEnv(t, httplimit.Options{Limits: []httplimit.Limit{perIP(5, 10*s, httplimit.GCRA)}, LegacyHeaders: true})
	pol := `"per-ip";q=5;w=10`
	want(t, "1st", e.do(ipA), 200, "RateLimit-Policy", pol, "RateLimit", `"per-ip";r=4;t=2`,
		"X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "4", "X-RateLimit-Reset", "2", "Retry-After", "")
	for i := 2; i <= 5; i++ {
		e.do(ipA)
	}
	w := e.do(ipA) // TAT t0+10s; allowed at t0+2s
	want(t, "6th", w, 429, "RateLimit-Policy", pol, "RateLimit", `"per-ip";r=0;t=10`, "Retry-After", "2",
		"X-RateLimit-Remaining", "0", "Content-Type", "application/json")
	if body := w.Body.String(); body != `{"error":"too many requests","limit":"per-ip","retry_after":2}`+"\n" {
		t.Errorf("429 body %q", body)
	}
	if d := e.last(); d.Outcome != httplimit.Limited || d.Source != httplimit.SourceServer || !d.Refused || d.Limit != "per-ip" || d.RetryAfter != 2*s {
		t.Errorf("decision %+v", d)
	}
	want(t, "other ip", e.do(ipB), 200, "RateLimit", `"per-ip";r=4;t=2`)
	e.clk.Advance(3 * s) // t0+3s: one emission interval passed, TAT t0+10s -> t0+12s
	want(t, "t0+3s", e.do(ipA), 200, "RateLimit", `"per-ip";r=0;t=9`)
	e.clk.Advance(9 * s) // t0+12s: TAT reached, full again
	want(t, "t0+12s", e.do(ipA), 200, "RateLimit", `"per-ip";r=4;t=2`)
	st := e.m.Stats()
	if st.Allowed != 8 || st.Limited != 1 || st.RoundTrips != 9 {
		t.Errorf("stats %+v", st)
	}
}

// Two limits in one CL.ALL: a request refused by per-ip charges nothing to
// global, whose RateLimit item reports what really remains.
func TestAllOrNothing(t *testing.T) {
	global := httplimit.Limit{Name: "global", Quota: 100, Window: 10 * s, Algorithm: httplimit.Fixed, Key: httplimit.Global()}
	e := newEnv(t, httplimit.Options{Limits: []httplimit.Limit{perIP(1, 10*s, httplimit.GCRA), global}, DenyCacheSize: -1})
	pol := `"per-ip";q=1;w=10, "global";q=100;w=10`
	want(t, "1st", e.do(ipA), 200, "RateLimit-Policy", pol, "RateLimit", `"per-ip";r=0;t=10, "global";r=99;t=10`)
	e.clk.Advance(4 * s)
	want(t, "refused", e.do(ipA), 429, "RateLimit-Policy", pol, "RateLimit", `"per-ip";r=0;t=6, "global";r=99;t=6`, "Retry-After", "6")
	info, found, err := e.c.Info(bg, "rl:global:")
	if err != nil || !found || info.Count != 1 {
		t.Fatalf("global after the refusal: %+v %v %v, want count 1", info, found, err)
	}
	d := e.last()
	if d.Limit != "per-ip" || len(d.Results) != 2 || d.Results[0].Allowed || !d.Results[1].Allowed {
		t.Errorf("decision %+v", d)
	}
	want(t, "ip B", e.do(ipB), 200, "RateLimit", `"per-ip";r=0;t=10, "global";r=98;t=6`)
	if info, _, _ = e.c.Info(bg, "rl:global:"); info.Count != 2 {
		t.Errorf("global count %d, want 2", info.Count)
	}
	// A limit that does not apply is neither checked nor reported.
	e.build(httplimit.Options{Limits: []httplimit.Limit{global, {Name: "per-user", Quota: 3, Window: 10 * s, Key: httplimit.Header("X-User")}}})
	want(t, "no user", e.do(ipA), 200, "RateLimit-Policy", `"global";q=100;w=10`, "RateLimit", `"global";r=97;t=6`)
	if d := e.last(); len(d.Results) != 2 || d.Results[1].Limit != 0 || d.Results[0].Remaining != 97 {
		t.Errorf("results with one limit applied: %+v", d.Results)
	}
	want(t, "user", e.do(ipA, "X-User", "u1"), 200, "RateLimit", `"global";r=96;t=6, "per-user";r=2;t=4`)
}

// The other algorithms' headers, at explicit instants.
func TestHeadersOtherAlgorithms(t *testing.T) {
	for _, tc := range []struct {
		alg        httplimit.Algorithm
		at         time.Duration // from t0, of the 3rd request (refused)
		first, ref string
		retry      string
	}{
		{httplimit.Fixed, 2500 * ms, `"per-ip";r=1;t=10`, `"per-ip";r=0;t=8`, "8"},
		// retry: 2 in this window count as prev 2 in the next, where 1 fits
		// once 2·(10−e)/10 <= 1: e = 5 s, so 7.5 s + 5 s.
		{httplimit.Sliding, 2500 * ms, `"per-ip";r=1;t=20`, `"per-ip";r=0;t=18`, "13"},
		{httplimit.SlidingLog, 2500 * ms, `"per-ip";r=1;t=10`, `"per-ip";r=0;t=8`, "8"},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			e := newEnv(t, httplimit.Options{Limits: []httplimit.Limit{perIP(2, 10*s, tc.alg)}})
			want(t, "1st", e.do(ipA), 200, "RateLimit", tc.first)
			e.do(ipA)
			e.clk.Advance(tc.at)
			want(t, "refused", e.do(ipA), 429, "RateLimit", tc.ref, "Retry-After", tc.retry)
		})
	}
}

// The deny cache answers without a round trip until the retry instant,
// and not one nanosecond longer.
func TestDenyCache(t *testing.T) {
	for _, tc := range []struct {
		alg   httplimit.Algorithm
		retry time.Duration // of the 3rd request at t0+1s
	}{
		{httplimit.GCRA, 4 * s},       // 2 per 10 s: TAT t0+10s, allowed again at t0+5s
		{httplimit.Fixed, 9 * s},      // window ends at t0+10s
		{httplimit.SlidingLog, 9 * s}, // the first entry leaves at t0+10s
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			e := newEnv(t, httplimit.Options{Limits: []httplimit.Limit{perIP(2, 10*s, tc.alg)}})
			e.do(ipA)
			e.do(ipA)
			e.clk.Advance(1 * s)
			want(t, "refused", e.do(ipA), 429)
			if st := e.m.Stats(); st.RoundTrips != 3 || st.DenyCacheHits != 0 || st.DenyCacheEntries != 1 {
				t.Fatalf("stats %+v", st)
			}
			e.clk.Advance(tc.retry - time.Nanosecond) // one ns before the retry instant
			w := e.do(ipA)
			want(t, "cached", w, 429, "Retry-After", "1", "RateLimit-Policy", `"per-ip";q=2;w=10`)
			if d := e.last(); d.Source != httplimit.SourceDenyCache || d.Outcome != httplimit.Limited || d.RetryAfter != time.Nanosecond {
				t.Errorf("decision %+v", d)
			}
			want(t, "other key", e.do(ipB), 200)
			if st := e.m.Stats(); st.RoundTrips != 4 || st.DenyCacheHits != 1 || st.Limited != 2 {
				t.Fatalf("stats %+v", st)
			}
			e.clk.Advance(time.Nanosecond) // the retry instant: to the server, admitted
			want(t, "at retry", e.do(ipA), 200)
			if st := e.m.Stats(); st.RoundTrips != 5 || st.DenyCacheEntries != 0 {
				t.Errorf("stats %+v, want 5 round trips and the expired entry gone", st)
			}
		})
	}
}

// A refusal of a costly request does not refuse a cheaper one locally.
func TestDenyCacheCost(t *testing.T) {
	cost := func(r *http.Request) int64 {
		if r.Header.Get("X-Big") != "" {
			return 3
		}
		return 1
	}
	e := newEnv(t, httplimit.Options{Limits: []httplimit.Limit{perIP(4, 4*s, httplimit.GCRA)}, Cost: cost}) // 1 s per unit
	want(t, "2 units", e.do(ipA), 200)
	e.do(ipA)
	want(t, "big refused", e.do(ipA, "X-Big", "1"), 429, "Retry-After", "1") // 2 left, needs 3
	want(t, "big cached", e.do(ipA, "X-Big", "1"), 429)
	want(t, "small passes", e.do(ipA), 200)
	if st := e.m.Stats(); st.RoundTrips != 4 || st.DenyCacheHits != 1 {
		t.Errorf("stats %+v", st)
	}
	// A cost above the quota can never pass: Retry-After is the window,
	// and it is not cached (the next one asks the server again).
	cost5 := func(r *http.Request) int64 { return 5 }
	e.build(httplimit.Options{Limits: []httplimit.Limit{perIP(4, 4*s, httplimit.GCRA)}, Cost: cost5})
	want(t, "never", e.do(ipB), 429, "Retry-After", "4")
	want(t, "never again", e.do(ipB), 429)
	if st := e.m.Stats(); st.RoundTrips != 2 || st.DenyCacheHits != 0 || st.DenyCacheEntries != 0 {
		t.Errorf("stats %+v", st)
	}
}

// The deny cache and the Local fallback's state stay within their bounds,
// as Stats reports them.
func TestBounds(t *testing.T) {
	e := newEnv(t, httplimit.Options{Limits: []httplimit.Limit{perIP(1, 10*s, httplimit.GCRA)}, DenyCacheSize: 2})
	for i := range 5 {
		ip := "192.0.2." + strconv.Itoa(10+i) + ":1"
		e.do(ip)
		want(t, "refused", e.do(ip), 429)
		if n := e.m.Stats().DenyCacheEntries; n > 2 {
			t.Fatalf("deny cache holds %d entries, cap 2", n)
		}
	}
	if n := e.m.Stats().DenyCacheEntries; n != 2 {
		t.Errorf("deny cache holds %d, want 2", n)
	}
	// cellserver unreachable: the Local fallback keeps at most 3 keys.
	l := envOn(t, deadAddr(t), servertest.NewClock(t0))
	l.build(httplimit.Options{Limits: []httplimit.Limit{perIP(5, 10*s, httplimit.Fixed)}, OnError: httplimit.Local,
		LocalMaxKeys: 3, Deadline: httplimit.DefaultDeadline})
	for i := range 10 {
		want(t, "local", l.do("192.0.2."+strconv.Itoa(10+i)+":1"), 200)
		if n := l.m.Stats().LocalKeys; n > 3 {
			t.Fatalf("local state holds %d keys, cap 3", n)
		}
	}
	if st := l.m.Stats(); st.LocalKeys != 3 || st.FallbackLocal != 10 || st.DenyCacheEntries != 0 {
		t.Errorf("stats %+v, want 3 local keys", st)
	}
}

// Shadow mode: every decision reported, no request refused, no header.
func TestShadow(t *testing.T) {
	e := newEnv(t, httplimit.Options{Limits: []httplimit.Limit{perIP(1, 10*s, httplimit.GCRA)}, Shadow: true, LegacyHeaders: true})
	for i := range 3 {
		want(t, "request", e.do(ipA), 200, "RateLimit", "", "RateLimit-Policy", "", "Retry-After", "", "X-RateLimit-Limit", "")
		d := e.last()
		if (i > 0) != d.Refused || !d.Shadow {
			t.Errorf("request %d: decision %+v", i, d)
		}
	}
	if d := e.last(); d.Source != httplimit.SourceDenyCache {
		t.Errorf("3rd from %v, want the deny cache", d.Source)
	}
	if st := e.m.Stats(); st.Allowed != 1 || st.Limited != 2 || st.RoundTrips != 2 {
		t.Errorf("stats %+v", st)
	}
}

// Denied replaces the 429 writer; it sees the decision and the headers.
func TestDeniedHandler(t *testing.T) {
	e := newEnv(t, httplimit.Options{Limits: []httplimit.Limit{perIP(1, 10*s, httplimit.GCRA)}})
	var got httplimit.Decision
	e.build(httplimit.Options{Limits: []httplimit.Limit{perIP(1, 10*s, httplimit.GCRA)}, Denied: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = httplimit.DecisionFrom(r.Context())
		w.WriteHeader(http.StatusTeapot)
		w.Write([]byte("slow down, retry in " + w.Header().Get("Retry-After")))
	})})
	e.do(ipA)
	w := e.do(ipA)
	if w.Code != http.StatusTeapot || w.Body.String() != "slow down, retry in 10" || got.Limit != "per-ip" {
		t.Errorf("%d %q %+v", w.Code, w.Body.String(), got)
	}
}

// A server error reply is an Error decision handled by OnError.
func TestServerError(t *testing.T) {
	e := newEnv(t, httplimit.Options{Limits: []httplimit.Limit{perIP(5, 10*s, httplimit.GCRA)}})
	if err := e.rdb.Set(bg, "rl:per-ip:192.0.2.1", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	want(t, "open", e.do(ipA), 200, "RateLimit", "", "RateLimit-Policy", `"per-ip";q=5;w=10`)
	d := e.last()
	var ce *client.Error
	if d.Outcome != httplimit.Error || d.Source != httplimit.SourceOpen || !errors.As(d.Err, &ce) || ce.Code != "Cell" || ce.Command != "CL.ALL" {
		t.Errorf("decision %+v", d)
	}
	e.build(httplimit.Options{Limits: []httplimit.Limit{perIP(5, 10*s, httplimit.GCRA)}, OnError: httplimit.Closed})
	want(t, "closed", e.do(ipA), 503, "Retry-After", "1")
	e.build(httplimit.Options{Limits: []httplimit.Limit{perIP(5, 10*s, httplimit.GCRA)}, OnError: httplimit.Local, LocalShare: 0.2})
	want(t, "local", e.do(ipA), 200, "RateLimit", `"per-ip";r=0;t=10`)
	want(t, "local refused", e.do(ipA), 429)
	if d := e.last(); d.Outcome != httplimit.Error || d.Source != httplimit.SourceLocal || !d.Refused {
		t.Errorf("decision %+v", d)
	}
	st := e.m.Stats()
	if st.Errors != 2 || st.FallbackLocal != 2 || st.LocalLimited != 1 || st.Unanswered != 0 {
		t.Errorf("stats %+v", st)
	}
	want(t, "other key unaffected", e.do(ipB), 200, "RateLimit", `"per-ip";r=4;t=2`)
}

// Through the middleware: a spoofed header from an untrusted peer does not
// give it a fresh bucket; from a trusted proxy it keys each client apart.
func TestClientIPThroughMiddleware(t *testing.T) {
	lim := httplimit.Limit{Name: "per-ip", Quota: 1, Window: 10 * s, Key: httplimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8"))}
	e := newEnv(t, httplimit.Options{Limits: []httplimit.Limit{lim}})
	want(t, "first", e.do(ipA), 200)
	want(t, "spoofed XFF", e.do(ipA, "X-Forwarded-For", "198.51.100.1"), 429)
	want(t, "spoofed Forwarded", e.do(ipA, "Forwarded", "for=198.51.100.2"), 429)
	want(t, "via proxy, client 1", e.do("10.0.0.5:1", "X-Forwarded-For", "198.51.100.1"), 200)
	want(t, "via proxy, client 1 again", e.do("10.0.0.6:1", "X-Forwarded-For", "9.9.9.9, 198.51.100.1"), 429)
	want(t, "via proxy, client 2", e.do("10.0.0.5:1", "X-Forwarded-For", "198.51.100.1, 198.51.100.2"), 200)
}

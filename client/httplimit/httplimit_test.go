package httplimit

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// t0 is a multiple of 10 s since the epoch, so 10 s windows start at t0.
var t0 = time.Unix(1_700_000_000, 0)

const s, ms = time.Second, time.Millisecond

var bg = context.Background()

// env is a middleware over an in-process cellserver sharing one clock.
type env struct {
	t     *testing.T
	m     *Middleware
	c     *client.Client
	rdb   *redis.Client
	clk   *servertest.Clock
	h     http.Handler
	mu    sync.Mutex
	hooks []Decision
}

func newEnv(t *testing.T, o Options) *env {
	t.Helper()
	clk := servertest.NewClock(t0)
	_, addr := servertest.Start(t, server.Config{Clock: clk.Now})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Close() })
	e := &env{t: t, c: client.New(rdb), rdb: rdb, clk: clk}
	e.build(o)
	return e
}

// build (re)creates the middleware with o, the env's clock and a hook
// recording decisions.
func (e *env) build(o Options) {
	e.t.Helper()
	o.Clock = e.clk.Now
	if o.Deadline == 0 {
		o.Deadline = 2 * s // generous: the tests here are about decisions, not time
	}
	o.OnDecision = func(r *http.Request, d Decision) {
		e.mu.Lock()
		e.hooks = append(e.hooks, d)
		e.mu.Unlock()
	}
	m, err := New(e.c, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.m = m
	e.h = m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	}))
}

// last returns the last decision the hook saw.
func (e *env) last() Decision {
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

func perIP(q int64, w time.Duration, a Algorithm) Limit {
	return Limit{Name: "per-ip", Quota: q, Window: w, Algorithm: a, Key: ClientIP()}
}

// GCRA 5 per 10 s: emission interval 2 s. Header values at explicit
// instants, then the 429 and its body.
func TestHeadersGCRA(t *testing.T) {
	e := newEnv(t, Options{Limits: []Limit{perIP(5, 10*s, GCRA)}, LegacyHeaders: true})
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
	if d := e.last(); d.Outcome != Limited || d.Source != SourceServer || !d.Refused || d.Limit != "per-ip" || d.RetryAfter != 2*s {
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
	global := Limit{Name: "global", Quota: 100, Window: 10 * s, Algorithm: Fixed, Key: Global()}
	e := newEnv(t, Options{Limits: []Limit{perIP(1, 10*s, GCRA), global}, DenyCacheSize: -1})
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
	e.build(Options{Limits: []Limit{global, {Name: "per-user", Quota: 3, Window: 10 * s, Key: Header("X-User")}}})
	want(t, "no user", e.do(ipA), 200, "RateLimit-Policy", `"global";q=100;w=10`, "RateLimit", `"global";r=97;t=6`)
	if d := e.last(); len(d.Results) != 2 || d.Results[1].Limit != 0 || d.Results[0].Remaining != 97 {
		t.Errorf("results with one limit applied: %+v", d.Results)
	}
	want(t, "user", e.do(ipA, "X-User", "u1"), 200, "RateLimit", `"global";r=96;t=6, "per-user";r=2;t=4`)
}

// The other algorithms' headers, at explicit instants.
func TestHeadersOtherAlgorithms(t *testing.T) {
	for _, tc := range []struct {
		alg        Algorithm
		at         time.Duration // from t0, of the 3rd request (refused)
		first, ref string
		retry      string
	}{
		{Fixed, 2500 * ms, `"per-ip";r=1;t=10`, `"per-ip";r=0;t=8`, "8"},
		// retry: 2 in this window count as prev 2 in the next, where 1 fits
		// once 2·(10−e)/10 <= 1: e = 5 s, so 7.5 s + 5 s.
		{Sliding, 2500 * ms, `"per-ip";r=1;t=20`, `"per-ip";r=0;t=18`, "13"},
		{SlidingLog, 2500 * ms, `"per-ip";r=1;t=10`, `"per-ip";r=0;t=8`, "8"},
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			e := newEnv(t, Options{Limits: []Limit{perIP(2, 10*s, tc.alg)}})
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
		alg   Algorithm
		retry time.Duration // of the 3rd request at t0+1s
	}{
		{GCRA, 4 * s},       // 2 per 10 s: TAT t0+10s, allowed again at t0+5s
		{Fixed, 9 * s},      // window ends at t0+10s
		{SlidingLog, 9 * s}, // the first entry leaves at t0+10s
	} {
		t.Run(tc.alg.String(), func(t *testing.T) {
			e := newEnv(t, Options{Limits: []Limit{perIP(2, 10*s, tc.alg)}})
			e.do(ipA)
			e.do(ipA)
			e.clk.Advance(1 * s)
			want(t, "refused", e.do(ipA), 429)
			if st := e.m.Stats(); st.RoundTrips != 3 || st.DenyCacheHits != 0 {
				t.Fatalf("stats %+v", st)
			}
			e.clk.Advance(tc.retry - time.Nanosecond) // one ns before the retry instant
			w := e.do(ipA)
			want(t, "cached", w, 429, "Retry-After", "1", "RateLimit-Policy", `"per-ip";q=2;w=10`)
			if d := e.last(); d.Source != SourceDenyCache || d.Outcome != Limited || d.RetryAfter != time.Nanosecond {
				t.Errorf("decision %+v", d)
			}
			want(t, "other key", e.do(ipB), 200)
			if st := e.m.Stats(); st.RoundTrips != 4 || st.DenyCacheHits != 1 || st.Limited != 2 {
				t.Fatalf("stats %+v", st)
			}
			e.clk.Advance(time.Nanosecond) // the retry instant: to the server, admitted
			want(t, "at retry", e.do(ipA), 200)
			if st := e.m.Stats(); st.RoundTrips != 5 {
				t.Errorf("round trips %d, want 5", st.RoundTrips)
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
	e := newEnv(t, Options{Limits: []Limit{perIP(4, 4*s, GCRA)}, Cost: cost}) // 1 s per unit
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
	e.build(Options{Limits: []Limit{perIP(4, 4*s, GCRA)}, Cost: cost5})
	want(t, "never", e.do(ipB), 429, "Retry-After", "4")
	want(t, "never again", e.do(ipB), 429)
	if st := e.m.Stats(); st.RoundTrips != 2 || st.DenyCacheHits != 0 || e.m.deny.len() != 0 {
		t.Errorf("stats %+v, cache %d", st, e.m.deny.len())
	}
}

// The deny cache and the Local fallback's state stay within their bounds.
func TestBounds(t *testing.T) {
	e := newEnv(t, Options{Limits: []Limit{perIP(1, 10*s, GCRA)}, DenyCacheSize: 2})
	for i := range 5 {
		ip := "192.0.2." + strconv.Itoa(10+i) + ":1"
		e.do(ip)
		want(t, "refused", e.do(ip), 429)
		if n := e.m.deny.len(); n > 2 {
			t.Fatalf("deny cache holds %d entries, cap 2", n)
		}
	}
	if n := e.m.deny.len(); n != 2 {
		t.Errorf("deny cache holds %d, want 2", n)
	}
	l := newLocalState(3)
	lims := []limit{{Limit: perIP(5, 10*s, Fixed), local: 1}}
	for i := range 10 {
		l.decide(lims, []applied{{0, strconv.Itoa(i)}}, 1, t0.UnixNano())
		if n := l.size(); n > 3 {
			t.Fatalf("local state holds %d keys, cap 3", n)
		}
	}
	if n := l.size(); n != 3 {
		t.Errorf("local state holds %d keys, want 3", n)
	}
}

// Shadow mode: every decision reported, no request refused, no header.
func TestShadow(t *testing.T) {
	e := newEnv(t, Options{Limits: []Limit{perIP(1, 10*s, GCRA)}, Shadow: true, LegacyHeaders: true})
	for i := range 3 {
		want(t, "request", e.do(ipA), 200, "RateLimit", "", "RateLimit-Policy", "", "Retry-After", "", "X-RateLimit-Limit", "")
		d := e.last()
		if (i > 0) != d.Refused || !d.Shadow {
			t.Errorf("request %d: decision %+v", i, d)
		}
	}
	if d := e.last(); d.Source != SourceDenyCache {
		t.Errorf("3rd from %v, want the deny cache", d.Source)
	}
	if st := e.m.Stats(); st.Allowed != 1 || st.Limited != 2 || st.RoundTrips != 2 {
		t.Errorf("stats %+v", st)
	}
}

// Denied replaces the 429 writer; it sees the decision and the headers.
func TestDeniedHandler(t *testing.T) {
	e := newEnv(t, Options{Limits: []Limit{perIP(1, 10*s, GCRA)}})
	var got Decision
	e.build(Options{Limits: []Limit{perIP(1, 10*s, GCRA)}, Denied: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = DecisionFrom(r.Context())
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
	e := newEnv(t, Options{Limits: []Limit{perIP(5, 10*s, GCRA)}})
	if err := e.rdb.Set(bg, "rl:per-ip:192.0.2.1", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	want(t, "open", e.do(ipA), 200, "RateLimit", "", "RateLimit-Policy", `"per-ip";q=5;w=10`)
	d := e.last()
	var ce *client.Error
	if d.Outcome != Error || d.Source != SourceOpen || !errors.As(d.Err, &ce) || ce.Code != "Cell" || ce.Command != "CL.ALL" {
		t.Errorf("decision %+v", d)
	}
	e.build(Options{Limits: []Limit{perIP(5, 10*s, GCRA)}, OnError: Closed})
	want(t, "closed", e.do(ipA), 503, "Retry-After", "1")
	e.build(Options{Limits: []Limit{perIP(5, 10*s, GCRA)}, OnError: Local, LocalShare: 0.2})
	want(t, "local", e.do(ipA), 200, "RateLimit", `"per-ip";r=0;t=10`)
	want(t, "local refused", e.do(ipA), 429)
	if d := e.last(); d.Outcome != Error || d.Source != SourceLocal || !d.Refused {
		t.Errorf("decision %+v", d)
	}
	st := e.m.Stats()
	if st.Errors != 2 || st.FallbackLocal != 2 || st.LocalLimited != 1 || st.Unanswered != 0 {
		t.Errorf("stats %+v", st)
	}
	want(t, "other key unaffected", e.do(ipB), 200, "RateLimit", `"per-ip";r=4;t=2`)
}

func TestNewValidates(t *testing.T) {
	c := client.New(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}))
	_, err := New(c, Options{
		Limits: []Limit{
			{Name: "", Quota: 1, Window: s, Key: Global()},
			{Name: "a:b", Quota: 0, Window: 0, Key: Global()},
			{Name: "x", Quota: 3, Window: 700 * ms, Key: Global()},
			{Name: "x", Quota: 3, Window: s, Key: nil, Algorithm: 9},
			{Name: "é", Quota: 1, Window: s, Key: Global()},
			{Name: "fast", Quota: 2e9, Window: s, Key: Global()},
		},
		Deadline: -1, LocalShare: 2, OnError: 7, ProbeInterval: -1, LocalMaxKeys: -1,
	})
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{"limit 0 (\"\"): empty name", "name contains ':'", "Quota 0", "Window 0s",
		"3 per 700ms", "duplicate name", "nil Key", "unknown Algorithm 9", "not printable ASCII", "under 1 ns per unit",
		"negative Deadline", "LocalShare 2", "unknown OnError 7", "negative ProbeInterval", "negative LocalMaxKeys"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %q:\n%v", w, err)
		}
	}
	if _, err := New(nil, Options{}); err == nil || !strings.Contains(err.Error(), "nil client") || !strings.Contains(err.Error(), "no limits") {
		t.Errorf("New(nil): %v", err)
	}
	m, err := New(c, Options{Limits: []Limit{{Name: `a "b" \c`, Quota: 1, Window: 1500 * ms, Algorithm: Fixed, Key: Global()}}})
	if err != nil || m.policy != `"a \"b\" \\c";q=1;w=2` {
		t.Errorf("%v %q", err, m.policy)
	}
}

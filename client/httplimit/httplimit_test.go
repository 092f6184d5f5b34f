package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
)

// t0 is a multiple of 10 s since the epoch, so 10 s windows start at t0.
var t0 = time.Unix(1_700_000_000, 0)

const s, ms = time.Second, time.Millisecond

// clock is a manual clock for Options.Clock.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// env is a middleware with a manual clock over a go-redis client. The tests
// of this package need no cellserver: the client's address is dead or
// silent (fallback_test.go); those against a running cellserver are in
// client_test/httplimit of the cellserver module.
type env struct {
	t     *testing.T
	m     *Middleware
	c     *client.Client
	rdb   *redis.Client
	clk   *clock
	h     http.Handler
	mu    sync.Mutex
	hooks []Decision
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

// The deny cache holds at most DenyCacheSize entries; a full cache evicts
// an expired entry before a live one.
func TestDenyCacheBound(t *testing.T) {
	c := newDenyCache(2)
	now := t0.UnixNano()
	refused := client.Result{Limit: 1, RetryAfter: 10 * s, ResetAfter: 10 * s}
	for i := range 5 {
		c.add(applied{0, strconv.Itoa(i)}, 1, now, refused)
		if n := c.len(); n > 2 {
			t.Fatalf("deny cache holds %d entries, cap 2", n)
		}
	}
	if n := c.len(); n != 2 {
		t.Errorf("deny cache holds %d, want 2", n)
	}
	// "a" expires at now+1s, "b" at now+10s; at now+2s "c" evicts "a".
	c = newDenyCache(2)
	c.add(applied{0, "a"}, 1, now, client.Result{Limit: 1, RetryAfter: s, ResetAfter: s})
	c.add(applied{0, "b"}, 1, now, refused)
	later := now + int64(2*s)
	c.add(applied{0, "c"}, 1, later, refused)
	for _, k := range []string{"b", "c"} {
		if _, _, ok := c.lookup([]applied{{0, k}}, 1, later); !ok {
			t.Errorf("%q evicted, want the expired \"a\" evicted", k)
		}
	}
	if n := c.len(); n != 2 {
		t.Errorf("deny cache holds %d, want 2", n)
	}
}

// The Local fallback's state holds at most LocalMaxKeys keys.
func TestLocalStateBound(t *testing.T) {
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

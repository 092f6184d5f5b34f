package httplimittests

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cellservertest"
	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/client/httplimit"
)

// discard is a ResponseWriter that keeps nothing but its header map,
// cleared before each request.
type discard struct {
	h    http.Header
	code int
}

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(code int)        { d.code = code }

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })

func benchServer(b *testing.B, opts ...cellservertest.Option) (*client.Client, *cellservertest.Server) {
	srv := cellservertest.Run(b, opts...)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { rdb.Close() })
	return client.New(rdb), srv
}

func serveLoop(b *testing.B, h http.Handler, m *httplimit.Middleware) {
	r := httptest.NewRequest("GET", "/x", nil)
	r.RemoteAddr = ipA
	w := &discard{h: http.Header{}}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		clear(w.h)
		w.code = 0
		h.ServeHTTP(w, r)
	}
	b.StopTimer()
	if w.code != 0 {
		b.Fatalf("status %d", w.code)
	}
	if m == nil {
		return
	}
	if st := m.Stats(); st.Allowed != uint64(b.N) {
		b.Fatalf("not all allowed by the server: %+v", st)
	}
}

// BenchmarkMiddleware: the cost per request of the middleware (one CL.ALL
// round trip to an in-process cellserver on loopback) against the plain
// handler, and of the goroutine that guarantees the Deadline against the
// same CL.ALL sent directly.
func BenchmarkMiddleware(b *testing.B) {
	c, _ := benchServer(b, cellservertest.WithClock(time.Now))
	big := func(name string, k httplimit.KeyFunc) httplimit.Limit {
		return httplimit.Limit{Name: name, Quota: 1 << 30, Window: 1000 * time.Second, Key: k}
	}
	b.Run("plain", func(b *testing.B) { serveLoop(b, okHandler, nil) })
	for _, tc := range []struct {
		name   string
		limits []httplimit.Limit
	}{
		{"1limit", []httplimit.Limit{big("per-ip", httplimit.ClientIP())}},
		{"2limits", []httplimit.Limit{big("per-ip", httplimit.ClientIP()), big("global", httplimit.Global())}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m, err := httplimit.New(c, httplimit.Options{Limits: tc.limits, Deadline: time.Second, DenyCacheSize: -1})
			if err != nil {
				b.Fatal(err)
			}
			serveLoop(b, m.Handler(okHandler), m)
		})
	}
	// With a go-redis client that honours context deadlines: no guard
	// (the package's TestDeadlineSilentServer checks that choice).
	b.Run("1limit-ContextTimeoutEnabled", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: c.Redis().(*redis.Client).Options().Addr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		m, err := httplimit.New(client.New(rdb), httplimit.Options{Limits: []httplimit.Limit{big("per-ip", httplimit.ClientIP())}, Deadline: time.Second, DenyCacheSize: -1})
		if err != nil {
			b.Fatal(err)
		}
		serveLoop(b, m.Handler(okHandler), m)
	})
	// The same CL.ALL without and with the deadline guard. The guard is
	// the middleware's (its call without ContextTimeoutEnabled), written
	// out here because the package does not export it: a context with the
	// Deadline, the call in its own goroutine, its result through a
	// buffered channel, a select against the context.
	batch := func() *client.Batch {
		return c.All().Throttle("rl:per-ip:192.0.2.1", 1<<30-1, client.Rate{Count: 1 << 30, Period: 1000 * time.Second}, 1)
	}
	b.Run("call-direct", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if ok, _, err := batch().Do(context.Background()); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	type result struct {
		ok  bool
		res []client.Result
		err error
	}
	b.Run("call-guarded", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			bt := batch()
			ch := make(chan result, 1)
			go func() {
				ok, res, err := bt.Do(ctx)
				ch <- result{ok, res, err}
			}()
			var r result
			select {
			case r = <-ch:
			case <-ctx.Done():
				r.err = ctx.Err()
			}
			cancel()
			if r.err != nil || !r.ok {
				b.Fatal(r.ok, r.err)
			}
		}
	})
}

// BenchmarkDenyCacheFlood: 10 keys, each sending 10 times its limit (GCRA
// and fixed window, 10 per 10 s, so each key sends 10 per second; the 10
// together 100 per second of the injected clock, 10 ms apart). Reported:
// round trips and admitted requests per request, with and without the
// deny cache.
func BenchmarkDenyCacheFlood(b *testing.B) {
	for _, alg := range []httplimit.Algorithm{httplimit.GCRA, httplimit.Fixed} {
		for _, size := range []int{-1, httplimit.DefaultDenyCacheSize} {
			name := alg.String() + "/cache=on"
			if size < 0 {
				name = alg.String() + "/cache=off"
			}
			b.Run(name, func(b *testing.B) {
				c, clk := benchServer(b)
				clk.SetTime(t0)
				m, err := httplimit.New(c, httplimit.Options{Limits: []httplimit.Limit{{Name: "per-ip", Quota: 10, Window: 10 * time.Second, Algorithm: alg, Key: httplimit.ClientIP()}},
					Deadline: time.Second, DenyCacheSize: size, Clock: clk.Now})
				if err != nil {
					b.Fatal(err)
				}
				h := m.Handler(okHandler)
				reqs := make([]*http.Request, 10)
				for i := range reqs {
					reqs[i] = httptest.NewRequest("GET", "/x", nil)
					reqs[i].RemoteAddr = "192.0.2." + strconv.Itoa(i+1) + ":1000"
				}
				w := &discard{h: http.Header{}}
				admitted := 0
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					clear(w.h)
					w.code = 0
					h.ServeHTTP(w, reqs[i%10])
					if w.code == 0 {
						admitted++
					}
					clk.Advance(10 * time.Millisecond)
				}
				b.StopTimer()
				st := m.Stats()
				if st.Errors+st.Unanswered != 0 {
					b.Fatalf("stats %+v", st)
				}
				b.ReportMetric(float64(st.RoundTrips), "roundtrips")
				b.ReportMetric(float64(st.RoundTrips)/float64(b.N), "roundtrips/req")
				b.ReportMetric(float64(admitted)/float64(b.N), "admitted/req")
			})
		}
	}
}

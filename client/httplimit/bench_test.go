package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
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

func benchServer(b *testing.B, clk func() time.Time) *client.Client {
	_, addr := servertest.Start(b, server.Config{Clock: clk})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { rdb.Close() })
	return client.New(rdb)
}

func serveLoop(b *testing.B, h http.Handler, m *Middleware) {
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
	c := benchServer(b, time.Now)
	big := func(name string, k KeyFunc) Limit {
		return Limit{Name: name, Quota: 1 << 30, Window: 1000 * time.Second, Key: k}
	}
	b.Run("plain", func(b *testing.B) { serveLoop(b, okHandler, nil) })
	for _, tc := range []struct {
		name   string
		limits []Limit
	}{
		{"1limit", []Limit{big("per-ip", ClientIP())}},
		{"2limits", []Limit{big("per-ip", ClientIP()), big("global", Global())}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			m, err := New(c, Options{Limits: tc.limits, Deadline: time.Second, DenyCacheSize: -1})
			if err != nil {
				b.Fatal(err)
			}
			serveLoop(b, m.Handler(okHandler), m)
		})
	}
	// With a go-redis client that honours context deadlines: no guard.
	b.Run("1limit-ContextTimeoutEnabled", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: c.Redis().(*redis.Client).Options().Addr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		m, err := New(client.New(rdb), Options{Limits: []Limit{big("per-ip", ClientIP())}, Deadline: time.Second, DenyCacheSize: -1})
		if err != nil || !m.direct {
			b.Fatal(err, m.direct)
		}
		serveLoop(b, m.Handler(okHandler), m)
	})
	// The same CL.ALL without and with the deadline guard.
	m, err := New(c, Options{Limits: []Limit{big("per-ip", ClientIP())}, Deadline: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	app := []applied{{0, "192.0.2.1"}}
	b.Run("call-direct", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			bt := c.All().Throttle("rl:per-ip:192.0.2.1", 1<<30-1, client.Rate{Count: 1 << 30, Period: 1000 * time.Second}, 1)
			if ok, _, err := bt.Do(context.Background()); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
	})
	b.Run("call-guarded", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if ok, _, err := m.call(context.Background(), app, 1); err != nil || !ok {
				b.Fatal(ok, err)
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
	for _, alg := range []Algorithm{GCRA, Fixed} {
		for _, size := range []int{-1, DefaultDenyCacheSize} {
			name := alg.String() + "/cache=on"
			if size < 0 {
				name = alg.String() + "/cache=off"
			}
			b.Run(name, func(b *testing.B) {
				clk := servertest.NewClock(t0)
				c := benchServer(b, clk.Now)
				m, err := New(c, Options{Limits: []Limit{{Name: "per-ip", Quota: 10, Window: 10 * time.Second, Algorithm: alg, Key: ClientIP()}},
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

package httplimittests

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cellservertest"
	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/client/httplimit"
)

// Five requests per 10 s per client IP, the client's address taken from
// X-Forwarded-For only behind the proxies of 10.0.0.0/8, and at most 1000
// requests per second overall; if cellserver is unreachable, each process
// admits a tenth of each limit on its own. The example runs cellserver in
// process (package cellservertest) with a fixed clock, so the headers are
// exact; the Example of package httplimit is the same without a server.
func Example() {
	now := time.Unix(1_700_000_000, 0)
	srv, err := cellservertest.Start(cellservertest.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()

	m, err := httplimit.New(client.New(rdb), httplimit.Options{
		Limits: []httplimit.Limit{
			{Name: "per-ip", Quota: 5, Window: 10 * time.Second, Key: httplimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8"))},
			{Name: "global", Quota: 1000, Window: time.Second, Algorithm: httplimit.Fixed, Key: httplimit.Global()},
		},
		OnError: httplimit.Local,
		Clock:   func() time.Time { return now },
	})
	if err != nil {
		panic(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") }))

	for i := range 6 {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.7:4242" // a trusted proxy, forwarding for:
		r.Header.Set("X-Forwarded-For", "198.51.100.7")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if i == 0 {
			fmt.Println("RateLimit-Policy:", w.Header().Get("RateLimit-Policy"))
		}
		fmt.Printf("%d RateLimit: %s [Retry-After:%s]\n", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
	// Output:
	// RateLimit-Policy: "per-ip";q=5;w=10, "global";q=1000;w=1
	// 200 RateLimit: "per-ip";r=4;t=2, "global";r=999;t=1 [Retry-After:]
	// 200 RateLimit: "per-ip";r=3;t=4, "global";r=998;t=1 [Retry-After:]
	// 200 RateLimit: "per-ip";r=2;t=6, "global";r=997;t=1 [Retry-After:]
	// 200 RateLimit: "per-ip";r=1;t=8, "global";r=996;t=1 [Retry-After:]
	// 200 RateLimit: "per-ip";r=0;t=10, "global";r=995;t=1 [Retry-After:]
	// 429 RateLimit: "per-ip";r=0;t=10, "global";r=995;t=1 [Retry-After:2]
}

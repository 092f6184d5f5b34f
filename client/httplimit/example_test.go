package httplimit_test

import (
	"io"
	"log"
	"net/http"
	"net/netip"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/client"
	"github.com/cellserver/cellserver/client/httplimit"
)

// Five requests per 10 s per client IP, the client's address taken from
// X-Forwarded-For only behind the proxies of 10.0.0.0/8, and at most 1000
// requests per second overall; if cellserver is unreachable, each process
// admits a tenth of each limit on its own. (A runnable version, against a
// cellserver started in process, with the headers it sends, is the
// Example in the cellserver module's tests/client/httplimit.)
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()

	m, err := httplimit.New(client.New(rdb), httplimit.Options{
		Limits: []httplimit.Limit{
			{Name: "per-ip", Quota: 5, Window: 10 * time.Second, Key: httplimit.ClientIP(netip.MustParsePrefix("10.0.0.0/8"))},
			{Name: "global", Quota: 1000, Window: time.Second, Algorithm: httplimit.Fixed, Key: httplimit.Global()},
		},
		OnError: httplimit.Local,
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello\n") })
	log.Fatal(http.ListenAndServe(":8080", m.Handler(mux)))
}

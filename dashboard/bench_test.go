package dashboard_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cellserver/cellserver/dashboard"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/server"
	"github.com/redis/go-redis/v9"
)

// BenchmarkStateJSON is the server's cost of one GET /dashboard/state.json
// (what an open page asks once a second), through the metrics handler,
// on a node with two policies and a few commands called, holding keys
// limiter keys: the cost must not grow with them (no key is visited).
// GET /metrics on the same node is measured beside it for scale.
//
//	go test -run '^$' -bench 'StateJSON' -benchmem ./dashboard
func BenchmarkStateJSON(b *testing.B) {
	for _, keys := range []int{0, 100000} {
		b.Run("keys="+strconv.Itoa(keys), func(b *testing.B) {
			h := benchNode(b, keys)
			for _, path := range []string{"/dashboard/state.json", "/metrics"} {
				b.Run(path, func(b *testing.B) {
					req := httptest.NewRequest("GET", path, nil)
					var size int
					b.ReportAllocs()
					for b.Loop() {
						w := httptest.NewRecorder()
						h.ServeHTTP(w, req)
						if w.Code != http.StatusOK {
							b.Fatalf("%s: %d", path, w.Code)
						}
						size = w.Body.Len()
					}
					b.ReportMetric(float64(size), "resp-bytes")
				})
			}
		})
	}
}

// benchNode starts a server with policies and keys limiter keys, and
// returns its metrics handler (served in process, no HTTP round trip).
func benchNode(b *testing.B, keys int) http.Handler {
	dir := b.TempDir()
	pol := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(pol, []byte(policyFile), 0o600); err != nil {
		b.Fatal(err)
	}
	var src server.MetricsSources
	srv, addr := servertest.Start(b, server.Config{MetricsAddr: "127.0.0.1:0", Policies: pol,
		Metrics: func(s server.MetricsSources) http.Handler { src = s; return metrics.ServerHandler(s) }})
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	pipe := rdb.Pipeline()
	for i := range keys {
		pipe.Do(ctx, "CL.THROTTLE", "user:"+strconv.Itoa(i), 10, 100, 60)
		if i%1000 == 999 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	pipe.Exec(ctx)
	for i := range 50 {
		rdb.Do(ctx, "CL.APPLY", "api:"+strconv.Itoa(i%5), "api")
		rdb.Do(ctx, "CL.APPLY", "next:"+strconv.Itoa(i%5), "api-next")
		rdb.Do(ctx, "PING")
		rdb.Do(ctx, "GET", "nosuch")
	}
	if src.Commands == nil {
		b.Fatal("the metrics handler was not built")
	}
	_ = srv
	return metrics.ServerHandler(src)
}

// TestPageWeight: the page stays small (it is served on every open of
// the dashboard and embedded in the binary).
func TestPageWeight(t *testing.T) {
	if n := dashboard.PageBytes(); n > 32<<10 {
		t.Errorf("the page is %d bytes, more than 32 KiB", n)
	}
	h := http.NewServeMux()
	dashboard.Register(h, server.MetricsSources{})
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/dashboard", nil))
	body, _ := io.ReadAll(w.Body)
	if w.Code != 200 || len(body) != dashboard.PageBytes() || w.Header().Get("Content-Security-Policy") == "" {
		t.Errorf("GET /dashboard: %d, %d bytes, CSP %q", w.Code, len(body), w.Header().Get("Content-Security-Policy"))
	}
	t.Logf("page: %d bytes", len(body))
}

package envoyrls_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cellserver/cellserver/internal/binproc"
	"github.com/cellserver/cellserver/internal/testwait"
)

// TestMain removes the binary binproc.Binary builds for
// BenchmarkShouldRateLimitServerAllocs, once the tests have run.
func TestMain(m *testing.M) { binproc.Main(m) }

var rlsListeningRE = regexp.MustCompile(`envoy rate limit service listening.* addr=(127\.0\.0\.1:\d+)`)

// serverMallocs reads go_memstats_mallocs_total (the heap objects the
// process has allocated since it started) from a /metrics page.
func serverMallocs(b *testing.B, url string) float64 {
	b.Helper()
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_mallocs_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatalf("%s: no go_memstats_mallocs_total (%v)", url, sc.Err())
	return 0
}

// BenchmarkShouldRateLimitServerAllocs measures what the server alone
// allocates per call, which BenchmarkShouldRateLimit's allocs/op cannot
// (its callers share the process): it runs the real cellserver binary
// as a child process with --rls-addr and --metrics-addr, makes b.N calls
// from this process (b.RunParallel callers on one connection, as
// BenchmarkShouldRateLimit), and reads the child's
// go_memstats_mallocs_total before and after. server-allocs/op is the
// difference over b.N, less what two back-to-back scrapes of /metrics
// allocate on their own (measured first). The sub-benchmark
// ShouldRateLimit makes calls of one descriptor of a 1000-per-second
// rule over 10000 values; health makes grpc.health.v1 Check calls on
// the same port, which the server answers without deciding anything:
// grpc-go's own share of a call on the server side.
//
//	go test -run '^$' -bench ShouldRateLimitServerAllocs -benchtime 100000x -count 3 ./envoyrls
func BenchmarkShouldRateLimitServerAllocs(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	ports, err := binproc.FreePorts(1)
	if err != nil {
		b.Fatal(err)
	}
	metricsURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])
	p, _ := binproc.StartServer(b, "--rls-addr", "127.0.0.1:0", "--rls-config", dir,
		"--metrics-addr", "127.0.0.1:"+strconv.Itoa(ports[0]))
	var rlsAddr string
	testwait.For(b, 20*time.Second, "the rate limit service's address in the log", func() (bool, string) {
		logs := p.Logs.String()
		if m := rlsListeningRE.FindStringSubmatch(logs); m != nil {
			rlsAddr = m[1]
			return true, ""
		}
		return false, logs
	})
	conn, err := grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	rls := pb.NewRateLimitServiceClient(conn)
	health := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	var n atomic.Int64
	calls := map[string]func() error{
		"ShouldRateLimit": func() error {
			i := n.Add(1)
			_, err := rls.ShouldRateLimit(ctx, request("bench", 1, []string{"user", strconv.FormatInt(i%10000, 10)}))
			return err
		},
		"health": func() error {
			_, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
			return err
		},
	}
	for _, name := range []string{"ShouldRateLimit", "health"} {
		call := calls[name]
		b.Run(name, func(b *testing.B) {
			for range 1000 { // warm up: the connection, pools, the limits' keys
				if err := call(); err != nil {
					b.Fatal(err)
				}
			}
			// What two scrapes allocate on their own, in the server.
			s0 := serverMallocs(b, metricsURL)
			scrape := serverMallocs(b, metricsURL) - s0
			b.SetParallelism(8)
			b.ResetTimer()
			m0 := serverMallocs(b, metricsURL)
			b.RunParallel(func(pb_ *testing.PB) {
				for pb_.Next() {
					if err := call(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			m1 := serverMallocs(b, metricsURL)
			b.StopTimer()
			b.ReportMetric((m1-m0-scrape)/float64(b.N), "server-allocs/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}

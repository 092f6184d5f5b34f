package envoyrls_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellserver/cellserver/envoyrls"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// BenchmarkShouldRateLimit measures ShouldRateLimit calls on loopback: a
// real cellserver (real clock), the front door, and b.RunParallel gRPC
// callers sharing one connection, each call one descriptor of a
// 1000-requests-per-second rule over 10000 distinct values.
//
//	go test -run '^$' -bench ShouldRateLimit -benchtime 5s ./envoyrls
func BenchmarkShouldRateLimit(b *testing.B) {
	for _, desc := range []int{1, 3} {
		b.Run("descriptors="+strconv.Itoa(desc), func(b *testing.B) {
			dir := b.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			srv, _ := servertest.Start(b, server.Config{RLSAddr: "127.0.0.1:0", RLSConfig: dir, RLS: envoyrls.New})
			conn, err := grpc.NewClient(srv.RLSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := pb.NewRateLimitServiceClient(conn)
			var n atomic.Int64
			b.SetParallelism(8) // 8 callers per CPU: throughput, not the latency of one caller
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb_ *testing.PB) {
				for pb_.Next() {
					i := n.Add(1)
					var kvs [][]string
					for d := 0; d < desc; d++ {
						kvs = append(kvs, []string{"user", strconv.FormatInt((i+int64(d)*3331)%10000, 10)})
					}
					if _, err := c.ShouldRateLimit(context.Background(), request("bench", 1, kvs...)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
		})
	}
}

package envoyrls_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
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

// BenchmarkRLSvsRESP compares, in one process and one run, the front door
// with the RESP port it stands beside: b.N ShouldRateLimit calls of one
// descriptor of a gcra rule (decided by CL.THROTTLE), then b.N CL.THROTTLE
// commands sent with go-redis, each by the same number of concurrent
// callers against the same server, over 10000 distinct keys each. It
// prints "rls/resp <ratio>": the calls per second of the front door over
// the commands per second of the RESP port.
//
//	go test -run '^$' -bench RLSvsRESP -benchtime 3s ./envoyrls
func BenchmarkRLSvsRESP(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000\n      algorithm: gcra\n      burst: 15\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	srv, addr := servertest.Start(b, server.Config{RLSAddr: "127.0.0.1:0", RLSConfig: dir, RLS: envoyrls.New})
	conn, err := grpc.NewClient(srv.RLSAddr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	const callers = 16 // as BenchmarkShouldRateLimit on 2 CPUs
	// run has callers goroutines make n calls between them, and returns
	// the calls per second.
	run := func(n int, call func(i int64) error) float64 {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1)
					if i > int64(n) {
						return
					}
					if err := call(i); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		return float64(n) / time.Since(start).Seconds()
	}
	ctx := context.Background()
	b.ResetTimer()
	rls := run(b.N, func(i int64) error {
		_, err := c.ShouldRateLimit(ctx, request("bench", 1, []string{"user", strconv.FormatInt(i%10000, 10)}))
		return err
	})
	resp := run(b.N, func(i int64) error {
		return rc.Do(ctx, "CL.THROTTLE", "resp:user="+strconv.FormatInt(i%10000, 10), 15, 1000, 1, 1).Err()
	})
	b.StopTimer()
	b.ReportMetric(rls, "rls-calls/s")
	b.ReportMetric(resp, "resp-calls/s")
	b.ReportMetric(rls/resp, "rls/resp")
	fmt.Printf("rls/resp %.3f\n", rls/resp)
}

package envoyrls_test

import (
	"context"
	"fmt"
	"net"
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
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/cellserver/cellserver/envoyrls"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/server"
)

// BenchmarkShouldRateLimit measures ShouldRateLimit calls on loopback: a
// real cellserver (real clock), the front door, and b.RunParallel gRPC
// callers sharing one connection, each call one descriptor of a
// 1000-requests-per-second rule over 10000 distinct values.
//
//	go test -run '^$' -bench 'ShouldRateLimit$' -benchtime 5s ./envoyrls
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
// descriptor of a gcra rule (decided by CL.THROTTLE) and b.N CL.THROTTLE
// commands sent with go-redis, in ten alternating turns, each by the same
// 16 concurrent callers against the same server, over 10000 distinct keys
// each. It
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
	// run has callers goroutines make the calls from..to-1 between them,
	// and returns the time they took.
	run := func(from, to int, call func(i int64) error) time.Duration {
		var next atomic.Int64
		next.Store(int64(from))
		var wg sync.WaitGroup
		start := time.Now()
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= int64(to) {
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
		return time.Since(start)
	}
	ctx := context.Background()
	rlsCall := func(i int64) error {
		_, err := c.ShouldRateLimit(ctx, request("bench", 1, []string{"user", strconv.FormatInt(i%10000, 10)}))
		return err
	}
	respCall := func(i int64) error {
		return rc.Do(ctx, "CL.THROTTLE", "resp:user="+strconv.FormatInt(i%10000, 10), 15, 1000, 1, 1).Err()
	}
	// The two in turns, a tenth of b.N at a time each, so that a change
	// of the machine's load during the run weighs on both alike.
	const turns = 10
	var rlsTime, respTime, rlsCPU, respCPU time.Duration
	b.ResetTimer()
	for t := range turns {
		from, to := b.N*t/turns, b.N*(t+1)/turns
		c0 := cpuTime()
		rlsTime += run(from, to, rlsCall)
		c1 := cpuTime()
		respTime += run(from, to, respCall)
		rlsCPU, respCPU = rlsCPU+c1-c0, respCPU+cpuTime()-c1
	}
	rls := float64(b.N) / rlsTime.Seconds()
	resp := float64(b.N) / respTime.Seconds()
	if rlsCPU > 0 && respCPU > 0 {
		// The process's CPU time per call, server and callers together:
		// what the machine's load moves least.
		b.ReportMetric(float64(rlsCPU.Microseconds())/float64(b.N), "rls-cpu-µs/call")
		b.ReportMetric(float64(respCPU.Microseconds())/float64(b.N), "resp-cpu-µs/call")
	}
	b.StopTimer()
	b.ReportMetric(rls, "rls-calls/s")
	b.ReportMetric(resp, "resp-calls/s")
	b.ReportMetric(rls/resp, "rls/resp")
	if b.N > 1 { // not the probe run of one call
		fmt.Printf("rls/resp %.3f\n", rls/resp)
	}
}

// floorService answers every call with the same response, as the front
// door answers a descriptor within its limit, without deciding anything.
type floorService struct {
	pb.UnimplementedRateLimitServiceServer
}

func (floorService) ShouldRateLimit(context.Context, *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	return &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{{
		Code: pb.RateLimitResponse_OK, CurrentLimit: &pb.RateLimitResponse_RateLimit{RequestsPerUnit: 1000, Unit: pb.RateLimitResponse_RateLimit_SECOND},
		LimitRemaining: 999, DurationUntilReset: durationpb.New(time.Second)}}}, nil
}

// BenchmarkGRPCFloor is BenchmarkShouldRateLimit/descriptors=1 against a
// bare gRPC server answering a constant response: what grpc-go costs, on
// both sides of the call, before the front door does anything. Its
// allocs/op subtracted from BenchmarkShouldRateLimit's are the front
// door's own (request decoding, deciding, the response).
//
//	go test -run '^$' -bench 'GRPCFloor|ShouldRateLimit$/descriptors=1' -benchmem ./envoyrls
func BenchmarkGRPCFloor(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(g, floorService{})
	go g.Serve(ln)
	defer g.Stop()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	var n atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb_ *testing.PB) {
		for pb_.Next() {
			i := n.Add(1)
			if _, err := c.ShouldRateLimit(context.Background(), request("bench", 1, []string{"user", strconv.FormatInt(i%10000, 10)})); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

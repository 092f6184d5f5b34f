// Command rlsflood measures what unauthenticated calls carrying large
// requests cost the Envoy gRPC port (--rls-addr) of a cellserver with
// --requirepass, for bench/README.md and issue #26.
//
//	go run ./bench/rlsflood -bin /tmp/cellserver                 # 200 calls of 4 MB, 3 rounds
//	go run ./bench/rlsflood -bin /tmp/cellserver -calls 50 -size 1000000
//
// It starts -bin on two free 127.0.0.1 ports (RESP and gRPC) with a
// password and a one-rule configuration, then runs -rounds rounds of
// -calls concurrent ShouldRateLimit calls without the token, each with one
// descriptor value of -size bytes, spread over -conns connections. Meanwhile
// a RESP client with the password sends PING, and a gRPC client with the
// token sends small ShouldRateLimit calls, one after another; their
// latencies are reported (measured by a child process, rlsflood -probe,
// so that the flood's own work in this process does not delay them). At
// the end it prints the server's peak RSS
// (VmHWM of /proc/<pid>/status, Linux) and its RSS at start, the calls by
// status code, and stops the server. Bounded by -rounds × -calls calls
// and -timeout; loopback only.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const password = "flood-pw"

func main() {
	bin := flag.String("bin", "", "the cellserver binary to run (required)")
	calls := flag.Int("calls", 200, "concurrent unauthenticated calls per round")
	size := flag.Int("size", 4_000_000, "bytes of each call's descriptor value (gRPC's default maximum is 4 MiB)")
	conns := flag.Int("conns", 10, "gRPC connections the calls are spread over")
	rounds := flag.Int("rounds", 3, "rounds of calls")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	probe := flag.String("probe", "", "internal: `RESP,gRPC` addresses to probe until stdin closes")
	flag.Parse()
	if *probe != "" {
		if err := runProbe(*probe, *timeout); err != nil {
			fmt.Fprintln(os.Stderr, "rlsflood -probe:", err)
			os.Exit(1)
		}
		return
	}
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "rlsflood: -bin is required")
		os.Exit(2)
	}
	if err := run(*bin, *calls, *size, *conns, *rounds, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "rlsflood:", err)
		os.Exit(1)
	}
}

func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// procStatus reads a field of /proc/<pid>/status in MB.
func procStatus(pid int, field string) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

func percentiles(d []time.Duration) string {
	if len(d) == 0 {
		return "none"
	}
	slices.Sort(d)
	at := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(d), at(0.5).Round(10*time.Microsecond),
		at(0.99).Round(10*time.Microsecond), d[len(d)-1].Round(10*time.Microsecond))
}

func request(value string) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: "flood", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: value}}}}}
}

func run(bin string, calls, size, nconns, rounds int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "rlsflood")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "flood.yaml")
	if err := os.WriteFile(cfg, []byte("domain: flood\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: second\n      requests_per_unit: 1000000\n"), 0o600); err != nil {
		return err
	}
	respAddr, err := freePort()
	if err != nil {
		return err
	}
	rlsAddr, err := freePort()
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "--addr", respAddr, "--requirepass", password, "--rls-addr", rlsAddr, "--rls-config", cfg)
	cmd.Stderr, err = os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid

	rdb := redis.NewClient(&redis.Options{Addr: respAddr, Password: password, DisableIdentity: true, PoolSize: 1})
	defer rdb.Close()
	for rdb.Ping(ctx).Err() != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("the server did not answer PING: %w", ctx.Err())
		}
		time.Sleep(50 * time.Millisecond)
	}
	dial := func() (*grpc.ClientConn, error) {
		return grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	}
	good, err := dial()
	if err != nil {
		return err
	}
	defer good.Close()
	authed := metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer "+password))
	for {
		if _, err := pb.NewRateLimitServiceClient(good).ShouldRateLimit(authed, request("probe"), grpc.WaitForReady(true)); err == nil {
			break
		} else if ctx.Err() != nil {
			return fmt.Errorf("the gRPC port did not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	startRSS, _ := procStatus(pid, "VmRSS")

	clients := make([]pb.RateLimitServiceClient, nconns)
	for i := range clients {
		c, err := dial()
		if err != nil {
			return err
		}
		defer c.Close()
		clients[i] = pb.NewRateLimitServiceClient(c)
	}
	big := request(strings.Repeat("x", size))

	// The probes, in a child process until its stdin closes.
	self, err := os.Executable()
	if err != nil {
		return err
	}
	prober := exec.CommandContext(ctx, self, "-probe", respAddr+","+rlsAddr, "-timeout", timeout.String())
	stdin, err := prober.StdinPipe()
	if err != nil {
		return err
	}
	var probeOut strings.Builder
	prober.Stdout, prober.Stderr = &probeOut, &probeOut
	if err := prober.Start(); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond) // a few probes before the flood

	codesSeen := map[codes.Code]int{}
	var mu sync.Mutex
	began := time.Now()
	for range rounds {
		var wg sync.WaitGroup
		for i := range calls {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := clients[i%nconns].ShouldRateLimit(ctx, big) // no token
				mu.Lock()
				codesSeen[status.Code(err)]++
				mu.Unlock()
			}()
		}
		wg.Wait()
	}
	flood := time.Since(began)
	stdin.Close()
	probeErr := prober.Wait()
	peak, err := procStatus(pid, "VmHWM")
	if err != nil {
		return err
	}
	endRSS, _ := procStatus(pid, "VmRSS")
	fmt.Printf("binary: %s\n", bin)
	fmt.Printf("flood: %d rounds x %d concurrent unauthenticated calls of %d bytes over %d connections, %v\n",
		rounds, calls, size, nconns, flood.Round(time.Millisecond))
	fmt.Printf("codes: %v\n", codesSeen)
	fmt.Printf("server RSS: %d MB at start, peak (VmHWM) %d MB, %d MB at the end\n", startRSS, peak, endRSS)
	fmt.Print(probeOut.String())
	return probeErr
}

// runProbe sends, in turn, PING on the RESP port (with the password) and a
// small ShouldRateLimit with the token, every 5 ms, until stdin closes;
// then it prints their latencies.
func runProbe(addrs string, timeout time.Duration) error {
	respAddr, rlsAddr, ok := strings.Cut(addrs, ",")
	if !ok {
		return fmt.Errorf("-probe %q: want RESP,gRPC", addrs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, Password: password, DisableIdentity: true, PoolSize: 1})
	defer rdb.Close()
	conn, err := grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rc := pb.NewRateLimitServiceClient(conn)
	authed := metadata.NewOutgoingContext(ctx, metadata.Pairs("authorization", "Bearer "+password))
	done := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(done) }()
	var pings, rlsCalls []time.Duration
	report := func() {
		fmt.Printf("PING on the RESP port during the flood: %s\n", percentiles(pings))
		fmt.Printf("authenticated ShouldRateLimit during the flood: %s\n", percentiles(rlsCalls))
	}
	for i := 0; ; i++ {
		select {
		case <-done:
			report()
			return nil
		default:
		}
		t := time.Now()
		if err := rdb.Ping(ctx).Err(); err != nil {
			report()
			return fmt.Errorf("PING: %w", err)
		}
		pings = append(pings, time.Since(t))
		t = time.Now()
		if _, err := rc.ShouldRateLimit(authed, request("probe"+strconv.Itoa(i))); err != nil {
			report()
			return fmt.Errorf("authenticated ShouldRateLimit: %w", err)
		}
		rlsCalls = append(rlsCalls, time.Since(t))
		time.Sleep(5 * time.Millisecond)
	}
}

package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellserver/cellserver/internal/binproc"
)

var rlsAddrRE = regexp.MustCompile(`envoy rate limit service listening.* addr=(127\.0\.0\.1:\d+)`)

// TestRLSSIGHUP: with --rls-addr and --rls-config, SIGHUP reloads the
// Envoy rate limit configuration in the real binary: a changed limit
// takes effect; an invalid file is refused on SIGHUP, logged with its
// problems, and the configuration in use stays. The requests carry a
// hits_addend above or below the limit, so their answers do not depend on
// the window the real clock is in.
func TestRLSSIGHUP(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := binproc.Binary(t)
	file := filepath.Join(t.TempDir(), "rls.yaml")
	write := func(src string) {
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rule := func(n string) string {
		return "domain: web\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: " + n + "\n"
	}
	write(rule("2"))
	p := startSig(t, bin, "--rls-addr", "127.0.0.1:0", "--rls-config", file)
	var rlsAddr string
	deadline := time.After(20 * time.Second)
	for rlsAddr == "" {
		select {
		case l := <-p.lines:
			if m := rlsAddrRE.FindStringSubmatch(l); m != nil {
				rlsAddr = m[1]
			}
		case err := <-p.exited:
			t.Fatalf("cellserver exited (%v)\n%s", err, p.Logs())
		case <-deadline:
			t.Fatalf("no rate limit service address logged within 20s\n%s", p.Logs())
		}
	}
	conn, err := grpc.NewClient(rlsAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	call := func(hits uint32) *pb.RateLimitResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r, err := c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "web", HitsAddend: hits,
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "u"}}}}})
		if err != nil {
			t.Fatalf("ShouldRateLimit: %v", err)
		}
		return r
	}
	check := func(when string, hits uint32, code pb.RateLimitResponse_Code, limit uint32) {
		t.Helper()
		r := call(hits)
		if r.OverallCode != code || r.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() != limit {
			t.Fatalf("%s: %d hits answered %v, want %v with a limit of %d", when, hits, r, code, limit)
		}
	}
	check("before the reload", 3, pb.RateLimitResponse_OVER_LIMIT, 2)

	write(rule("5"))
	p.signal(t, syscall.SIGHUP)
	p.waitLine(t, "envoy rate limit service: configuration reloaded", file)
	check("after the reload", 3, pb.RateLimitResponse_OK, 5)

	write("domain: web\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n  - {key: x, bogus: 1}\n")
	p.signal(t, syscall.SIGHUP)
	p.waitLine(t, "configuration refused, the previous one stays", "unknown key 'bogus'")
	check("after a refused reload", 6, pb.RateLimitResponse_OVER_LIMIT, 5)
	check("after a refused reload", 1, pb.RateLimitResponse_OK, 5)
	p.alive(t, "a refused reload")
}

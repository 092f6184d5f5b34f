package envoyrls_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cellserver/cellserver/envoyrls"
	"github.com/cellserver/cellserver/internal/servertest"
	"github.com/cellserver/cellserver/internal/testwait"
	"github.com/cellserver/cellserver/server"
)

// loopback makes a harness's front door send every command to the RESP
// port (no in-process client): the path the in-process one must match.
func loopback(c *server.Config) {
	c.RLS = func(src server.RLSSources) (server.RLSServer, error) {
		src.Local = nil
		return envoyrls.New(src)
	}
}

// equivYAML has a rule of every algorithm.
const equivYAML = `domain: eq
descriptors:
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: sliding
    rate_limit: {algorithm: sliding, unit: second, requests_per_unit: 4}
  - key: log
    rate_limit: {algorithm: slidinglog, period: 1500ms, requests_per_unit: 3}
  - key: gcra
    rate_limit: {algorithm: gcra, unit: second, requests_per_unit: 3, burst: 1}
  - key: free
    rate_limit: {unlimited: true}
`

// clientCount is how many clients CLIENT LIST shows on addr (the asking
// one included).
func clientCount(t *testing.T, addr string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true, Protocol: 2})
	defer c.Close()
	list, err := c.Do(context.Background(), "CLIENT", "LIST").Text()
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(strings.TrimSpace(list), "\n") + 1
}

// TestInProcessMatchesRESP: the front door deciding in process answers
// exactly as the one sending its commands to the RESP port, call after
// call under the same clock (every algorithm, several hits, refunds,
// reads, over the limit, windows passing), leaves the same counters, and
// opens no connection to the RESP port.
func TestInProcessMatchesRESP(t *testing.T) {
	local := startRLS(t, map[string]string{"eq.yaml": equivYAML}, nil)
	remote := startRLS(t, map[string]string{"eq.yaml": equivYAML}, loopback)
	type step struct {
		advance time.Duration
		req     *pb.RateLimitRequest
	}
	refund := request("eq", 2, []string{"fixed", "a"}, []string{"sliding", "a"}, []string{"gcra", "a"})
	for _, d := range refund.Descriptors {
		d.IsNegativeHits = true
	}
	read := request("eq", 1, []string{"fixed", "a"}, []string{"log", "a"})
	for _, d := range read.Descriptors {
		d.HitsAddend = wrapperspb.UInt64(0)
	}
	override := request("eq", 1, []string{"fixed", "o"})
	override.Descriptors[0].Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND}
	var steps []step
	for i := range 4 {
		steps = append(steps, step{0, request("eq", uint32(i+1), []string{"fixed", "a"}, []string{"sliding", "a"}, []string{"log", "a"},
			[]string{"gcra", "a"}, []string{"free", "a"}, []string{"nope", "a"})})
	}
	steps = append(steps, step{200 * time.Millisecond, refund}, step{0, read}, step{0, override}, step{0, override},
		step{700 * time.Millisecond, request("eq", 1, []string{"sliding", "a"}, []string{"log", "a"}, []string{"gcra", "a"})},
		step{time.Minute, request("eq", 3, []string{"fixed", "a"}, []string{"log", "b"}, []string{"gcra", "b"})})
	for i, s := range steps {
		local.clock.Advance(s.advance)
		remote.clock.Advance(s.advance)
		got, gerr := local.client.ShouldRateLimit(context.Background(), s.req)
		want, werr := remote.client.ShouldRateLimit(context.Background(), s.req)
		if status.Code(gerr) != status.Code(werr) || !proto.Equal(got, want) {
			t.Fatalf("step %d: in process %v, %v\nover RESP %v, %v", i, got, gerr, want, werr)
		}
	}
	if n := clientCount(t, local.resp); n != 1 {
		t.Errorf("the in-process front door's server lists %d clients, want 1 (this test's)", n)
	}
	if n := clientCount(t, remote.resp); n < 2 {
		t.Errorf("the loopback front door's server lists %d clients, want the front door's too", n)
	}
	ctx := context.Background()
	lc := redis.NewClient(&redis.Options{Addr: local.resp, DisableIdentity: true, Protocol: 2})
	defer lc.Close()
	rc := redis.NewClient(&redis.Options{Addr: remote.resp, DisableIdentity: true, Protocol: 2})
	defer rc.Close()
	keys, err := rc.Keys(ctx, "rls:*").Result()
	if err != nil || len(keys) < 2 {
		t.Fatalf("keys over RESP: %v %v", keys, err)
	}
	for _, k := range keys {
		g, gerr := lc.Do(ctx, "CL.INFO", k).Slice()
		w, werr := rc.Do(ctx, "CL.INFO", k).Slice()
		if gerr != nil || werr != nil || len(g) != len(w) {
			t.Fatalf("CL.INFO %s: in process %v %v, over RESP %v %v", k, g, gerr, w, werr)
		}
		for i := range g {
			if g[i] != w[i] {
				t.Fatalf("CL.INFO %s: in process %v, over RESP %v", k, g, w)
			}
		}
	}
}

// TestInProcessSyncReplicas: with --sync-replicas, a decision made in
// process is refused as over RESP while the replica is missing (the
// fence: NOREPLICAS, the same status and message on both paths); once the
// replica is online, its reply is held until the replica acknowledged it:
// the replica has the counter when the call returns.
func TestInProcessSyncReplicas(t *testing.T) {
	sync := func(c *server.Config) { c.SyncReplicas, c.SyncReplicasTimeout = 1, 20*time.Second }
	local := startRLS(t, map[string]string{"eq.yaml": equivYAML}, sync)
	remote := startRLS(t, map[string]string{"eq.yaml": equivYAML}, func(c *server.Config) { sync(c); loopback(c) })
	req := request("eq", 1, []string{"fixed", "s"})
	_, gerr := local.client.ShouldRateLimit(context.Background(), req)
	_, werr := remote.client.ShouldRateLimit(context.Background(), req)
	if gerr == nil || status.Code(gerr) != status.Code(werr) || status.Convert(gerr).Message() != status.Convert(werr).Message() {
		t.Fatalf("without the replica: in process %v, over RESP %v", gerr, werr)
	}
	if !strings.Contains(gerr.Error(), "NOREPLICAS") || status.Code(gerr) != codes.Unavailable {
		t.Fatalf("without the replica: %v, want Unavailable NOREPLICAS", gerr)
	}

	host, port, _ := net.SplitHostPort(local.resp)
	_, raddr := servertest.Start(t, server.Config{ReplicaOf: host + " " + port})
	repl := local.srv.Commands().Replication()
	testwait.Until(t, 20*time.Second, "the replica online", func() bool { return !repl.SyncFenced() })
	replica := redis.NewClient(&redis.Options{Addr: raddr, DisableIdentity: true, Protocol: 2})
	defer replica.Close()
	ctx := context.Background()
	for i := range 3 {
		held := repl.SyncStats().Held
		key := "h" + strconv.Itoa(i)
		r, err := local.client.ShouldRateLimit(ctx, request("eq", 2, []string{"fixed", key}))
		if err != nil || r.OverallCode != OK {
			t.Fatalf("call %d with the replica online: %v, %v", i, r, err)
		}
		if got := repl.SyncStats().Held; got <= held {
			t.Fatalf("call %d: replies held %d before, %d after: the decision did not wait for the replica", i, held, got)
		}
		// No WAIT: the reply left once the replica had the change.
		n, err := replica.Exists(ctx, "rls:eq:fixed="+key).Result()
		if err != nil || n != 1 {
			t.Fatalf("call %d: the replica has %d counters, %v, as the call returns", i, n, err)
		}
	}
}

// TestAnswerAllocs: once a counter exists, the front door answers a call
// of one descriptor in process with a single allocation of its own, the
// counter's key (KeyFor); the matched values, the results and the
// response come from buffers reused from call to call. (What grpc-go
// and protobuf allocate around it: BenchmarkShouldRateLimitServerAllocs.)
func TestAnswerAllocs(t *testing.T) {
	h := startRLS(t, map[string]string{"a.yaml": "domain: a\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 1000000}\n"}, nil)
	req := request("a", 1, []string{"user", "u1"})
	h.call(t, req, &pb.RateLimitResponse{OverallCode: pb.RateLimitResponse_OK, Statuses: []*pb.RateLimitResponse_DescriptorStatus{
		status_(pb.RateLimitResponse_OK, 1000000, pb.RateLimitResponse_RateLimit_HOUR, 999999, time.Hour)}})
	n, err := h.fd.AnswerAllocs(req, 100)
	if err != nil {
		t.Fatal(err)
	}
	if n > 1 {
		t.Fatalf("%v allocations per call, want 1 (the key)", n)
	}
}
